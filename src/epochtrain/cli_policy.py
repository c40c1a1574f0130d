"""The ``eval`` and ``collect`` commands: test a checkpoint's policy, record a dataset.

``epochtrain eval PATH --episodes 10`` rebuilds the trainer of a checkpoint written by
``epochtrain train`` and prints the mean test return of its policy (``--video OUT.mp4``
also records an episode). ``epochtrain collect --env ID --steps N --out FILE`` records a
dataset for offline training from a checkpoint's policy (``--checkpoint``), from a policy
it trains first (``--algo``) or from random actions (``--random``). A checkpoint's policy
acts through its run's observation normalisation, if the run had one.
:mod:`epochtrain.cli` adds these subcommands and dispatches to them.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from epochtrain.checkpoint_files import deferred_signals
from epochtrain.cli import USAGE_ERRORS, command_words

__all__ = ["add_collect_parser", "add_eval_parser", "run_collect", "run_eval"]


def _online_algos() -> list[str]:
    """The algorithms ``collect --algo`` can train first: those that collect their own data
    (by the registry's kinds; an offline one needs a dataset to learn from)."""
    from epochtrain.registry import ALGORITHMS

    return sorted(name for name, entry in ALGORITHMS.items() if entry.kind != "offline")


def add_eval_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """Add ``eval`` to ``sub`` (the ``argparse`` subparsers), formatting its help with ``fmt``."""
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


_MINARI_METADATA = {
    "--author": "the dataset's author",
    "--author-email": "the author's contact",
    "--code-permalink": "a link to the versioned code that recorded it",
}
"""Options of the Minari metadata that Minari warns about when missing."""


def _option_value(args: argparse.Namespace, option: str) -> str | None:
    value = getattr(args, option[2:].replace("-", "_"))
    return None if value is None else str(value)


def add_collect_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """Add ``collect`` to ``sub`` (the ``argparse`` subparsers), formatting its help with
    ``fmt``."""
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
        "--overwrite",
        action="store_true",
        help="replace an existing --out buffer file (without it, an existing file is an "
        "error before any work; a Minari dataset is never replaced: `minari delete ID`)",
    )
    collect.add_argument(
        "--format",
        choices=["buffer", "minari"],
        default="buffer",
        help="an epochtrain buffer file, or a local Minari dataset (extra: epochtrain[minari])",
    )
    for option, text in _MINARI_METADATA.items():
        collect.add_argument(option, default=None, help=f"with --format minari: {text}")
    source = collect.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="record the policy of this checkpoint (or dir)")
    source.add_argument(
        "--algo",
        choices=_online_algos(),
        help="train this algorithm first, then record (an online one: an offline algorithm "
        "needs a dataset to learn from)",
    )
    source.add_argument("--random", action="store_true", help="record uniform random actions")
    collect.add_argument(
        "--train-steps",
        type=int,
        default=None,
        help="with --algo: train until this many env steps, stopping at the end of the "
        "epoch that reaches it (whole epochs of the algorithm's preset: PPO's on Pendulum "
        "are 8,192 env steps); the env steps trained are printed",
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


def _checkpoint_trainer(
    path: str, device: str, num_test_envs: int, option: str = ""
) -> tuple[Any, Path, dict[str, Any]]:
    """A trainer rebuilt from a checkpoint's manifest, with the checkpoint's policy loaded.

    Returns the trainer, the resolved checkpoint directory and its manifest. A ``path``
    that is no directory is refused naming ``option`` (``"--checkpoint "``) and the path.
    """
    from epochtrain.checkpoint import (
        CheckpointVersionWarning,
        load_hook_states,
        load_policy,
        read_manifest,
        resolve_checkpoint,
    )
    from epochtrain.factory import (
        UnusedSettingWarning,
        make_envs,
        make_trainer,
        replay_below_batch,
    )
    from epochtrain.logger import LazyLogger
    from epochtrain.spec import RunSpec
    from epochtrain.trainer import ObservationNormalizer

    if not Path(path).is_dir():  # not "holds no complete checkpoint": nothing is there
        what = "is a file" if Path(path).exists() else "does not exist"
        raise FileNotFoundError(
            f"{option}{path} {what}: pass a checkpoint directory (epoch_*), the checkpoint_dir "
            "a run has written to, or its run directory"
        )
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
    too_small = replay_below_batch(spec)
    if too_small is not None:  # an older epochtrain allowed it; testing never samples it
        spec = spec.with_overrides({"buffer.buffer_size": too_small[1]})
    dataset = None
    if spec.entry.kind == "offline":  # its trainer needs a dataset to be built
        dataset = _one_transition(make_envs(spec.env_id, 1))
    with warnings.catch_warnings():  # the trained run's logging and checkpoint settings
        warnings.simplefilter("ignore", UnusedSettingWarning)
        trainer = make_trainer(spec, buffer=dataset, logger=LazyLogger(), stop_fn=None)
    with warnings.catch_warnings():  # read_manifest above has warned of other versions
        warnings.simplefilter("ignore", CheckpointVersionWarning)
        manifest = load_policy(trainer.policy, ckpt)
        hook_states = load_hook_states(ckpt)
    for name, state in hook_states:
        # the policy acts on normalised observations: test it on them, with the run's stats
        if name == ObservationNormalizer.__qualname__:
            normalizer = ObservationNormalizer()
            normalizer.load_state_dict(state)  # before register: an old off-policy state loads
            trainer.register_hook(normalizer)
    return trainer, ckpt, manifest


_SEED_LIMIT = 2**32
"""Seeds run from 0 to ``2**32 - 1``: what gymnasium's ``reset(seed=...)`` and numpy take."""


def _check_seed(seed: int) -> None:
    if not 0 <= seed < _SEED_LIMIT:
        raise ValueError(f"--seed must be within 0 .. 2**32 - 1, got {seed}")


def _check_video(path: str) -> None:
    """Refuse an ``eval --video`` path that cannot be written, or the missing ``video``
    extra, before the checkpoint is loaded and its episodes run."""
    from epochtrain.extras import require
    from epochtrain.trainer.video import check_video_path

    check_video_path(path, "--video")
    require("imageio.v2", extra="video")
    require("imageio_ffmpeg", extra="video")


def run_eval(args: argparse.Namespace) -> int:
    """Test the checkpoint's policy of ``args`` and print its returns; 2 on bad input."""
    try:
        if args.episodes < 1:
            raise ValueError(f"--episodes must be >= 1, got {args.episodes}")
        _check_seed(args.seed)
        if args.video is not None:
            _check_video(args.video)
        trainer, ckpt, manifest = _checkpoint_trainer(
            args.path, args.device, min(args.episodes, 10)
        )
    except USAGE_ERRORS as exc:
        print(
            f"epochtrain: error: {command_words(str(exc), ['--device'], spec_flags=False)}",
            file=sys.stderr,
        )
        return 2
    with trainer:  # its envs close at the end (their processes with env_backend="async")
        return _evaluate(args, trainer, ckpt, manifest)


def _evaluate(args: argparse.Namespace, trainer: Any, ckpt: Path, manifest: Any) -> int:
    """Run ``args.episodes`` test episodes of the loaded policy and print their returns,
    then record ``args.video`` if asked (checked by :func:`run_eval`); 2 on bad input."""
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
            path = record_video(  # removes the folders it made if it fails
                trainer.policy,
                env_id,
                args.video,
                seed=args.seed,
                obs_transform=_normalizer(trainer),
            )
        except USAGE_ERRORS as exc:
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
    from epochtrain.data.actions import policy_action_map

    buffer = ReplayBuffer(1, 1)
    try:
        obs, _ = envs.reset(seed=0)
        act = envs.action_space.sample()
        obs_next, rew, terminated, truncated, _ = envs.step(act)
    finally:
        envs.close()
    to_policy = policy_action_map(envs.single_action_space)
    act = act if to_policy is None else to_policy(act)
    buffer.add(obs, act, rew, terminated, truncated, obs_next)
    return buffer


def _collect_policy(args: argparse.Namespace) -> tuple[Any, str, Any]:
    """The policy to record, its description and the observation transform it acts through
    (an ``ObservationNormalizer``'s, or None); trains the policy first with ``--algo``."""
    if args.random:
        return None, "random", None
    if args.checkpoint is not None:
        trainer, ckpt, manifest = _checkpoint_trainer(args.checkpoint, "cpu", 1, "--checkpoint ")
        trainer.close()  # only its policy and observation normaliser are used
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
    with trainer:
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


def _failed(exc: Exception) -> int:
    """Print the one-line error of a recording or its write; 1 when the file could not be
    written (a full disk), 2 otherwise."""
    from epochtrain.cli_interrupts import is_file_fault

    print(f"epochtrain: error: {exc}", file=sys.stderr)
    return 1 if is_file_fault(exc) else 2


def run_collect(args: argparse.Namespace) -> int:
    """Record the dataset of ``args`` and print where it went.

    Exit status 2 on bad input (found before any training or recording: an existing
    ``--out`` too), 1 when the dataset cannot be written (a full disk), 0 otherwise.
    """
    from epochtrain.data.writes import check_writable_dir
    from epochtrain.dataset import check_dataset_path
    from epochtrain.spec_names import check_env_id

    refused: tuple[type[Exception], ...] = (*USAGE_ERRORS, FileExistsError, IsADirectoryError)
    try:
        for name in ("steps", "num_envs", "train_steps"):
            value = getattr(args, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        _check_seed(args.seed)
        if args.algo is None and (args.train_steps is not None or args.train_until is not None):
            raise ValueError("--train-steps and --train-until need --algo")
        check_env_id(args.env)
        if args.format == "minari":
            from epochtrain.data.minari import check_new_dataset_id

            check_new_dataset_id(args.out)  # before any training or recording
        else:
            check_dataset_path(args.out, overwrite=args.overwrite)
            out = Path(args.out)  # its folder must take the file: an existing one, or one to make
            check_writable_dir(out.parent if out.exists() else out, "--out")
        policy, description, transform = _collect_policy(args)
    except refused as exc:
        print(
            f"epochtrain: error: {command_words(str(exc), ['--env'], spec_flags=False)}",
            file=sys.stderr,
        )
        return 2
    if args.format == "minari":
        return _collect_minari(args, policy, description, transform, refused)
    try:
        info = _record(args, Path(args.out), policy, description, transform)
    except refused as exc:
        return _failed(exc)
    print(
        f"Recorded {info.n_steps} env steps ({info.n_episodes} episodes, return "
        f"{info.return_mean:.1f} ± {info.return_std:.1f}) to {info.path} (+ .json)"
    )
    return 0


def _record(
    args: argparse.Namespace, out: Path, policy: Any, description: str, transform: Any
) -> Any:
    """:func:`~epochtrain.dataset.record_dataset` of ``args`` into ``out``."""
    from epochtrain.dataset import record_dataset

    return record_dataset(
        policy,
        args.env,
        args.steps,
        out,
        seed=args.seed,
        num_envs=args.num_envs,
        deterministic=args.deterministic,
        policy_name=description,
        obs_transform=transform,
        overwrite=args.overwrite,
    )


def _collect_minari(
    args: argparse.Namespace,
    policy: Any,
    description: str,
    transform: Any,
    refused: tuple[type[Exception], ...],
) -> int:
    """Record into a buffer file in a temporary folder, then write it as the Minari dataset
    ``args.out``. The folder goes under any error or interrupt (Ctrl-C, SIGTERM), and
    :func:`~epochtrain.data.minari.write_minari` removes a dataset it did not finish."""
    from epochtrain.data.minari import write_minari

    scratch: Path | None = None
    try:
        with deferred_signals():  # no Ctrl-C between the folder's creation and its name here
            scratch = Path(tempfile.mkdtemp(prefix="epochtrain-collect-"))
        info = _record(args, scratch / "dataset.buf", policy, description, transform)
        with warnings.catch_warnings():  # Minari's one warning per field: one line below
            warnings.filterwarnings("ignore", message=r"`(author|author_email|code_permalink)`")
            path = write_minari(
                info.path,
                args.out,
                args.env,
                algorithm_name=description,
                author=args.author,
                author_email=args.author_email,
                code_permalink=args.code_permalink,
                description=f"recorded by `epochtrain collect` from {description}",
            )
        summary = _minari_summary(args.out, info.n_steps)
    except refused as exc:
        return _failed(exc)
    finally:
        if scratch is not None:
            with deferred_signals():  # a second Ctrl-C does not cut the removal short
                shutil.rmtree(scratch, ignore_errors=True)
    missing = [option for option in _MINARI_METADATA if _option_value(args, option) is None]
    if missing:
        warnings.warn(
            f"the dataset has no {', '.join(missing)}: Minari recommends them for a dataset "
            "that is shared",
            stacklevel=1,
        )
    print(f"{summary} to {path}")
    return 0


def _minari_summary(dataset_id: str, recorded_steps: int) -> str:
    """What the Minari dataset just written holds (its complete episodes only), beside the
    env steps recorded."""
    from epochtrain.extras import require

    dataset = require("minari", extra="minari").load_dataset(dataset_id, download=False)
    meta = dataset.storage.metadata
    dropped = recorded_steps - dataset.total_steps
    return (
        f"Recorded {recorded_steps} env steps; the dataset holds {dataset.total_steps} steps "
        f"({dataset.total_episodes} complete episodes, return "
        f"{meta['recording_returns_mean']:.1f} ± {meta['recording_returns_std']:.1f}"
        + (f"; {dropped} steps of unfinished episodes left out)" if dropped else ")")
    )
