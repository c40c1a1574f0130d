"""Drawing an n-step minibatch: one gather per field against a sample then an n-step pass.

Inside a training-like loop (``step_cost.py``'s DQN, SAC and TD3 settings: the collect
steps' buffer writes, then a draw, then ``Policy.learn`` on it, so the caches are as cold as
in training), the two ways of drawing alternate draw by draw (A, B, B, A, ...):

* ``two-pass``: ``policy.process_sample(buffer.sample(batch_size), buffer)``: a one-step
  minibatch, then :meth:`ReplayBuffer.n_step_batch` gathers ``rew``, ``terminated``,
  ``truncated`` and ``obs_next`` again from the n-step table;
* ``one-pass``: ``policy.sample_batch(buffer, batch_size)`` (what the trainers call):
  ``buffer.sample(batch_size, n_step=n, gamma=g)`` gathers each field once.

Both give the same batch for the same seed (tests/data/test_buffer.py). Prints the
microseconds per draw of each and their ratio per algorithm::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sample_path.py --draws 2000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch
from step_cost import WRITES, GradContenders  # the same settings and buffers


def measure(algo: str, draws: int, seed: int) -> dict[str, float]:
    """Microseconds per draw of each path, alternating draw by draw."""
    setup = GradContenders(algo, seed)
    policy, buffer, bs = setup.policy, setup.buffer, setup.bs
    paths: dict[str, Callable[[], Any]] = {
        "two-pass": lambda: policy.process_sample(buffer.sample(bs), buffer),
        "one-pass": lambda: policy.sample_batch(buffer, bs),
    }
    rows, every = WRITES[algo]
    total = dict.fromkeys(paths, 0.0)
    for i in range(draws):
        order = list(paths) if i % 2 == 0 else list(reversed(paths))
        for name in order:
            if setup.steps % every == 0:
                for _ in range(rows):
                    buffer.add(*setup.rows[setup.next_row])
                    setup.next_row = (setup.next_row + 1) % len(setup.rows)
            setup.steps += 1
            start = time.perf_counter()
            batch = paths[name]()
            total[name] += time.perf_counter() - start
            policy.learn(batch)
    return {name: seconds / draws * 1e6 for name, seconds in total.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=["dqn", "sac", "td3"],
                        choices=["dqn", "dqn-per", "sac", "td3"])  # fmt: skip
    parser.add_argument("--draws", type=int, default=2000, help="draws per path")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print("| algorithm | two-pass µs/draw | one-pass µs/draw | one-pass / two-pass |")
    print("|---|---|---|---|")
    for algo in args.algos:
        us = measure(algo, args.draws, args.seed)
        ratio = us["one-pass"] / us["two-pass"]
        print(f"| {algo} | {us['two-pass']:.1f} | {us['one-pass']:.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
