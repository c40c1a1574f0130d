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
The ``train`` command lives in :mod:`epochtrain.cli_train`, ``eval`` and ``collect`` in
:mod:`epochtrain.cli_policy`, ``sweep`` and ``compare`` in :mod:`epochtrain.experiment.cli`;
this module builds the parser, puts errors in the command line's words
(:func:`command_words`) and the help in plain text, runs ``config`` and dispatches the rest.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import sys
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from epochtrain.spec_args import (
    add_spec_options,
    flag_words,
    resolve_spec,
    settings_help,
    spec_flags,
)

__all__ = [
    "COMMAND_DEFAULTS",
    "build_parser",
    "command_words",
    "main",
    "options_given",
    "plain_text",
    "resolve_command_spec",
]

# Errors found before any work starts: a one-line message and exit status 2 (a missing
# optional extra is an ImportError subclass naming the pip command). Every command uses it.
USAGE_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError, FileNotFoundError, ImportError)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2, and that
    takes no abbreviation of an option (``--see`` is not ``--seed``): a command keeps its
    meaning when a later version adds an option (``--seeds``), and a misspelt option is
    refused with a "did you mean" (:func:`_option_hint`). The subcommands' parsers are of
    this class too (``parser_class``), so each of them refuses abbreviations as well."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        hint = _choice_hint(message) or _dash_value_hint(message)
        self.exit(2, f"{self.prog}: error: {message}{hint}\n")


_NEGATIVE_NUMBER = re.compile(r"^-(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?$|^-inf(?:inity)?$", re.I)
"""A value argparse is to read as a number, not as an option: argparse's own pattern takes
``-1`` and ``-1.5`` only, so ``--stop-at -1e2`` (or ``-inf``) was "expected one argument"."""


def _dash_value_hint(message: str) -> str:
    """`` (write --opt=VALUE ...)`` for argparse's "argument --opt: expected one argument",
    which is also what a value starting with ``-`` that is not a number gets, else ``""``."""
    found = re.search(r"argument (--[\w-]+)(?:/\S+)?: expected one argument", message)
    if found is None:
        return ""
    return f" (a value that starts with '-' is written {found[1]}=VALUE)"


def _option_hint(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> str:
    """`` (did you mean '--max-epoch'?)`` for the first of the ``unknown`` arguments of a
    command (``--max-epochs``) close to one of its options (``parser``'s), else ``""``."""
    from epochtrain.suggestions import close_matches

    # argparse has no public list of a parser's options; _actions is in typeshed
    options = [s for action in parser._actions for s in action.option_strings if s[:2] == "--"]
    for word in unknown:
        if word.startswith("--"):
            hint = close_matches(word.partition("=")[0], options)
            if hint:
                return hint
    return ""


def _choice_hint(message: str) -> str:
    """`` (did you mean 'ppo'?)`` for argparse's "invalid choice: 'PPO' (choose from
    ...)", by :func:`~epochtrain.suggestions.close_matches` (case ignored), else ``""``."""
    from epochtrain.suggestions import close_matches

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


COMMAND_DEFAULTS: dict[str, Any] = {"trainer.verbose": True}
"""Settings whose default in ``train`` and ``config`` is not the class default: a command
prints one line per epoch (the log of a run in a terminal or a job's file). Applied where
the commands resolve their spec (:func:`resolve_command_spec`), so ``config`` prints what
``train`` runs; a ``--config`` file that gives one keeps its value; ``--help`` shows them."""

_HELP_NOTES = {
    "trainer.step_per_epoch": "An online epoch is whole collect steps: it ends with the "
    "collect step that reaches this, so with step_per_collect 256 an epoch of 64 runs 256 "
    "env steps (as in Tianshou); the first line of train says how many.",
}
"""What the help of a setting's flag adds for the commands' users."""


def _state_command_defaults(parser: argparse.ArgumentParser, quiet: bool) -> None:
    """Add to the help of the flags of :data:`COMMAND_DEFAULTS` the command's default (and
    ``--quiet`` on ``train``), and :data:`_HELP_NOTES` to theirs."""

    def shown(value: Any) -> str:
        return ("on" if value else "off") if isinstance(value, bool) else repr(value)

    setting_of = {f"--{flag}": (name, info) for flag, (name, info) in spec_flags().items()}
    for action in parser._actions:  # argparse has no public list of them; in typeshed
        found = [setting_of[s] for s in action.option_strings if s in setting_of]
        if not found:
            continue
        name, info = found[0]
        if name in COMMAND_DEFAULTS:
            also = "; --quiet turns it off too" if quiet and name == "trainer.verbose" else ""
            action.help = (
                f"{action.help} (default: {shown(COMMAND_DEFAULTS[name])}{also}; "
                f"in Python: {shown(info.default)})"
            )
        if name in _HELP_NOTES:
            action.help = f"{action.help} {_HELP_NOTES[name]}"


def _settings_epilog() -> str:
    """The settings list of ``--help`` (:func:`~epochtrain.spec_args.settings_help`), with
    the commands' defaults of :data:`COMMAND_DEFAULTS` for the class defaults."""
    text = settings_help()
    for name, value in COMMAND_DEFAULTS.items():
        line = re.compile(rf"^(  {re.escape(name)} = )(\S+)(?=  \[)", re.M)
        text = line.sub(rf"\g<1>{value!r} (in Python: \g<2>)", text)
    return text


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser; ``--help`` lists every option and setting with its default."""
    return _build_parser()[0]


def _build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The command-line parser and the parser of each command."""
    fmt = _DefaultsFormatter
    description = __doc__.splitlines()[0]  # its markup: left out by the formatter
    parser = _Parser(prog="epochtrain", description=description, formatter_class=fmt)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    epilog = _settings_epilog()
    train = sub.add_parser(
        "train", help="train an algorithm on a gymnasium env", formatter_class=fmt, epilog=epilog
    )
    add_spec_options(train)
    _state_command_defaults(train, quiet=True)
    train.add_argument(
        "--logdir",
        default="runs",
        help="parent folder of run directories (none or '' disables)",
    )
    train.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    train.add_argument(
        "--quiet",
        action="store_true",
        help="do not print a line per epoch (the first line, naming the run directory, and "
        "the closing lines stay)",
    )
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
    _state_command_defaults(config, quiet=False)
    config.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    # imported here, not at the top: cli_policy imports USAGE_ERRORS from this module
    from epochtrain.cli_policy import add_collect_parser, add_eval_parser
    from epochtrain.experiment.cli import add_compare_parser, add_sweep_parser

    add_collect_parser(sub, fmt)
    add_sweep_parser(sub)
    add_compare_parser(sub)
    add_eval_parser(sub, fmt)
    for each in (parser, *sub.choices.values()):
        each._negative_number_matcher = _NEGATIVE_NUMBER  # argparse's own is in typeshed
    return parser, dict(sub.choices)


def resolve_command_spec(args: argparse.Namespace, resumed: Any = None) -> Any:
    """The run spec of ``train`` and ``config``:
    :func:`~epochtrain.spec_args.resolve_spec`, with :data:`COMMAND_DEFAULTS` for the
    settings that neither this command line nor a ``--config`` file gives (a ``--resume``
    checkpoint's are the command's of its first run: the defaults apply over them)."""
    spec = resolve_spec(args, resumed=resumed)
    given = set(options_given(args, spec))
    if args.config is not None:
        given |= _file_settings(args.config)
    defaults = {name: v for name, v in COMMAND_DEFAULTS.items() if name not in given}
    return spec.with_overrides(defaults) if defaults else spec


def _file_settings(path: str) -> set[str]:
    """The dotted names of the settings the spec file ``path`` gives (``trainer.verbose``)."""
    from pathlib import Path

    from epochtrain.spec_files import read_spec_file

    names: set[str] = set()
    for key, value in read_spec_file(Path(path)).items():
        names |= {f"{key}.{k}" for k in value} if isinstance(value, dict) else {key}
    return names


def options_given(args: argparse.Namespace, spec: Any) -> dict[str, str]:
    """``{setting: the option of this command line that set it}``, as typed: a flag
    (``--no-async-collection``) or ``--set NAME=VALUE``; a setting that two options give
    is refused before this is asked (:func:`~epochtrain.spec_args.check_given_once`)."""
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


def _config(args: argparse.Namespace) -> int:
    """Print the resolved spec, once it passes what ``train`` checks before any work (the
    policy on the env's spaces, the device; not the dataset file nor the directories,
    which are where it runs, not what it is)."""
    from epochtrain.factory import check_spec

    try:
        spec = resolve_command_spec(args)
        check_spec(spec, dataset=False)
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
                status = _main(argv)
                sys.stdout.flush()  # a reader gone (`| head`) shows here, not at exit
                return status
            finally:  # ended (--help and bad options too): when the process is this command,
                if argv is None:  # a signal in its exit would only kill it, status -2 or -15
                    ignore_further_interrupts()
    except KeyboardInterrupt as exc:
        if argv is None:  # the process is this command, and it ends here: a second Ctrl-C
            ignore_further_interrupts()  # would only print a traceback of the exit
        print(interrupted_line(exc, words), file=sys.stderr)
        return exit_status(exc)
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # another pipe (an env worker's): an error of the command
        return 128 + 13  # as a shell reports SIGPIPE: the reader (`| head`) had enough
    except Exception as exc:
        if not is_file_fault(exc):
            raise
        print(failed_line(exc, words), file=sys.stderr)
        return 1


def _stdout_closed() -> bool:
    """True when standard output is a pipe whose reader has gone (``epochtrain compare DIR |
    head``); then stdout goes to ``os.devnull``, so that the interpreter's last flush at
    exit prints no second error."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        closed = any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real file (captured), or no poll
        return False
    if closed:
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return closed


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
    parser, commands = _build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        hint = _option_hint(commands[args.command], unknown)
        parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    if args.command in ("train", "config"):
        chosen = args.algo or args.config or getattr(args, "resume", None)  # or --resume DIR
        if chosen is None:
            parser.error("the following arguments are required: --algo (or --config FILE)")
    if args.command == "train":
        from epochtrain.cli_train import run_train

        return run_train(args)
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
