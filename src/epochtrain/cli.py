"""The ``epochtrain`` command (also ``python -m epochtrain``): train from the shell.

``epochtrain train --algo ppo --env CartPole-v1 --seed 0 --max-epoch 10 --set lr=3e-4``
resolves a :class:`~epochtrain.spec.RunSpec` (the tuned preset, or ``--config run.toml``,
then the flags, then each ``--set NAME=VALUE``), builds it with
:func:`epochtrain.make_trainer`, prints one line per epoch, writes the resolved
``spec.toml`` and TensorBoard logs to ``<logdir>/<env>_<algo>_seed<seed>_<time>`` and ends
with the mean test return. ``epochtrain config ...`` prints the resolved spec. The flags
and the settings list in ``--help`` are generated from the spec's dataclasses. Bad options
exit with status 2 and a one-line message.

Checkpoints go to ``<run dir>/checkpoints`` every epoch; ``train ... --resume PATH``
continues a run and ``epochtrain eval PATH --episodes 10`` tests a checkpoint's policy.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from epochtrain.spec_args import add_spec_options, resolve_spec, settings_help

__all__ = ["build_parser", "main"]

# Errors found before any work starts: a one-line message and exit status 2 (a missing
# optional extra is an ImportError subclass naming the pip command).
_USAGE_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError, FileNotFoundError, ImportError)


def _algos() -> list[str]:
    from epochtrain.registry import ALGORITHMS

    return sorted(ALGORITHMS)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


class _DefaultsFormatter(
    argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter
):
    """Appends ``(default: ...)`` to an option's help unless the help already states it;
    the epilog (the settings table) keeps its line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.required or action.default is None:
            return text
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser; ``--help`` lists every option and setting with its default."""
    fmt = _DefaultsFormatter
    parser = _Parser(prog="epochtrain", description=__doc__.splitlines()[0], formatter_class=fmt)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    epilog = settings_help()
    train = sub.add_parser(
        "train", help="train an algorithm on a gymnasium env", formatter_class=fmt, epilog=epilog
    )
    add_spec_options(train)
    train.add_argument(
        "--logdir", default="runs", help="parent folder of run directories ('' disables)"
    )
    train.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    train.add_argument("--quiet", action="store_true", help="do not print a line per epoch")
    train.add_argument(
        "--resume",
        default=None,
        metavar="PATH",
        help="continue the run of this checkpoint (or the latest one in this directory): "
        "its spec is the base, its logs and checkpoints continue too",
    )
    config = sub.add_parser(
        "config",
        help="print the resolved run spec as TOML (or JSON)",
        formatter_class=fmt,
        epilog=epilog,
    )
    add_spec_options(config)
    config.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    _add_collect_parser(sub, fmt)
    from epochtrain.experiment.cli import add_compare_parser, add_sweep_parser

    add_sweep_parser(sub)
    add_compare_parser(sub)
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
    evaluate.add_argument(
        "--video",
        default=None,
        metavar="OUT.mp4",
        help="also record the first test episode to this mp4 (extra: epochtrain[video])",
    )


def _add_collect_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    collect = sub.add_parser(
        "collect",
        help="record a dataset from a policy into a buffer file for offline training",
        formatter_class=fmt,
    )
    collect.add_argument("--env", required=True, help="gymnasium env id")
    collect.add_argument("--steps", type=int, required=True, help="env steps to record")
    collect.add_argument(
        "--out",
        required=True,
        help="buffer file to write (plus OUT.json); with --format minari, the dataset id",
    )
    collect.add_argument(
        "--format",
        choices=["buffer", "minari"],
        default="buffer",
        help="an epochtrain buffer file, or a local Minari dataset (extra: epochtrain[minari])",
    )
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


def _prepare_train(args: argparse.Namespace) -> tuple[Any, Path | None]:
    """The spec of a ``train`` run (with its run directory and checkpoint settings) and the
    run directory, or None when logging is off."""
    from epochtrain.checkpoint import read_manifest, resolve_checkpoint
    from epochtrain.spec import RunSpec

    spec = resolve_spec(args)
    run_dir: Path | None = None
    if args.resume is not None:
        ckpt = resolve_checkpoint(args.resume)
        saved = read_manifest(ckpt, verify_files=False).get("spec")
        if saved is None:
            raise ValueError(
                f"--resume {args.resume}: the checkpoint holds no run spec (it was not written "
                "by `epochtrain train`); resume it in Python with params.resume_from"
            )
        base = RunSpec.from_dict(saved)
        if (base.algo, base.env_id, base.seed) != (spec.algo, spec.env_id, spec.seed):
            raise ValueError(
                f"--resume {args.resume}: the checkpoint's run is {base.algo} on {base.env_id} "
                f"with seed {base.seed}; pass the same --algo, --env and --seed"
            )
        logdir = base.logging.logdir
        run_dir = None if logdir is None else Path(logdir)
        checkpoint_dir = (
            spec.trainer.checkpoint_dir or base.trainer.checkpoint_dir or str(ckpt.parent)
        )
        spec = spec.with_overrides(
            {"logging.logdir": logdir, "checkpoint_dir": checkpoint_dir, "resume_from": str(ckpt)}
        )
    elif args.logdir:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path(args.logdir) / f"{spec.env_id}_{spec.algo}_seed{spec.seed}_{stamp}"
        changes: dict[str, Any] = {"logging.logdir": str(run_dir)}
        if spec.trainer.checkpoint_dir is None:
            changes["checkpoint_dir"] = str(run_dir / "checkpoints")
        spec = spec.with_overrides(changes)
    if spec.trainer.checkpoint_dir == "":
        spec = spec.with_overrides({"checkpoint_dir": None})
    spec = spec.with_overrides(
        {
            "show_progress": spec.trainer.show_progress and not args.no_progress,
            "verbose": not args.quiet,
        }
    )
    return spec, run_dir


def _train(args: argparse.Namespace) -> int:
    from epochtrain.factory import make_trainer

    try:
        spec, run_dir = _prepare_train(args)
        trainer = make_trainer(spec)
    except _USAGE_ERRORS as exc:  # found before any work
        print(f"epochtrain: error: {exc}", file=sys.stderr)
        return 2
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        spec.to_file(run_dir / "spec.toml")
    info = trainer.run()
    last = trainer.last_test_stat
    mean = last.returns_stat.mean if last is not None and last.returns_stat else float("nan")
    print(
        f"Finished ({trainer.stop_reason}) after {info.epoch} epochs, {info.env_step} env steps, "
        f"{info.total_time:.1f} s: mean test return {mean:.2f} "
        f"(best {info.best_test_return:.2f} at epoch {info.best_epoch})"
    )
    if run_dir is not None:
        print(f"Run directory (spec.toml, TensorBoard logs): {run_dir}")
    if spec.trainer.checkpoint_dir is not None:
        print(f"Checkpoints: {spec.trainer.checkpoint_dir}")
    trainer.logger.close()
    return 0


def _config(args: argparse.Namespace) -> int:
    try:
        spec = resolve_spec(args)
    except _USAGE_ERRORS as exc:
        print(f"epochtrain: error: {exc}", file=sys.stderr)
        return 2
    print(spec.to_json() if args.json else spec.to_toml(), end="" if not args.json else "\n")
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
    from epochtrain.factory import make_envs, make_trainer
    from epochtrain.logger import LazyLogger
    from epochtrain.spec import RunSpec
    from epochtrain.trainer import ObservationNormalizer

    ckpt = resolve_checkpoint(path)
    saved = read_manifest(ckpt, verify_files=False).get("spec")  # load_policy verifies
    if saved is None:
        raise ValueError(
            f"{ckpt} holds no run spec (it was not written by `epochtrain train` or "
            "make_trainer): load it in Python with trainer.load_checkpoint"
        )
    spec = RunSpec.from_dict(saved).with_overrides(
        {
            "device": device,
            "num_test_envs": num_test_envs,
            "show_progress": False,
            "logging.logdir": None,
            "checkpoint_dir": None,
            "resume_from": None,
            "dataset": None,
        }
    )
    dataset = None
    if spec.entry.kind == "offline":  # its trainer needs a dataset to be built
        dataset = _one_transition(make_envs(spec.env_id, 1))
    trainer = make_trainer(spec, buffer=dataset, logger=LazyLogger(), stop_fn=None)
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
    except _USAGE_ERRORS as exc:
        print(f"epochtrain: error: {exc}", file=sys.stderr)
        return 2
    algo, env_id = manifest["spec"]["algo"], manifest["spec"]["env_id"]
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
    if args.video is not None:
        from epochtrain.trainer.video import record_video

        try:
            path = record_video(
                trainer.policy,
                env_id,
                args.video,
                seed=args.seed,
                obs_transform=_normalizer(trainer),
            )
        except _USAGE_ERRORS as exc:
            print(f"epochtrain: error: {exc}", file=sys.stderr)
            return 2
        print(f"Video of a test episode: {path}")
    return 0


def _normalizer(trainer: Any) -> Any:
    """The observation transform of the run's ``ObservationNormalizer``, or None."""
    from epochtrain.trainer import ObservationNormalizer

    hooks = (hook for hook in trainer.hooks if isinstance(hook, ObservationNormalizer))
    return next((hook.normalize for hook in hooks), None)


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
        trainer, ckpt, manifest = _checkpoint_trainer(args.checkpoint, "cpu", 1)
        if manifest["spec"]["env_id"] != args.env:
            raise ValueError(
                f"--checkpoint {args.checkpoint} was trained on {manifest['spec']['env_id']}, "
                f"not --env {args.env}: record on the env the policy was trained on"
            )
        return trainer.policy, f"{manifest['spec']['algo']} from {ckpt}", _normalizer(trainer)
    from epochtrain.factory import make_trainer

    if args.train_steps is None and args.train_until is None:
        raise ValueError("--algo needs --train-steps and/or --train-until to say how long to train")
    until = args.train_until
    trainer = make_trainer(
        args.algo,
        args.env,
        seed=args.seed,
        stop_fn=None if until is None else (lambda best: best >= until),
        show_progress=False,
        max_epoch=10**9,
    )
    for _ in trainer:
        if args.train_steps is not None and trainer.state.env_step >= args.train_steps:
            break
    best = trainer.state.best_test_return
    print(
        f"trained {args.algo} for {trainer.state.env_step} env steps "
        f"(best test return {best:.1f}, stop: {trainer.stop_reason or 'train-steps'})"
    )
    description = f"{args.algo} trained {trainer.state.env_step} env steps (best {best:.1f})"
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
        if args.format == "minari":
            from epochtrain.extras import require

            require("minari", extra="minari")  # before any training or recording
        policy, description, transform = _collect_policy(args)
        out = Path(args.out)
        if args.format == "minari":
            out = Path(tempfile.mkdtemp(prefix="epochtrain-collect-")) / "dataset.buf"
        info = record_dataset(
            policy,
            args.env,
            args.steps,
            out,
            seed=args.seed,
            num_envs=args.num_envs,
            deterministic=args.deterministic,
            policy_name=description,
            obs_transform=transform,
        )
    except _USAGE_ERRORS as exc:
        print(f"epochtrain: error: {exc}", file=sys.stderr)
        return 2
    where = f"{info.path} (+ .json)"
    if args.format == "minari":
        from epochtrain.data.minari import write_minari

        try:
            where = str(
                write_minari(
                    info.path,
                    args.out,
                    args.env,
                    algorithm_name=description,
                    description=f"recorded by `epochtrain collect` from {description}",
                )
            )
        except _USAGE_ERRORS as exc:
            print(f"epochtrain: error: {exc}", file=sys.stderr)
            return 2
        finally:
            shutil.rmtree(Path(info.path).parent, ignore_errors=True)
    print(
        f"Recorded {info.n_steps} env steps ({info.n_episodes} episodes, return "
        f"{info.return_mean:.1f} ± {info.return_std:.1f}) to {where}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (130 after Ctrl-C, 143 after SIGTERM:
    :mod:`epochtrain.cli_interrupts`)."""
    from epochtrain.cli_interrupts import exit_status, interrupted_line, sigterm_as_interrupt

    try:
        with sigterm_as_interrupt():
            return _main(argv)
    except KeyboardInterrupt as exc:
        print(interrupted_line(exc, list(sys.argv[1:] if argv is None else argv)), file=sys.stderr)
        return exit_status(exc)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("train", "config") and args.algo is None and args.config is None:
        parser.error("the following arguments are required: --algo (or --config FILE)")
    if args.command == "train":
        return _train(args)
    if args.command == "config":
        return _config(args)
    if args.command in ("sweep", "compare"):
        from epochtrain.experiment.cli import run_compare, run_sweep

        return run_sweep(args) if args.command == "sweep" else run_compare(args)
    if args.command == "collect":
        return _collect(args)
    if args.command == "eval":
        return _eval(args)
    parser.error(f"unknown command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
