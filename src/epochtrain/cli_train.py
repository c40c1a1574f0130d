"""The ``epochtrain train`` command: the run's spec and run directory, ``--resume``, the run.

``epochtrain train --algo ppo --env CartPole-v1 ...`` resolves its
:class:`~epochtrain.spec.RunSpec` (the ``--config`` file or the checkpoint's spec of
``--resume``, then the flags and ``--set``), makes the run directory
``<logdir>/<env>_<algo>_seed<seed>_<time>`` (its ``spec.toml``, which names a dataset file
by its absolute path, logs and ``checkpoints/``),
refuses in the command line's words what would fail later (a missing ``--dataset``, another
run's checkpoints, settings a resumed run may not change, a device this machine lacks)
before any folder is made, opens with a line naming the run and its run directory, trains
and ends with the mean test return. The parser, the ``config`` command, the error wording
(:func:`~epochtrain.cli.command_words`) and the dispatch of every command are in
:mod:`epochtrain.cli`.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochtrain.cli import USAGE_ERRORS, command_words, options_given, resolve_command_spec
from epochtrain.spec_args import setting_flags

if TYPE_CHECKING:
    from epochtrain.trainer.params import SettingsMismatchError

__all__ = ["run_train"]


def _logdir(args: argparse.Namespace) -> str | None:
    """``--logdir``: the parent folder of the run directories, or None for no run
    directory (``--logdir ''`` or ``--logdir none``, in any case, as ``--checkpoint-dir
    none`` is no checkpoints; ``--logdir ./none`` is a folder named none)."""
    logdir: str = args.logdir
    return None if not logdir or logdir.lower() == "none" else logdir


def _new_run_dir(logdir: Path, name: str) -> Path:
    """Create and return ``logdir/name``, or ``name-2``, ``name-3``, ... when it exists:
    runs started in the same second (a shell loop of ``&`` jobs over learning rates) each
    get a directory of their own instead of sharing one and its ``spec.toml``."""
    logdir.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        run_dir = logdir / (name if n == 1 else f"{name}-{n}")
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            n += 1


def _prepare_train(args: argparse.Namespace) -> tuple[Any, Path | None]:
    """The spec of a ``train`` run (with its run directory and checkpoint settings) and the
    run directory, or None when logging is off."""
    from epochtrain.checkpoint import (
        RUN_CHECKPOINTS,
        CheckpointError,
        read_manifest,
        resolve_checkpoint,
    )
    from epochtrain.data.writes import check_writable_dir
    from epochtrain.envs import env_name
    from epochtrain.spec import RunSpec
    from epochtrain.spec_args import check_text

    check_text("--logdir ", args.logdir)  # the run directory's path goes into spec.toml
    for off, on in (("--quiet", "--verbose"), ("--no-progress", "--show-progress")):
        if getattr(args, off[2:].replace("-", "_")) and getattr(args, on[2:].replace("-", "_")):
            raise ValueError(f"{off} and {on} contradict each other: give one of them")
    base: RunSpec | None = None
    if args.resume is not None:
        try:
            ckpt = resolve_checkpoint(args.resume)
        except CheckpointError as exc:
            raise CheckpointError(_nothing_to_resume(args.resume, exc)) from exc
        saved = read_manifest(ckpt, verify_files=False).get("spec")
        if saved is None:
            raise ValueError(
                f"--resume {args.resume}: the checkpoint holds no run spec (it was not written "
                "by `epochtrain train`); resume it in Python with params.resume_from"
            )
        base = RunSpec.from_dict(saved)
    # the checkpoint's own directory is where it is now (below), unless an option says
    resumed = None if base is None else base.with_overrides({"checkpoint_dir": None})
    spec = resolve_command_spec(args, resumed=resumed)
    _refuse_logdir_setting(args, spec)
    if base is not None and "trainer.resume_from" in options_given(args, spec):
        raise ValueError(
            f"--resume {args.resume} and --set resume_from both name a checkpoint to start "
            "from: pass one (--resume continues that run in its directory; --set "
            "resume_from=CKPT starts a new run from CKPT)"
        )
    if "trainer.checkpoint_dir" in options_given(args, spec) and not spec.trainer.checkpoint_dir:
        spec = spec.with_overrides({"checkpoint_dir": ""})  # `--checkpoint-dir none`: none
    if base is None:
        spec = _as_new_run(args, spec)
    from epochtrain.factory import check_spec

    # before any folder is made: the policy on the env's spaces, the device (Discrete
    # actions for TD3+BC, before the dataset: no dataset helps)
    # a resume's buffer and batch sizes are its checkpoint's (make_trainer compares them)
    check_spec(
        spec if base is None else spec.with_overrides({"resume_from": str(ckpt)}), dataset=False
    )
    if spec.entry.kind == "offline":
        _check_dataset(spec, _dataset_source(args, spec))
        spec = _with_absolute_dataset(spec)
    logdir = _logdir(args)
    if logdir is not None:
        check_writable_dir(logdir, "--logdir")
    if spec.trainer.checkpoint_dir:
        check_writable_dir(spec.trainer.checkpoint_dir, "--checkpoint-dir")
        if base is None:
            _refuse_another_runs_checkpoints(args, spec)
    run_dir: Path | None = None
    if base is not None:
        if (base.algo, base.env_id, base.seed) != (spec.algo, spec.env_id, spec.seed):
            raise ValueError(
                f"--resume {args.resume}: the checkpoint's run is {base.algo} on {base.env_id} "
                f"with seed {base.seed}; pass the same --algo, --env and --seed"
            )
        # where the checkpoint is now, not the paths its spec saved: those may be relative
        # to another working directory, or name a run directory since moved
        ckpt_dir = ckpt.parent.resolve()
        run_logdir = base.logging.logdir
        if run_logdir is not None:
            run_logdir = str(
                ckpt_dir.parent if ckpt_dir.name == RUN_CHECKPOINTS else Path(run_logdir)
            )
        run_dir = None if run_logdir is None else Path(run_logdir)
        checkpoint_dir = spec.trainer.checkpoint_dir
        if checkpoint_dir is None:
            checkpoint_dir = str(ckpt_dir)
        spec = spec.with_overrides(
            {
                "logging.logdir": run_logdir,
                "checkpoint_dir": checkpoint_dir,
                "resume_from": str(ckpt),
            }
        )
    elif logdir is not None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = f"{env_name(spec.env_id)}_{spec.algo}_seed{spec.seed}_{stamp}"
        run_dir = _new_run_dir(Path(logdir), name)
        changes: dict[str, Any] = {"logging.logdir": str(run_dir)}
        if spec.trainer.checkpoint_dir is None:
            changes["checkpoint_dir"] = str(run_dir / RUN_CHECKPOINTS)
        spec = spec.with_overrides(changes)
    if spec.trainer.checkpoint_dir == "":
        spec = spec.with_overrides({"checkpoint_dir": None})
    spec = spec.with_overrides(
        {
            "show_progress": spec.trainer.show_progress and not args.no_progress,
            "verbose": spec.trainer.verbose and not args.quiet,  # its default: COMMAND_DEFAULTS
        }
    )
    return spec, run_dir


def _refuse_logdir_setting(args: argparse.Namespace, spec: Any) -> None:
    """``ValueError`` for ``--set logdir=X`` (or ``logging.logdir``): ``train`` logs into a
    run directory of its own under ``--logdir`` (a resumed run: the checkpoint's), which
    would replace the setting without a word."""
    option = options_given(args, spec).get("logging.logdir")
    if option is None:
        return
    if args.resume is not None:
        raise ValueError(
            f"{option}: a resumed run logs into its own run directory (the checkpoint's); drop it"
        )
    raise ValueError(
        f"{option}: train logs into a new run directory under --logdir, which replaces this "
        "setting; give the parent folder with --logdir DIR instead (or --logdir '' for no logs)"
    )


def _as_new_run(args: argparse.Namespace, spec: Any) -> Any:
    """``spec`` for a run that starts from scratch (no ``--resume``), in a run directory of
    its own: the places a ``--config`` file names for the run that wrote it (the
    ``spec.toml`` of a run directory: its ``logdir``, its ``checkpoint_dir`` there and the
    ``resume_from`` of a resumed run) are this run's instead, unless this command line sets
    them; ``--logdir ''`` (or ``none``) turns logging off whatever the file says."""
    from epochtrain.checkpoint import RUN_CHECKPOINTS
    from epochtrain.spec import RunSpec

    changes: dict[str, Any] = {}
    if _logdir(args) is None:
        changes["logging.logdir"] = None
    if args.config is not None:
        with warnings.catch_warnings():  # resolve_spec has read it, with its warnings
            warnings.simplefilter("ignore")
            saved = RunSpec.from_file(args.config)
        logdir, ckpt_dir = saved.logging.logdir, saved.trainer.checkpoint_dir
        own_dir = None if logdir is None else Path(logdir) / RUN_CHECKPOINTS
        if ckpt_dir is not None and Path(ckpt_dir) == own_dir:  # the file of a `train` run
            given = options_given(args, spec)
            if "trainer.checkpoint_dir" not in given:
                changes["checkpoint_dir"] = None  # the new run directory's, below
            if "trainer.resume_from" not in given:
                changes["resume_from"] = None
    return spec.with_overrides(changes) if changes else spec


def _dataset_source(args: argparse.Namespace, spec: Any) -> str | None:
    """Where the dataset of ``spec`` came from when this command line did not give it:
    ``"--resume PATH"`` (the checkpoint's run) or ``"--config FILE"``, else None."""
    if "dataset" in options_given(args, spec):
        return None
    if args.resume is not None:
        return f"--resume {args.resume}"
    if args.config is not None:
        return f"--config {args.config}"
    return None


def _check_dataset(spec: Any, source: str | None) -> None:
    """``ValueError`` in the command line's words when the offline ``spec`` has no
    ``--dataset`` or names a file that is not there (before anything is built). A file
    named by ``source`` (the run of ``--resume``, or a ``--config`` file), not by this
    command line, is the run's: the error names it and asks where it is now, not for a new
    recording (a relative path is read from the working directory, which may be another)."""
    dataset = spec.dataset
    record = f"epochtrain collect --env {spec.env_id} --random --steps 10000 --out FILE"
    if dataset is None:
        raise ValueError(
            f"--algo {spec.algo} learns from a dataset: give --dataset FILE (record one with "
            f"`{record}`) or --dataset minari:<dataset id>"
        )
    if dataset.startswith("minari:") or Path(dataset).is_file():
        return
    what = "is a directory" if Path(dataset).is_dir() else "does not exist"
    if source is None:
        raise ValueError(
            f"--dataset {dataset} {what}: give a file recorded by `{record}` (or a buffer "
            "file of ReplayBuffer.save), or --dataset minari:<dataset id>"
        )
    where = ""
    if not Path(dataset).is_absolute():
        where = f" (a relative path, read from this working directory: {Path(dataset).absolute()})"
    whose = "the run was trained on" if source.startswith("--resume") else "the spec names"
    raise ValueError(
        f"{source}: {whose} the dataset {dataset}, which {what}{where}: pass "
        "--dataset PATH to name where that file is now"
    )


def _with_absolute_dataset(spec: Any) -> Any:
    """``spec`` with its dataset file (checked: it is there) named by an absolute path, so
    that its ``spec.toml`` and checkpoints name the file from any working directory (a
    ``minari:<dataset id>`` is an id in Minari's own folder: kept)."""
    dataset = spec.dataset
    if dataset is None or dataset.startswith("minari:") or Path(dataset).is_absolute():
        return spec
    return spec.with_overrides({"dataset": str(Path(dataset).absolute())})


def _refuse_another_runs_checkpoints(args: argparse.Namespace, spec: Any) -> None:
    """``ValueError`` before a new run (no ``--resume``) starts in a checkpoint directory
    that holds another run's checkpoints, which its own would replace and rotate out (the
    trainer refuses it too, but only at its first epoch: after the run directory and its
    ``spec.toml`` were written, with exit status 1)."""
    from epochtrain.checkpoint import find_checkpoints

    ckpt_dir = spec.trainer.checkpoint_dir
    found = find_checkpoints(ckpt_dir)
    if not found:
        return
    option = options_given(args, spec).get("trainer.checkpoint_dir")
    source = option or (f"--config {args.config}" if args.config else "--checkpoint-dir")
    raise ValueError(
        f"the checkpoint directory {ckpt_dir!r} ({source}) holds the checkpoints of another "
        f"run ({', '.join(p.name for p in found)}), which this new run's would replace: "
        f"continue that run ({shlex.join(['epochtrain', 'train', '--resume', ckpt_dir])}), "
        "choose another --checkpoint-dir, or delete those checkpoints"
    )


def _nothing_to_resume(path: str, exc: Exception) -> str:
    """The words for ``--resume PATH`` where no complete checkpoint is: the run was stopped
    (``kill -9``) before its first checkpoint was complete, so it starts again without
    ``--resume``; the command that does is named when PATH is a run directory (or its
    ``checkpoints/``), from the ``spec.toml`` there."""
    from epochtrain.checkpoint import RUN_CHECKPOINTS, find_checkpoints
    from epochtrain.spec import RunSpec

    given = Path(path)
    if not given.is_dir():
        what = "is a file" if given.exists() else "does not exist"
        return (
            f"--resume {path} {what}: pass the run directory of `epochtrain train` "
            f"(<logdir>/<run>), its {RUN_CHECKPOINTS}/ or one of its epoch_* checkpoints"
        )
    if _holds_checkpoints(given) or _holds_checkpoints(given / RUN_CHECKPOINTS):
        return f"--resume {path}: {exc}"  # damaged, not missing: the error names the file
    run_dir = given.parent if given.name == RUN_CHECKPOINTS else given
    try:
        spec = RunSpec.from_file(run_dir / "spec.toml")
    except (OSError, ValueError, TypeError):  # not a run directory of `train`
        return (
            f"--resume {path}: {exc}. A run stopped before its first checkpoint was complete "
            "has nothing to resume: start it again with its command, without --resume"
        )
    ckpt_dir, where = spec.trainer.checkpoint_dir, ""
    command = ["epochtrain", "train", "--config", str(run_dir / "spec.toml")]
    command += ["--logdir", str(run_dir.parent)]
    if ckpt_dir is None:
        why = "it wrote no checkpoints (checkpoint_dir was off)"
        command += ["--checkpoint-dir", "none"]
    elif Path(ckpt_dir) != Path(spec.logging.logdir or "") / RUN_CHECKPOINTS:
        if find_checkpoints(ckpt_dir):  # the run's checkpoints are elsewhere: continue them
            resume = shlex.join(["epochtrain", "train", "--resume", ckpt_dir])
            return f"--resume {path}: the run's checkpoints are in {ckpt_dir}: {resume}"
        why = f"it was stopped before its first checkpoint in {ckpt_dir} was complete"
    else:  # a new run directory, with checkpoints of its own (_as_new_run)
        why = "it was stopped before its first checkpoint was complete"
        where = f" (in a new run directory; {run_dir} can then be deleted)"
    return (
        f"--resume {path}: the run holds no complete checkpoint ({why}), so there is nothing "
        f"to resume. Start it again without --resume{where}: {shlex.join(command)}"
    )


def _holds_checkpoints(root: Path) -> bool:
    """Whether ``root`` holds ``epoch_*`` checkpoint directories, complete or damaged (a
    save in progress is a ``.tmp-*`` directory, not one of them)."""
    return root.is_dir() and any(p.name.startswith("epoch_") and p.is_dir() for p in root.iterdir())


_SET_BY_RESUME = frozenset({"trainer.resume_from", "logging.logdir"})
"""Settings a resumed run may change that ``train --resume`` sets itself: the checkpoint,
and the run directory it is in."""


def _option_of(setting: str) -> str:
    """The option that sets ``setting`` (a dotted name): its flag, else ``--set NAME``."""
    flag = setting_flags().get(setting)
    return flag if flag is not None else f"--set {setting.rpartition('.')[2]}"


def _changeable_on_resume() -> list[str]:
    """The options of the settings a resumed run may change, in the order of ``--help``:
    derived from the trainer's :data:`~epochtrain.trainer.params.SAFE_TO_CHANGE` and
    ``SAFE_OUTSIDE_TRAINER``, less those ``--resume`` sets itself."""
    from epochtrain.trainer.params import SAFE_OUTSIDE_TRAINER, SAFE_TO_CHANGE

    safe = {f"trainer.{name}" for name in SAFE_TO_CHANGE} | SAFE_OUTSIDE_TRAINER
    safe -= _SET_BY_RESUME
    with_flag = [name for name in setting_flags() if name in safe]
    return [_option_of(name) for name in [*with_flag, *sorted(safe - set(with_flag))]]


def _resume_mismatch(args: argparse.Namespace, spec: Any, exc: SettingsMismatchError) -> str:
    """The CLI's words for a ``--resume`` refused over changed settings: the options of
    this command line that changed them, to drop (``--config FILE`` for one the file
    changed), and the options a resumed run may change."""
    given = options_given(args, spec)
    options = []
    for setting in exc.settings:
        if setting in given:
            options.append(given[setting])
        elif args.config is not None:
            options.append(f"--config {args.config}")
        else:
            options.append(_option_of(setting))
    return (
        f"--resume {args.resume}: the checkpoint's run has other settings ({exc.detail}). To "
        f"continue it, drop {', '.join(dict.fromkeys(options))} (a resumed run may change "
        f"only {', '.join(_changeable_on_resume())}); for these settings, start a new "
        "run without --resume"
    )


def run_train(args: argparse.Namespace) -> int:
    """Run ``epochtrain train``; returns the exit status (2 for an error found before any work)."""
    from epochtrain.trainer.params import SettingsMismatchError

    spec: Any = None
    try:
        with _removing_a_new_logdir(args):
            spec, run_dir = _prepare_train(args)
            trainer = _make_trainer(spec, None if args.resume is not None else run_dir)
    except USAGE_ERRORS as exc:  # found before any work
        message = command_words(str(exc))
        if args.resume is not None and isinstance(exc, SettingsMismatchError) and spec is not None:
            message = _resume_mismatch(args, spec, exc)
        print(f"epochtrain: error: {message}", file=sys.stderr)
        return 2
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        spec.to_file(run_dir / "spec.toml")
    start = trainer.state.epoch  # the checkpoint's epoch on --resume, else 0
    print(_first_line(spec, run_dir, start, args.logdir), flush=True)
    with trainer:  # closes the envs (their processes with env_backend="async") and the logger
        info = trainer.run()
    last = trainer.last_test_stat
    mean = last.returns_stat.mean if last is not None and last.returns_stat else float("nan")
    print(
        f"Finished ({trainer.stop_reason}) after {info.epoch} epochs, {info.env_step} env steps, "
        f"{info.total_time:.1f} s: mean test return {mean:.2f} "
        f"(best {info.best_test_return:.2f} at epoch {info.best_epoch})"
    )
    if run_dir is not None:
        print(f"Run directory ({_contents(run_dir)}): {run_dir}")
    if spec.trainer.checkpoint_dir is not None:
        print(f"Checkpoints: {spec.trainer.checkpoint_dir}")
    if args.resume is not None and info.epoch == start:
        print(f"epochtrain: warning: {_nothing_trained(trainer, spec)}", file=sys.stderr)
    return 0


def _removing_a_new_logdir(args: argparse.Namespace) -> contextlib.AbstractContextManager[None]:
    """Around the making of a new run's directory and trainer: the folders of ``--logdir``
    that did not exist are removed again if the command is refused (or interrupted) there,
    as :func:`~epochtrain.data.writes.check_writable_dir` leaves nothing behind."""
    from epochtrain.data.writes import removing_new_folders

    logdir = _logdir(args)
    if args.resume is not None or logdir is None:
        return contextlib.nullcontext()
    return removing_new_folders(logdir)


def _make_trainer(spec: Any, new_run_dir: Path | None) -> Any:
    """:func:`~epochtrain.factory.make_trainer` of ``spec``; ``new_run_dir``, the directory
    made for it, is removed again while nothing is in it if that fails."""
    from epochtrain.factory import make_trainer

    try:
        return make_trainer(spec)
    except BaseException:
        if new_run_dir is not None:
            with contextlib.suppress(OSError):
                new_run_dir.rmdir()
        raise


def _first_line(spec: Any, run_dir: Path | None, start: int, logdir: str) -> str:
    """The line a run opens with, before its first epoch: what runs, and where its run
    directory is (for ``tensorboard --logdir`` while it runs): ``"ppo on CartPole-v1, seed
    0: 10 epochs x 5,000 env steps; run directory runs/CartPole-v1_ppo_seed0_..."``, or
    ``"...; no run directory (--logdir none)"`` in the words of ``logdir`` (``--logdir``)."""
    params = spec.trainer
    epochs = f"{params.max_epoch} epochs"
    per_epoch = f"{params.step_per_epoch:,} env steps"
    if spec.entry.kind == "offline":
        per_epoch = f"{params.step_per_epoch:,} gradient steps"
    elif params.step_per_collect is not None:  # an epoch is whole collect steps
        collect = -(-params.step_per_collect // spec.num_envs) * spec.num_envs  # vector steps
        whole = -(-params.step_per_epoch // collect) * collect
        if whole != params.step_per_epoch:
            per_epoch = (
                f"{whole:,} env steps (--step-per-epoch {params.step_per_epoch:,} rounded up to "
                f"whole collect steps of {collect:,})"
            )
    resumed = f", resumed after epoch {start}" if start else ""
    where = f"run directory {run_dir}"
    if run_dir is None:
        where = f"no run directory (--logdir {logdir or repr('')})"
    return (
        f"{spec.algo} on {spec.env_id}, seed {spec.seed}: {epochs} x {per_epoch}{resumed}; {where}"
    )


def _nothing_trained(trainer: Any, spec: Any) -> str:
    """Why a ``--resume`` trained no epoch (the checkpoint's run had ended), and the option
    that trains on."""
    epoch, reason = trainer.state.epoch, trainer.stop_reason
    if reason == "max_epoch":
        why, fix = f"max_epoch {spec.trainer.max_epoch}", "pass a larger --max-epoch"
    elif reason == "stop_fn":
        best = trainer.state.best_test_return
        why = f"its best test return {best:g} reached --stop-at {spec.stop_at}"
        fix = "pass --stop-at none (or a higher --stop-at)"
    else:
        why, fix = f"stop reason {reason}", "start a new run"
    return (
        f"the checkpoint's run had already ended at epoch {epoch} ({why}), so nothing was "
        f"trained; to train on, {fix} with --resume"
    )


def _contents(run_dir: Path) -> str:
    """The files ``run_dir`` holds, for the closing line: ``"spec.toml, log.jsonl,
    TensorBoard logs"`` (the loggers' files; TensorBoard's event files as one entry; the
    checkpoints have a line of their own)."""
    names = sorted(p.name for p in run_dir.iterdir() if p.is_file() and p.name[0] != ".")
    shown = [name for name in names if not name.startswith("events.out.tfevents.")]
    shown.sort(key=lambda name: name != "spec.toml")  # the spec first, then the logs
    if len(shown) < len(names):
        shown.append("TensorBoard logs")
    return ", ".join(shown)
