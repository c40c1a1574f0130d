"""Instruction counts of one gradient step, ours or the minimal update (``step_cost.py``).

Wall-clock ratios on this machine move by 10% between runs; ``valgrind --tool=callgrind``
counts instructions, the same on every run of the same code. Run the script under it twice
with the same algorithm, once with ``N`` steps and once with 0, and divide the difference
by ``N`` (the set-up, and 5 warm-up steps of each contender, are in both)::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/step_instructions.py ppo ours 50      # "Collected : ..."
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/step_instructions.py ppo ours 0

To compare two commits, check the older one out in a worktree and put its ``src`` first
on ``PYTHONPATH``. A run takes about 4 minutes of one core; instructions are not seconds
(a cache miss costs more than an add), so this tells which of two versions does less work,
and ``step_cost.py`` what it is worth in time.
"""

from __future__ import annotations

import argparse

import torch
from step_cost import GRAD_ALGOS, GradContenders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("algo", choices=GRAD_ALGOS)
    parser.add_argument("contender", choices=["ours", "minimal"])
    parser.add_argument("steps", type=int)
    args = parser.parse_args()
    torch.set_num_threads(1)
    contenders = GradContenders(args.algo, seed=0)
    for _ in range(5):
        contenders.step_ours()
        contenders.step_minimal()
    step = contenders.step_ours if args.contender == "ours" else contenders.step_minimal
    for _ in range(args.steps):
        step()


if __name__ == "__main__":
    main()
