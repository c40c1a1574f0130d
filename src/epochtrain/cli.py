"""The ``epochtrain`` command (also ``python -m epochtrain``): train from the shell.

``epochtrain train --algo ppo --env CartPole-v1 --seed 0 --max-epoch 10 --logdir runs/``
builds everything with :func:`epochtrain.make_trainer`, prints one line per epoch, writes
TensorBoard logs to ``<logdir>/<env>_<algo>_seed<seed>_<time>`` and ends with the mean test
return. Bad options exit with status 2 and a one-line message.

Checkpoints go to ``<run dir>/checkpoints`` every epoch; ``train ... --resume PATH``
continues a run and ``epochtrain eval PATH --episodes 10`` tests a checkpoint's policy.
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


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: ...)`` to an option's help unless the help already states it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.required or action.default is None:
            return text
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser; ``--help`` lists every option with its default."""
    fmt = _DefaultsFormatter
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
    train.add_argument(
        "--checkpoint-dir",
        default=None,
        help="where to save checkpoints (default: <run dir>/checkpoints; '' disables)",
    )
    train.add_argument(
        "--checkpoint-every", type=int, default=1, help="epochs between two checkpoints"
    )
    train.add_argument(
        "--resume",
        default=None,
        metavar="PATH",
        help="continue the run of this checkpoint (or the latest one in this directory) "
        "with the same --algo, --env and --seed; its logs and checkpoints continue too",
    )
    _add_collect_parser(sub, fmt)
    _add_eval_parser(sub, fmt)
    return parser


def _add_eval_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    evaluate = sub.add_parser(
        "eval", help="test the policy of a checkpoint written by `train`", formatter_class=fmt
    )
    evaluate.add_argument("path", help="a checkpoint, or a directory of checkpoints (latest)")
    evaluate.add_argument("--episodes", type=int, default=10, help="test episodes to run")
    evaluate.add_argument("--seed", type=int, default=0, help="seed of the test envs")
    evaluate.add_argument("--device", default="cpu", help="torch device for the networks")


def _checkpointing(args: argparse.Namespace, overrides: dict[str, Any]) -> None:
    """``--checkpoint-dir``, ``--checkpoint-every`` and ``--resume`` as overrides.

    A resumed run reuses the checkpoint's TensorBoard run directory (its curves continue)
    and, unless ``--checkpoint-dir`` is given, the checkpoint's directory.
    """
    from epochtrain.checkpoint import read_manifest, resolve_checkpoint

    checkpoint_dir = args.checkpoint_dir
    if args.resume is not None:
        ckpt = resolve_checkpoint(args.resume)
        config = read_manifest(ckpt, verify_files=False)["config"]  # load_policy verifies
        for key, value in (("algo", args.algo), ("env_id", args.env), ("seed", args.seed)):
            if key in config and config[key] != value:
                raise ValueError(
                    f"--resume {args.resume}: the checkpoint's run has {key}={config[key]!r}, "
                    f"not {value!r}; pass the same --algo, --env and --seed"
                )
        logdir = config.get("overrides", {}).get("logdir")
        if logdir and "logdir" in overrides:
            overrides["logdir"] = logdir
        overrides["resume_from"] = str(ckpt)
        if checkpoint_dir is None:
            checkpoint_dir = str(ckpt.parent)
    if checkpoint_dir is None and "logdir" in overrides:
        checkpoint_dir = str(Path(overrides["logdir"]) / "checkpoints")
    if checkpoint_dir:
        overrides["checkpoint_dir"] = checkpoint_dir
        overrides["checkpoint_every"] = args.checkpoint_every


def _add_collect_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    collect = sub.add_parser(
        "collect",
        help="record a dataset from a policy into a buffer file for offline training",
        formatter_class=fmt,
    )
    collect.add_argument("--env", required=True, help="gymnasium env id")
    collect.add_argument("--steps", type=int, required=True, help="env steps to record")
    collect.add_argument("--out", required=True, help="buffer file to write (plus OUT.json)")
    source = collect.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="record the policy of this checkpoint (or dir)")
    source.add_argument("--algo", choices=_algos(), help="train this algorithm first, then record")
    source.add_argument("--random", action="store_true", help="record uniform random actions")
    collect.add_argument(
        "--train-steps",
        type=int,
        default=None,
        help="with --algo: train for at most this many env steps",
    )
    collect.add_argument(
        "--train-until",
        type=float,
        default=None,
        help="with --algo: stop training once the mean test return reaches this "
        "(a 'medium' policy for D4RL-style datasets)",
    )
    collect.add_argument("--seed", type=int, default=0, help="seed of training and recording")
    collect.add_argument("--num-envs", type=int, default=1, help="envs recorded in parallel")
    collect.add_argument(
        "--deterministic",
        action="store_true",
        help="record the policy's deterministic actions (default: with its exploration)",
    )


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
        _checkpointing(args, overrides)
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
    if "checkpoint_dir" in overrides:
        print(f"Checkpoints: {overrides['checkpoint_dir']}")
    trainer.logger.close()
    return 0


def _checkpoint_trainer(
    path: str, device: str, num_test_envs: int
) -> tuple[Any, Path, dict[str, Any]]:
    """A trainer rebuilt from a checkpoint's manifest, with the checkpoint's policy loaded.

    Returns the trainer, the resolved checkpoint directory and its manifest.
    """
    from epochtrain.checkpoint import (
        load_hook_states,
        load_policy,
        read_manifest,
        resolve_checkpoint,
    )
    from epochtrain.factory import DEFAULTS, make_envs, make_trainer
    from epochtrain.logger import LazyLogger
    from epochtrain.trainer import ObservationNormalizer, OfflineTrainer

    ckpt = resolve_checkpoint(path)
    config = read_manifest(ckpt, verify_files=False)["config"]  # load_policy verifies
    if config.get("algo") not in DEFAULTS or "env_id" not in config:
        raise ValueError(
            f"{ckpt} was not written by `epochtrain train` or make_trainer (its manifest "
            "names no known algo and env_id): load it in Python with trainer.load_checkpoint"
        )
    algo, env_id = config["algo"], config["env_id"]
    overrides = {k: v for k, v in config.get("overrides", {}).items() if k not in _RUN_ONLY}
    overrides.update(device=device, num_test_envs=num_test_envs)
    overrides.update(show_progress=False, logger=LazyLogger(), stop_fn=None)
    if DEFAULTS[algo].trainer_cls is OfflineTrainer:  # it needs a dataset to be built
        overrides["buffer"] = _one_transition(make_envs(env_id, 1))
    trainer = make_trainer(algo, env_id, seed=int(config.get("seed", 0)), **overrides)
    manifest = load_policy(trainer.policy, ckpt)
    for name, state in load_hook_states(ckpt):
        # the policy acts on normalised observations: test it on them, with the run's stats
        if name == ObservationNormalizer.__qualname__:
            normalizer = ObservationNormalizer()
            trainer.register_hook(normalizer)
            normalizer.load_state_dict(state)
    return trainer, ckpt, manifest


def _eval(args: argparse.Namespace) -> int:
    try:
        if args.episodes < 1:
            raise ValueError(f"--episodes must be >= 1, got {args.episodes}")
        trainer, ckpt, manifest = _checkpoint_trainer(
            args.path, args.device, min(args.episodes, 10)
        )
    except (ValueError, TypeError, FileNotFoundError) as exc:
        print(f"epochtrain: error: {exc}", file=sys.stderr)
        return 2
    algo, env_id = manifest["config"]["algo"], manifest["config"]["env_id"]
    collector = trainer.test_collector
    assert collector is not None
    collector.reset(seed=args.seed)
    stat = collector.collect(n_episode=args.episodes)
    assert stat.returns_stat is not None
    ret = stat.returns_stat
    print(
        f"{algo} on {env_id}, checkpoint {ckpt} (epoch {manifest['epoch']}, "
        f"{manifest['env_step']} env steps): mean return {ret.mean:.2f} ± {ret.std:.2f} over "
        f"{stat.n_collected_episodes} episodes (min {ret.min:.2f}, max {ret.max:.2f})"
    )
    return 0


# Recorded overrides that `eval` must not replay: it loads only the policy, logs nothing.
_RUN_ONLY = frozenset({"resume_from", "logdir", "checkpoint_dir"})


def _one_transition(envs: Any) -> Any:
    """A one-transition buffer, so an offline algorithm's trainer can be built for testing."""
    from epochtrain.data import ReplayBuffer

    buffer = ReplayBuffer(1, 1)
    obs, _ = envs.reset(seed=0)
    act = envs.action_space.sample()
    obs_next, rew, terminated, truncated, _ = envs.step(act)
    buffer.add(obs, act, rew, terminated, truncated, obs_next)
    return buffer


def _collect_policy(args: argparse.Namespace) -> tuple[Any, str, Any]:
    """The policy to record, its description and the observation transform it acts through
    (an ``ObservationNormalizer``'s, or None); trains the policy first with ``--algo``."""
    if args.random:
        return None, "random", None
    if args.checkpoint is not None:
        from epochtrain.trainer import ObservationNormalizer

        trainer, ckpt, manifest = _checkpoint_trainer(args.checkpoint, "cpu", 1)
        if manifest["config"]["env_id"] != args.env:
            raise ValueError(
                f"--checkpoint {args.checkpoint} was trained on {manifest['config']['env_id']}, "
                f"not --env {args.env}: record on the env the policy was trained on"
            )
        transform = next(
            (hook.normalize for hook in trainer.hooks if isinstance(hook, ObservationNormalizer)),
            None,
        )
        return trainer.policy, f"{manifest['config']['algo']} from {ckpt}", transform
    from epochtrain.factory import make_trainer

    if args.train_steps is None and args.train_until is None:
        raise ValueError("--algo needs --train-steps and/or --train-until to say how long to train")
    overrides: dict[str, Any] = {"show_progress": False, "max_epoch": 10**9}
    until = args.train_until
    overrides["stop_fn"] = None if until is None else (lambda best: best >= until)
    trainer = make_trainer(args.algo, args.env, seed=args.seed, **overrides)
    for _ in trainer:
        if args.train_steps is not None and trainer.env_step >= args.train_steps:
            break
    best = trainer.best_test_return
    print(
        f"trained {args.algo} for {trainer.env_step} env steps "
        f"(best test return {best:.1f}, stop: {trainer.stop_reason or 'train-steps'})"
    )
    description = f"{args.algo} trained {trainer.env_step} env steps (best {best:.1f})"
    return trainer.policy, description, None


def _collect(args: argparse.Namespace) -> int:
    from epochtrain.dataset import record_dataset

    try:
        for name in ("steps", "num_envs", "train_steps"):
            value = getattr(args, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        if args.algo is None and (args.train_steps is not None or args.train_until is not None):
            raise ValueError("--train-steps and --train-until need --algo")
        policy, description, transform = _collect_policy(args)
        info = record_dataset(
            policy,
            args.env,
            args.steps,
            args.out,
            seed=args.seed,
            num_envs=args.num_envs,
            deterministic=args.deterministic,
            policy_name=description,
            obs_transform=transform,
        )
    except (ValueError, TypeError, FileNotFoundError) as exc:
        print(f"epochtrain: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"Recorded {info.n_steps} env steps ({info.n_episodes} episodes, return "
        f"{info.return_mean:.1f} ± {info.return_std:.1f}) to {info.path} (+ .json)"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "train":
        return _train(args)
    if args.command == "collect":
        return _collect(args)
    if args.command == "eval":
        return _eval(args)
    parser.error(f"unknown command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
