"""Wall-clock of off-policy training with and without ``async_collection``, interleaved.

For each task and seed, runs the same tuned preset twice in one process, synchronous then
asynchronous (A, B, A, B, ...), with ``torch.set_num_threads(1)``, a fixed number of
epochs and no stop_fn. The clock is the trainer's own: ``train_seconds`` is
``total_time - test_time`` (the test episodes are excluded because their length depends on
how well each policy plays); setup is excluded. Prints one line per run (env steps per
second of training, update-to-data ratio, seconds of collection that overlapped gradient
steps), the per-seed ratio async / sync, and per task the median ratio (below 1: async is
faster). ``--out`` appends one JSON line per run. Measure on a quiet machine: the ratio is
the figure, and other jobs on the cores change it.

    python benchmarks/async_collection.py --seeds 0 1 2 3 4 --epochs 3 --out async.jsonl
    python benchmarks/async_collection.py --env-backend async   # envs in their own processes

``--env-backend`` sets the runs' ``env_backend``: ``sync`` (the default, gymnasium's
SyncVectorEnv) or ``async`` (AsyncVectorEnv: each env steps in its own process, and the
trainer's thread waits on a pipe without the GIL, which is where overlapping collection
with gradient steps can pay); with ``--baseline-sync`` the synchronous run of each pair
keeps sync envs, so the ratio compares async collection over process envs with the
default setting.
    python benchmarks/async_collection.py --tasks sac-pendulum --smoke   # ~10 s check
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from typing import Any

import torch

from epochtrain.experiment.runs import close_envs
from epochtrain.factory import make_trainer
from epochtrain.trainer import OffpolicyTrainer

TASKS: dict[str, tuple[str, str]] = {
    "sac-pendulum": ("sac", "Pendulum-v1"),
    "dqn-cartpole": ("dqn", "CartPole-v1"),
}
"""Task name to (algorithm, env id); each runs its tuned preset (epochtrain.presets)."""

SMOKE: dict[str, dict[str, Any]] = {
    "sac-pendulum": {"step_per_epoch": 128, "warmup_steps": 64},
    "dqn-cartpole": {"step_per_epoch": 256, "step_per_collect": 64, "warmup_steps": 64},
}
"""``--smoke`` overrides per task: a few seconds per run, to check that the script works."""


def run_one(
    task: str, seed: int, epochs: int, async_collection: bool, overrides: dict[str, Any]
) -> dict[str, Any]:
    """Train ``task``'s preset for ``epochs`` epochs; return the run's figures."""
    algo, env_id = TASKS[task]
    trainer = make_trainer(
        algo,
        env_id,
        seed=seed,
        max_epoch=epochs,
        stop_fn=None,
        show_progress=False,
        async_collection=async_collection,
        **overrides,
    )
    assert isinstance(trainer, OffpolicyTrainer)
    for _ in trainer:
        pass
    close_envs(trainer)  # an async env's processes end with the run
    state = trainer.state
    train_seconds = state.total_time - state.test_time
    return {
        "task": task,
        "seed": seed,
        "async_collection": async_collection,
        "env_backend": overrides.get("env_backend", "sync"),
        "epochs": state.epoch,
        "train_seconds": round(train_seconds, 3),
        "total_seconds": round(state.total_time, 3),
        "env_steps": state.env_step,
        "gradient_steps": state.gradient_step,
        "env_steps_per_second": round(state.env_step / train_seconds, 1),
        "utd_ratio": round(state.gradient_step / state.env_step, 4),
        "overlap_seconds": round(trainer.async_overlap_time, 3) if async_collection else 0.0,
        "collect_seconds": round(state.collect_time, 3),
        "update_seconds": round(state.update_time, 3),
        "best_test_return": state.best_test_return,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def _line(run: dict[str, Any]) -> str:
    mode = "async" if run["async_collection"] else "sync "
    return (
        f"{run['task']:<13} seed {run['seed']:<3} {mode} {run['env_backend']:<5} envs "
        f"{run['train_seconds']:8.2f} s  "
        f"{run['env_steps_per_second']:8.1f} env steps/s  UTD {run['utd_ratio']:.3f}  "
        f"overlap {run['overlap_seconds']:6.2f} s"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tasks",
        nargs="+",
        choices=sorted(TASKS),
        default=sorted(TASKS),
        help="tasks to run (default: all): sac-pendulum, dqn-cartpole (tuned presets)",
    )
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=[0, 1, 2], help="seeds (default: 0 1 2)"
    )
    parser.add_argument(
        "--epochs", type=int, default=3, help="epochs per run, no early stop (default: 3)"
    )
    parser.add_argument(
        "--episode-per-test",
        type=int,
        default=1,
        help="test episodes per epoch, on one test env (not timed; default: 1)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="one tiny epoch per run: a check, not a figure"
    )
    parser.add_argument(
        "--env-backend",
        choices=["sync", "async"],
        default="sync",
        help="the runs' env_backend (default: sync)",
    )
    parser.add_argument(
        "--baseline-sync",
        action="store_true",
        help="the synchronous run of each pair keeps sync envs",
    )
    parser.add_argument("--out", help="append one JSON line per run to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    overrides: dict[str, Any] = {"episode_per_test": args.episode_per_test, "num_test_envs": 1}
    epochs = 1 if args.smoke else args.epochs
    ratios: dict[str, list[float]] = {task: [] for task in args.tasks}
    for seed in args.seeds:
        for task in args.tasks:
            pair = []
            for async_collection in (False, True):
                backend = "sync" if args.baseline_sync and not async_collection else None
                extra = {
                    **overrides,
                    **(SMOKE[task] if args.smoke else {}),
                    "env_backend": backend or args.env_backend,
                }
                run = run_one(task, seed, epochs, async_collection, extra)
                print(_line(run), flush=True)
                if args.out:
                    with open(args.out, "a", encoding="utf-8") as f:
                        f.write(json.dumps(run) + "\n")
                pair.append(run["train_seconds"])
            ratio = pair[1] / pair[0]
            ratios[task].append(ratio)
            print(f"{task:<13} seed {seed:<3} ratio async/sync {ratio:.3f}", flush=True)
    print("\n| task | seeds | median ratio async/sync | per seed |")
    print("|---|---|---|---|")
    for task, values in ratios.items():
        per_seed = ", ".join(f"{v:.2f}" for v in values)
        print(f"| {task} | {len(values)} | {statistics.median(values):.3f} | {per_seed} |")


if __name__ == "__main__":
    main(sys.argv[1:])
