"""The ``epochtrain`` command (also ``python -m epochtrain``): train from the shell.

``epochtrain train --algo ppo --env CartPole-v1 --seed 0 --max-epoch 10 --logdir runs/``
builds everything with :func:`epochtrain.make_trainer`, prints one line per epoch, writes
TensorBoard logs to ``<logdir>/<env>_<algo>_seed<seed>_<time>`` and ends with the mean test
return. Bad options exit with status 2 and a one-line message.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["build_parser", "main"]


def _algos() -> list[str]:
    from epochtrain.factory import DEFAULTS

    return sorted(DEFAULTS)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser; ``--help`` lists every option with its default."""
    fmt = argparse.ArgumentDefaultsHelpFormatter
    parser = _Parser(prog="epochtrain", description=__doc__.splitlines()[0], formatter_class=fmt)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    train = sub.add_parser(
        "train", help="train an algorithm on a gymnasium env", formatter_class=fmt
    )
    train.add_argument("--algo", choices=_algos(), required=True, help="algorithm to train")
    train.add_argument("--env", default="CartPole-v1", help="gymnasium env id")
    train.add_argument("--seed", type=int, default=0, help="seed of the run")
    train.add_argument(
        "--max-epoch",
        type=int,
        default=None,
        help="epochs to run (default: the algo's tuned value)",
    )
    train.add_argument(
        "--step-per-epoch", type=int, default=None, help="env steps per epoch (default: tuned)"
    )
    train.add_argument("--logdir", default="runs", help="TensorBoard log folder ('' disables)")
    train.add_argument(
        "--stop-at",
        type=float,
        default=None,
        help="stop once the mean test return reaches this (default: the env's reward threshold)",
    )
    train.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    train.add_argument("--quiet", action="store_true", help="do not print a line per epoch")
    train.add_argument("--device", default="cpu", help="torch device for the networks")
    train.add_argument(
        "--dataset",
        default=None,
        help="buffer file to learn from (offline algorithms: bc, td3bc, cql); "
        "record one with `epochtrain collect`",
    )
    return parser


def _train(args: argparse.Namespace) -> int:
    from epochtrain.factory import make_trainer

    overrides: dict[str, Any] = {
        "show_progress": not args.no_progress,
        "verbose": not args.quiet,
        "device": args.device,
    }
    if args.max_epoch is not None:
        overrides["max_epoch"] = args.max_epoch
    if args.step_per_epoch is not None:
        overrides["step_per_epoch"] = args.step_per_epoch
    if args.stop_at is not None:
        threshold = args.stop_at
        overrides["stop_fn"] = lambda best: best >= threshold
    if args.logdir:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path(args.logdir) / f"{args.env}_{args.algo}_seed{args.seed}_{stamp}"
        overrides["logdir"] = str(run_dir)
    try:
        if args.dataset is not None:
            from epochtrain.data import ReplayBuffer

            overrides["buffer"] = ReplayBuffer.load(args.dataset, device=args.device)
        trainer = make_trainer(args.algo, args.env, seed=args.seed, **overrides)
    except (ValueError, TypeError, FileNotFoundError) as exc:  # found before any work
        print(f"epochtrain: error: {exc}", file=sys.stderr)
        return 2
    info = trainer.run()
    last = trainer.last_test_stat
    mean = last.returns_stat.mean if last is not None and last.returns_stat else float("nan")
    print(
        f"Finished ({trainer.stop_reason}) after {info.epoch} epochs, {info.env_step} env steps, "
        f"{info.total_time:.1f} s: mean test return {mean:.2f} "
        f"(best {info.best_test_return:.2f} at epoch {info.best_epoch})"
    )
    if args.logdir:
        print(f"TensorBoard logs: {overrides['logdir']}")
    trainer.logger.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "train":
        return _train(args)
    parser.error(f"unknown command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
