"""The ``epochtrain`` command (also ``python -m epochtrain``): train from the shell.

``epochtrain train --algo ppo --env CartPole-v1 --seed 0 --max-epoch 10 --set lr=3e-4``
resolves a :class:`~epochtrain.spec.RunSpec` (the tuned preset, or ``--config run.toml``,
then the flags, then each ``--set NAME=VALUE``), builds it with
:func:`epochtrain.make_trainer`, prints one line per epoch, writes the resolved
``spec.toml`` and the logs (TensorBoard unless ``logging.loggers`` says otherwise) to
``<logdir>/<env>_<algo>_seed<seed>_<time>`` and ends with the mean test return.
``epochtrain config ...`` prints the resolved spec. The flags and the settings list in
``--help`` are generated from the spec's dataclasses. Bad options exit with status 2 and a
one-line message.

Checkpoints go to ``<run dir>/checkpoints`` every epoch; ``train ... --resume PATH``
continues a run and ``epochtrain eval PATH --episodes 10`` tests a checkpoint's policy.
The ``eval`` and ``collect`` commands live in :mod:`epochtrain.cli_policy`, ``sweep`` and
``compare`` in :mod:`epochtrain.experiment.cli`; this module builds the parser, runs
``train`` and ``config`` and dispatches the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shlex
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from epochtrain.spec_args import (
    add_spec_options,
    flag_words,
    resolve_spec,
    setting_flags,
    settings_help,
    spec_flags,
)

if TYPE_CHECKING:
    from epochtrain.trainer.params import SettingsMismatchError

__all__ = ["build_parser", "command_words", "main", "plain_text"]

# Errors found before any work starts: a one-line message and exit status 2 (a missing
# optional extra is an ImportError subclass naming the pip command). Every command uses it.
USAGE_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError, FileNotFoundError, ImportError)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}{_choice_hint(message)}\n")


def _choice_hint(message: str) -> str:
    """`` (did you mean 'ppo'?)`` for argparse's "invalid choice: 'PPO' (choose from
    ...)", by :func:`~epochtrain.config.close_matches` (case ignored), else ``""``."""
    from epochtrain.config import close_matches

    found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if found is None:
        return ""
    return close_matches(found[1], re.findall(r"'([^']*)'", found[2]))


_ROLE = re.compile(r":[a-z]+:`(~?)([^`]*)`")
_LITERAL = re.compile(r"``([^`]*)``")
_CODE = re.compile(r"`([^`]*)`")


def plain_text(text: str) -> str:
    """``text`` (docstrings: the settings' help) without its reStructuredText markup, for
    ``--help``: ````name```` is ``name``, ``:func:`~a.b.f``` is ``f`` and
    ``:func:`a.b.f``` is ``a.b.f``, a Markdown ```code``` is ``code``."""
    text = _ROLE.sub(lambda m: m[2].rpartition(".")[2] if m[1] else m[2], text)
    return _CODE.sub(r"\1", _LITERAL.sub(r"\1", text))


_PYTHON_WORDS: dict[str, list[tuple[re.Pattern[str], str]]] = {
    "--device": [
        (re.compile(r"\bdevice='([^']*)'"), r"--device \1"),
        (re.compile(r"(?<![\w.-])(?:[A-Z]\w*\.)?device must be"), "--device must be"),
    ],
    "--env": [(re.compile(r"\benv_id '([^']*)'"), r"--env \1")],
    "--seed": [
        (re.compile(r"(?<![\w.-])(?:[A-Z]\w*\.)?seed must be"), "--seed must be"),
        (re.compile(r"\bset seed within"), "give --seed within"),
    ],
}
"""The words of the Python API for settings whose option is named otherwise (or that
:func:`~epochtrain.spec_args.flag_words` leaves: one-word names), and the option's."""


def command_words(
    message: str, options: Sequence[str] = tuple(_PYTHON_WORDS), *, spec_flags: bool = True
) -> str:
    """``message`` (an error in the Python API's words) in the words of a command that has
    ``options``: ``device='cuda'`` is ``--device cuda``, ``env_id 'X'`` is ``--env X``; with
    ``spec_flags`` (``train``, ``config``: a flag per spec setting) every setting with a
    flag is named with it too (:func:`~epochtrain.spec_args.flag_words`). Only a command's
    own options are named (``eval`` has no ``--env``: its env is the checkpoint's)."""
    for option in options:
        for pattern, words in _PYTHON_WORDS.get(option, []):
            message = pattern.sub(words, message)
    return flag_words(message) if spec_flags else message


class _DefaultsFormatter(
    argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter
):
    """Appends ``(default: ...)`` to an option's help unless the help already states it;
    the epilog (the settings table) keeps its line breaks; docstring markup is left out."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.required or action.default is None:
            return plain_text(text)
        return plain_text(super()._get_help_string(action) or "")

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain_text(text))


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser; ``--help`` lists every option and setting with its default."""
    fmt = _DefaultsFormatter
    description = __doc__.splitlines()[0].replace("``", "")  # the docstring's markup
    parser = _Parser(prog="epochtrain", description=description, formatter_class=fmt)
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
    # imported here, not at the top: cli_policy imports USAGE_ERRORS from this module
    from epochtrain.cli_policy import add_collect_parser, add_eval_parser
    from epochtrain.experiment.cli import add_compare_parser, add_sweep_parser

    add_collect_parser(sub, fmt)
    add_sweep_parser(sub)
    add_compare_parser(sub)
    add_eval_parser(sub, fmt)
    return parser


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
    from epochtrain.data.io import check_writable_dir
    from epochtrain.envs import env_name
    from epochtrain.spec import RunSpec

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
    spec = resolve_spec(args, resumed=resumed)
    _refuse_logdir_setting(args, spec)
    if "trainer.checkpoint_dir" in _options_given(args, spec) and not spec.trainer.checkpoint_dir:
        spec = spec.with_overrides({"checkpoint_dir": ""})  # `--checkpoint-dir none`: none
    if base is None:
        spec = _as_new_run(args, spec)
    if spec.entry.kind == "offline":
        from epochtrain.factory import check_spec

        check_spec(spec, dataset=False)  # Discrete actions for TD3+BC: no dataset helps
        _check_dataset(spec)
    if args.logdir:
        check_writable_dir(args.logdir, "--logdir")
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
        logdir = base.logging.logdir
        if logdir is not None:
            logdir = str(ckpt_dir.parent if ckpt_dir.name == RUN_CHECKPOINTS else Path(logdir))
        run_dir = None if logdir is None else Path(logdir)
        checkpoint_dir = spec.trainer.checkpoint_dir
        if checkpoint_dir is None:
            checkpoint_dir = str(ckpt_dir)
        spec = spec.with_overrides(
            {"logging.logdir": logdir, "checkpoint_dir": checkpoint_dir, "resume_from": str(ckpt)}
        )
    elif args.logdir:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = f"{env_name(spec.env_id)}_{spec.algo}_seed{spec.seed}_{stamp}"
        run_dir = _new_run_dir(Path(args.logdir), name)
        changes: dict[str, Any] = {"logging.logdir": str(run_dir)}
        if spec.trainer.checkpoint_dir is None:
            changes["checkpoint_dir"] = str(run_dir / RUN_CHECKPOINTS)
        spec = spec.with_overrides(changes)
    if spec.trainer.checkpoint_dir == "":
        spec = spec.with_overrides({"checkpoint_dir": None})
    spec = spec.with_overrides(
        {
            "show_progress": spec.trainer.show_progress and not args.no_progress,
            # on unless --quiet or --no-verbose: a spec file's class default (off) is not asked
            "verbose": not args.quiet and args.verbose is not False,
        }
    )
    return spec, run_dir


def _refuse_logdir_setting(args: argparse.Namespace, spec: Any) -> None:
    """``ValueError`` for ``--set logdir=X`` (or ``logging.logdir``): ``train`` logs into a
    run directory of its own under ``--logdir`` (a resumed run: the checkpoint's), which
    would replace the setting without a word."""
    option = _options_given(args, spec).get("logging.logdir")
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
    them; ``--logdir ''`` turns logging off whatever the file says."""
    from epochtrain.checkpoint import RUN_CHECKPOINTS
    from epochtrain.spec import RunSpec

    changes: dict[str, Any] = {}
    if not args.logdir:
        changes["logging.logdir"] = None
    if args.config is not None:
        with warnings.catch_warnings():  # resolve_spec has read it, with its warnings
            warnings.simplefilter("ignore")
            saved = RunSpec.from_file(args.config)
        logdir, ckpt_dir = saved.logging.logdir, saved.trainer.checkpoint_dir
        own_dir = None if logdir is None else Path(logdir) / RUN_CHECKPOINTS
        if ckpt_dir is not None and Path(ckpt_dir) == own_dir:  # the file of a `train` run
            given = _options_given(args, spec)
            if "trainer.checkpoint_dir" not in given:
                changes["checkpoint_dir"] = None  # the new run directory's, below
            if "trainer.resume_from" not in given:
                changes["resume_from"] = None
    return spec.with_overrides(changes) if changes else spec


def _check_dataset(spec: Any) -> None:
    """``ValueError`` in the command line's words when the offline ``spec`` has no
    ``--dataset`` or names a file that is not there (before anything is built)."""
    dataset = spec.dataset
    record = f"epochtrain collect --env {spec.env_id} --random --steps 10000 --out FILE"
    if dataset is None:
        raise ValueError(
            f"--algo {spec.algo} learns from a dataset: give --dataset FILE (record one with "
            f"`{record}`) or --dataset minari:<dataset id>"
        )
    if not dataset.startswith("minari:") and not Path(dataset).is_file():
        what = "is a directory" if Path(dataset).is_dir() else "does not exist"
        raise ValueError(
            f"--dataset {dataset} {what}: give a file recorded by `{record}` (or a buffer "
            "file of ReplayBuffer.save), or --dataset minari:<dataset id>"
        )


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
    option = _options_given(args, spec).get("trainer.checkpoint_dir")
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


def _options_given(args: argparse.Namespace, spec: Any) -> dict[str, str]:
    """``{setting: the option of this command line that set it}``, as typed: a flag
    (``--no-async-collection``) or ``--set NAME=VALUE`` (the last one naming the setting;
    ``--set`` applies after the flags)."""
    given: dict[str, str] = {}
    for flag, (name, info) in spec_flags().items():
        value = getattr(args, flag.replace("-", "_"), None)
        if info.type is bool and value is not None:
            given[name] = f"--{flag}" if value else f"--no-{flag}"
        elif info.type is not bool and hasattr(args, flag.replace("-", "_")):
            given[name] = f"--{flag}"
    for item in args.set:
        section, field = spec.resolve_name(item.partition("=")[0].strip())
        given[field if section is None else f"{section}.{field}"] = f"--set {item}"
    return given


def _resume_mismatch(args: argparse.Namespace, spec: Any, exc: SettingsMismatchError) -> str:
    """The CLI's words for a ``--resume`` refused over changed settings: the options of
    this command line that changed them, to drop (``--config FILE`` for one the file
    changed), and the options a resumed run may change."""
    given = _options_given(args, spec)
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


def _train(args: argparse.Namespace) -> int:
    from epochtrain.factory import make_trainer
    from epochtrain.trainer.params import SettingsMismatchError

    try:
        spec, run_dir = _prepare_train(args)
    except USAGE_ERRORS as exc:  # found before any work
        print(f"epochtrain: error: {command_words(str(exc))}", file=sys.stderr)
        return 2
    try:
        trainer = make_trainer(spec)
    except USAGE_ERRORS as exc:
        if run_dir is not None and args.resume is None:
            with contextlib.suppress(OSError):
                run_dir.rmdir()  # the new run directory, while nothing is in it
        message = command_words(str(exc))
        if args.resume is not None and isinstance(exc, SettingsMismatchError):
            message = _resume_mismatch(args, spec, exc)
        print(f"epochtrain: error: {message}", file=sys.stderr)
        return 2
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        spec.to_file(run_dir / "spec.toml")
    start = trainer.state.epoch  # the checkpoint's epoch on --resume, else 0
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


def _config(args: argparse.Namespace) -> int:
    try:
        spec = resolve_spec(args)
    except USAGE_ERRORS as exc:
        print(f"epochtrain: error: {command_words(str(exc))}", file=sys.stderr)
        return 2
    print(spec.to_json() if args.json else spec.to_toml(), end="" if not args.json else "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (130 after Ctrl-C, 143 after SIGTERM,
    1 when a checkpoint or log cannot be written: :mod:`epochtrain.cli_interrupts`)."""
    from epochtrain.cli_interrupts import (
        exit_status,
        failed_line,
        ignore_further_interrupts,
        interrupted_line,
        is_file_fault,
        sigterm_as_interrupt,
    )

    words = list(sys.argv[1:] if argv is None else argv)
    try:
        with sigterm_as_interrupt(), warnings.catch_warnings():
            warnings.showwarning = _warning_line
            try:
                return _main(argv)
            finally:  # ended (--help and bad options too): when the process is this command,
                if argv is None:  # a signal in its exit would only kill it, status -2 or -15
                    ignore_further_interrupts()
    except KeyboardInterrupt as exc:
        if argv is None:  # the process is this command, and it ends here: a second Ctrl-C
            ignore_further_interrupts()  # would only print a traceback of the exit
        print(interrupted_line(exc, words), file=sys.stderr)
        return exit_status(exc)
    except Exception as exc:
        if not is_file_fault(exc):
            raise
        print(failed_line(exc, words), file=sys.stderr)
        return 1


def _warning_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """A warning as one line on stderr (not Python's ``file:line: Category`` and source):
    for the user of a command, not the reader of its code."""
    print(f"epochtrain: warning: {message}", file=sys.stderr)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("train", "config"):
        chosen = args.algo or args.config or getattr(args, "resume", None)  # or --resume DIR
        if chosen is None:
            parser.error("the following arguments are required: --algo (or --config FILE)")
    if args.command == "train":
        return _train(args)
    if args.command == "config":
        return _config(args)
    if args.command in ("sweep", "compare"):
        from epochtrain.experiment.cli import run_compare, run_sweep

        return run_sweep(args) if args.command == "sweep" else run_compare(args)
    if args.command in ("collect", "eval"):
        from epochtrain.cli_policy import run_collect, run_eval

        return run_collect(args) if args.command == "collect" else run_eval(args)
    parser.error(f"unknown command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
