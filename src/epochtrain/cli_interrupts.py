"""How a command of the CLI ends when it is interrupted or its disk fails: one line.

SIGTERM (``kill PID``, a scheduler's stop or pre-emption) is handled as Ctrl-C is: the
trainer goes back to its last complete epoch, the sweep's workers stop (see
:mod:`epochtrain.experiment.processes`), and the command prints where to resume. The exit
status is 128 plus the signal number, as a shell reports a process the signal killed:
130 after Ctrl-C, 143 after SIGTERM. So it is, too, while the command still imports its
modules (torch with them, for seconds: :func:`exit_at_interrupt`); ``import epochtrain``
imports none of them, so the command is in charge from its start. Once the command has
returned, the process ignores both signals (:func:`ignore_further_interrupts`): one landing
in the interpreter's exit does not turn a finished command's status into a kill by it.

A checkpoint that cannot be written, or another write the machine refuses (a full disk
or quota, a file-size limit, a read-only file system: :func:`is_file_fault`), ends the
command with status 1 and the same kind of line: the error, then where to resume once the
cause is fixed. A failed save never touches the earlier checkpoints.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from epochtrain.errors import (
    LAST_CHECKPOINT_NOTE,
    RESUMED_FROM_NOTE,
    CheckpointError,
    Terminated,
    terminated_handler,
)

__all__ = [
    "Terminated",
    "end_interrupted",
    "exit_at_interrupt",
    "exit_status",
    "failed_line",
    "ignore_further_interrupts",
    "interrupted_line",
    "is_file_fault",
    "sigterm_as_interrupt",
]

_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Raise :class:`Terminated` at SIGTERM inside the block (main thread only: signal
    handlers can only be set there; elsewhere the block runs unchanged).

    The handler before the block comes back at its end, unless the block replaced this
    one: :func:`ignore_further_interrupts` at the end of a command stays in force, with no
    moment between in which a SIGTERM would kill the process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = terminated_handler()
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is handler:
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def exit_at_interrupt(argv: list[str]) -> Iterator[None]:
    """Inside the block, Ctrl-C or SIGTERM ends the process at once: its line
    (:func:`interrupted_line` of ``argv``) on stderr, exit status 130 or 143 (main thread
    only; elsewhere the block runs unchanged).

    For a command's imports (torch's: seconds), before it has started anything to keep. A
    ``KeyboardInterrupt`` raised inside them can abort the interpreter (torch's C++ calling
    back into Python) or, even caught, end the process by SIGINT after all: CPython 3.11
    remembers one raised inside ``exec`` of a string (every ``@dataclass``) as unhandled.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def end_now(signum: int, frame: FrameType | None) -> None:
        exc = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a write this signal interrupted
                stream.flush()
        os.write(2, f"{interrupted_line(exc, argv)}\n".encode())
        os._exit(exit_status(exc))

    previous = {sig: signal.signal(sig, end_now) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def ignore_further_interrupts() -> None:
    """Ignore SIGINT and SIGTERM from now on (main thread only; elsewhere nothing changes).

    For the process of a command that has ended (its results complete) or was interrupted
    and has printed its line (:func:`interrupted_line`): its runs are stopped and their
    files safe, and all that is left is the interpreter's exit (threads joined, atexit
    callbacks, torch's finalizers, a tenth of a second or more). A Ctrl-C or SIGTERM there
    changes nothing but printing a traceback of whichever of them it lands in, and ending
    the process by the signal instead of with its exit status. Not for a program that goes
    on after the command returns.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def exit_status(exc: KeyboardInterrupt) -> int:
    """128 plus the signal's number: 143 after SIGTERM, 130 after Ctrl-C."""
    return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)


def is_file_fault(exc: BaseException) -> bool:
    """True for an error whose message says it all: a ``CheckpointError`` (it names the
    file, the cause and the fix) or a write the machine refused (full disk or quota,
    file-size limit, read-only file system: a log file, a sweep's ``result.json``)."""
    if isinstance(exc, CheckpointError):
        return True
    return isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS


def _is_resume(word: str) -> bool:
    """True for ``--resume`` or ``--resume=PATH`` (no parser takes abbreviations)."""
    return word.partition("=")[0] == "--resume"


def _without_resume(argv: list[str]) -> list[str]:
    """``argv`` less its ``--resume PATH`` (or ``--resume=PATH``)."""
    kept: list[str] = []
    skip_value = False
    for word in argv:
        if skip_value:
            skip_value = False
        elif _is_resume(word):
            skip_value = "=" not in word
        else:
            kept.append(word)
    return kept


def _continue_with(exc: BaseException, argv: list[str]) -> str | None:
    """What was kept and the command that continues from it, or None when nothing was."""
    if argv[:1] == ["sweep"]:
        command = shlex.join(["epochtrain", *argv])
        return f"finished runs and checkpoints are kept; continue with the same command: {command}"
    if argv[:1] != ["train"]:
        return None
    notes = getattr(exc, "__notes__", [])
    last = [n[len(LAST_CHECKPOINT_NOTE) :] for n in notes if n.startswith(LAST_CHECKPOINT_NOTE)]
    if last:
        args = _without_resume(argv)
        command = shlex.join(["epochtrain", *args, "--resume", str(Path(last[-1]).parent)])
        return f"last checkpoint {last[-1]}; resume with: {command}"
    source = [n[len(RESUMED_FROM_NOTE) :] for n in notes if n.startswith(RESUMED_FROM_NOTE)]
    if source:  # another run's checkpoint: `--resume` of its directory would append to it
        command = shlex.join(["epochtrain", *argv])
        return (
            f"no checkpoint of this run was written; the checkpoint it resumed from is kept "
            f"({source[-1]}); start again from it with the same command: {command}"
        )
    if any(_is_resume(word) for word in argv):  # stopped before its first new checkpoint
        command = shlex.join(["epochtrain", *argv])
        return (
            "no new checkpoint was written and the run's checkpoints are kept; resume with "
            f"the same command: {command}"
        )
    return None


def interrupted_line(exc: KeyboardInterrupt, argv: list[str]) -> str:
    """One line: what was kept and the command that continues from it.

    ``sweep`` continues by running the same command again (finished runs are skipped, the
    others resume from their latest checkpoints); ``train`` with ``--resume`` and the run
    directory of the last checkpoint the interrupt carries; ``train --resume PATH`` stopped
    before it wrote a checkpoint of its own by the same command (the checkpoints it
    resumes from are untouched); a new ``train`` stopped then has nothing to resume; the
    other commands keep nothing to continue from.
    """
    what = "terminated" if isinstance(exc, Terminated) else "interrupted"
    then = _continue_with(exc, argv)
    if then is not None:
        return f"epochtrain: {what}; {then}"
    if argv[:1] == ["train"]:
        return f"epochtrain: {what} before any checkpoint was written; nothing to resume"
    return f"epochtrain: {what}"  # eval, collect, compare, config: nothing to resume


def end_interrupted(exc: KeyboardInterrupt, argv: list[str], *, process_ends: bool) -> int:
    """Print the line of an interrupted command (:func:`interrupted_line`) on stderr and
    return its exit status (:func:`exit_status`).

    ``process_ends``: the command is the process and it ends now (``epochtrain ...`` or
    ``python -m epochtrain ...``, not ``cli.main(argv)`` called by a program that goes
    on); further interrupts are then ignored (:func:`ignore_further_interrupts`).
    """
    if process_ends:
        ignore_further_interrupts()
    print(interrupted_line(exc, argv), file=sys.stderr)
    return exit_status(exc)


def failed_line(exc: BaseException, argv: list[str]) -> str:
    """One line for a file fault (:func:`is_file_fault`): the error, then, as after an
    interrupt, the command that continues once the cause is fixed."""
    then = _continue_with(exc, argv)
    return f"epochtrain: error: {exc}" + ("" if then is None else f"; {then}")
