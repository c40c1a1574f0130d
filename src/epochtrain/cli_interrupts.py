"""How a command of the CLI ends when it is interrupted: Ctrl-C or SIGTERM, then one line.

SIGTERM (``kill PID``, a scheduler's stop or pre-emption) is handled as Ctrl-C is: the
trainer goes back to its last complete epoch, the sweep's workers stop (see
:mod:`epochtrain.experiment.processes`), and the command prints where to resume. The exit
status is 128 plus the signal number, as a shell reports a process the signal killed:
130 after Ctrl-C, 143 after SIGTERM.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from epochtrain.errors import Terminated, raise_terminated

__all__ = ["Terminated", "exit_status", "interrupted_line", "sigterm_as_interrupt"]


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Raise :class:`Terminated` at SIGTERM inside the block (main thread only: signal
    handlers can only be set there; elsewhere the block runs unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_status(exc: KeyboardInterrupt) -> int:
    """128 plus the signal's number: 143 after SIGTERM, 130 after Ctrl-C."""
    return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)


def interrupted_line(exc: KeyboardInterrupt, argv: list[str]) -> str:
    """One line: what was kept and the command that continues from it.

    ``sweep`` continues by running the same command again (finished runs are skipped, the
    others resume from their latest checkpoints); ``train`` with ``--resume`` and the run
    directory of the last checkpoint the interrupt carries; the other commands keep
    nothing to continue from.
    """
    from epochtrain.errors import LAST_CHECKPOINT_NOTE as prefix

    what = "terminated" if isinstance(exc, Terminated) else "interrupted"
    if argv[:1] == ["sweep"]:
        command = shlex.join(["epochtrain", *argv])
        return (
            f"epochtrain: {what}; finished runs and checkpoints are kept; "
            f"continue with the same command: {command}"
        )
    notes = [n for n in getattr(exc, "__notes__", []) if n.startswith(prefix)]
    if argv[:1] != ["train"]:  # eval, collect, compare, config: nothing to resume
        return f"epochtrain: {what}"
    if not notes:
        return f"epochtrain: {what} before any checkpoint was written; nothing to resume"
    ckpt = notes[-1][len(prefix) :]
    args = [a for i, a in enumerate(argv) if a != "--resume" and argv[i - 1 : i] != ["--resume"]]
    command = shlex.join(["epochtrain", *args, "--resume", str(Path(ckpt).parent)])
    return f"epochtrain: {what}; last checkpoint {ckpt}; resume with: {command}"
