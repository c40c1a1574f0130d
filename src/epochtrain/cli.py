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

from epochtrain.spec_args import add_spec_options, flag_words, resolve_spec, settings_help

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


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser; ``--help`` lists every option and setting with its default."""
    fmt = _DefaultsFormatter
    description = __doc__.splitlines()[0]  # its markup: left out by the formatter
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


def _config(args: argparse.Namespace) -> int:
    """Print the resolved spec, once it passes what ``train`` checks before any work (the
    policy on the env's spaces, the device; not the dataset file nor the directories,
    which are where it runs, not what it is)."""
    from epochtrain.factory import check_spec

    try:
        spec = resolve_spec(args)
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
    parser = build_parser()
    args = parser.parse_args(argv)
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
