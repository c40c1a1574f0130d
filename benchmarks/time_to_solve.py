"""Time to solve an env: until 10 deterministic test episodes reach a mean threshold.

For each seed, runs each algorithm in turn (dqn s0, ppo s0, dqn s1, ...) through
``make_trainer(algo, env, seed=s, show_progress=False, stop_fn=best >= threshold)``. The
clock starts at the first ``next()`` (training, warm-up and tests included; env and network
setup excluded) and stops when the trainer stops. Prints one line per run, then a markdown
table of median / min / max; ``--out`` appends one JSON line per run. CartPole-v1's
threshold is 475; Pendulum-v1 has none, the peers' figures (``baselines.md``) use -250.

    python benchmarks/time_to_solve.py --seeds 0 1 2 3 4 --algos dqn ppo --out runs.jsonl
    python benchmarks/time_to_solve.py --env Pendulum-v1 --threshold -250 --algos sac
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any

import gymnasium as gym
import torch

from epochtrain.factory import make_trainer
from epochtrain.registry import ALGORITHMS

THRESHOLDS = {"CartPole-v1": 475.0}
"""Default thresholds per env; other envs need ``--threshold``."""


def run_one(
    algo: str, env_id: str, threshold: float, seed: int, overrides: dict[str, Any]
) -> dict[str, Any]:
    """Train ``algo`` with ``seed`` until it stops; return the run's figures."""
    trainer = make_trainer(
        algo,
        env_id,
        seed=seed,
        show_progress=False,
        stop_fn=lambda best: best >= threshold,
        **overrides,
    )
    start = time.perf_counter()
    for _ in trainer:
        pass
    seconds = time.perf_counter() - start
    info = trainer.info_stat()
    return {
        "algo": algo,
        "env": env_id,
        "threshold": threshold,
        "seed": seed,
        "seconds": round(seconds, 3),
        "env_steps": info.env_step,
        "gradient_steps": info.gradient_step,
        "epochs": info.epoch,
        "best_test_return": info.best_test_return,
        "reached": info.best_test_return >= threshold,
        "test_seconds": round(info.test_time, 3),
        "stop_reason": trainer.stop_reason,
        "overrides": {k: repr(v) for k, v in overrides.items()},
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
        "python": platform.python_version(),
        "argv": sys.argv,
    }


def summary_table(runs: list[dict[str, Any]], algos: list[str]) -> str:
    """Markdown table: per algorithm, seeds reached and median (min-max) seconds/steps."""
    lines = [
        "| algo | seeds reached | seconds median (min–max) | env steps median (min–max) "
        "| test seconds median | seconds of every run |",
        "|---|---|---|---|---|---|",
    ]
    for algo in algos:
        rows = [r for r in runs if r["algo"] == algo]
        if not rows:
            continue
        secs = [r["seconds"] for r in rows]
        steps = [r["env_steps"] for r in rows]
        tests = [r["test_seconds"] for r in rows]
        reached = sum(r["reached"] for r in rows)
        lines.append(
            f"| {algo} | {reached}/{len(rows)} "
            f"| **{statistics.median(secs):.1f}** ({min(secs):.1f}–{max(secs):.1f}) "
            f"| **{statistics.median(steps):,.0f}** ({min(steps):,}–{max(steps):,}) "
            f"| {statistics.median(tests):.2f} "
            f"| {', '.join(f'{s:.1f}' for s in secs)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse the flags, run every (seed, algo) pair, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    online = sorted(name for name, entry in ALGORITHMS.items() if entry.kind != "offline")
    parser.add_argument("--algos", nargs="+", default=["dqn", "ppo"], choices=online)
    parser.add_argument("--env", default="CartPole-v1", help="gymnasium env id")
    parser.add_argument(
        "--threshold", type=float, default=None, help="mean test return that solves the env"
    )
    parser.add_argument("--out", default=None, help="append one JSON line per run here")
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="ALGO.NAME=JSON",
        help="override a make_trainer parameter, e.g. ppo.step_per_epoch=1024",
    )
    args = parser.parse_args(argv)
    threshold = args.threshold if args.threshold is not None else THRESHOLDS.get(args.env)
    if threshold is None:
        parser.error(f"--threshold is needed for {args.env} (no default threshold)")
    overrides: dict[str, dict[str, Any]] = {algo: {} for algo in args.algos}
    for item in args.set:
        key, _, value = item.partition("=")
        algo, _, name = key.partition(".")
        overrides.setdefault(algo, {})[name] = json.loads(value)
    torch.set_num_threads(1)
    runs: list[dict[str, Any]] = []
    for seed in args.seeds:
        for algo in args.algos:
            run = run_one(algo, args.env, threshold, seed, overrides[algo])
            runs.append(run)
            print(
                f"{algo} seed={seed}: {run['seconds']:.2f} s, {run['env_steps']} env steps, "
                f"best test {run['best_test_return']:.1f}, reached={run['reached']}, "
                f"test {run['test_seconds']:.2f} s",
                flush=True,
            )
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(run) + "\n")
    print()
    print(summary_table(runs, args.algos))


if __name__ == "__main__":
    main()
