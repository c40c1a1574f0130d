"""PPO on CartPole-v1: the preset against fewer passes per rollout, interleaved per seed.

For each seed, runs the preset, then each variant, in one process, each until 10
deterministic test episodes reach 475 (the time-to-solve protocol of
``time_to_solve.py``). Prints one JSON line per run (``v`` variant, ``seed``, ``s``
seconds, ``steps`` env steps, ``solved``) and the medians; ``--out`` appends the lines.

    python benchmarks/ppo_passes.py --seeds 0 1 2 3 4 5 6 7 8 9
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from epochtrain.factory import make_trainer

VARIANTS: dict[str, dict[str, Any]] = {
    "A": {},  # the preset: 20 passes over each 256-step rollout
    "B": {"repeat_per_collect": 10},
    "C": {"repeat_per_collect": 10, "step_per_collect": 512},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--out", default=None, help="append one JSON line per run here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for seed in args.seeds:
        for name, overrides in VARIANTS.items():
            trainer = make_trainer(
                "ppo",
                "CartPole-v1",
                seed=seed,
                show_progress=False,
                stop_fn=lambda best: best >= 475.0,
                **overrides,
            )
            start = time.perf_counter()
            for _ in trainer:
                pass
            elapsed = time.perf_counter() - start
            info = trainer.info_stat()
            solved = info.best_test_return >= 475.0
            seconds[name].append(elapsed if solved else float("inf"))
            record = {"v": name, "seed": seed, "s": round(elapsed, 2)}
            line = json.dumps({**record, "steps": info.env_step, "solved": solved})
            print(line, flush=True)
            if args.out is not None:
                with open(args.out, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
    for name, values in seconds.items():
        print(f"{name} {VARIANTS[name]}: median {statistics.median(values):.2f} s")


if __name__ == "__main__":
    main()
