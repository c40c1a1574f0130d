"""The errors epochtrain raises for faults a user meets: broken files, non-finite numbers, envs.

Imports nothing from epochtrain, so every layer (``data`` included) can raise them. Each
message names the file, parameter or env, the cause and the fix.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from types import FrameType

__all__ = [
    "LAST_CHECKPOINT_NOTE",
    "RESUMED_FROM_NOTE",
    "CheckpointError",
    "EnvError",
    "NonFiniteError",
    "Terminated",
    "raise_terminated",
    "terminated_handler",
]

LAST_CHECKPOINT_NOTE = "epochtrain: last checkpoint: "
"""Prefix of the note a trainer adds to a ``KeyboardInterrupt``: the path of its last
checkpoint follows (the CLI prints it with the command that resumes). Only a checkpoint in
the trainer's own ``checkpoint_dir``: one it wrote, or the one of its own run it resumed
from."""

RESUMED_FROM_NOTE = "epochtrain: resumed from: "
"""Prefix of the note in place of :data:`LAST_CHECKPOINT_NOTE` when the trainer resumed from
a checkpoint outside its ``checkpoint_dir`` (another run's) and wrote none of its own yet:
the path of the checkpoint it resumed from follows. That checkpoint is still what the run
can start from again, but continuing *its* directory would append to the other run."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill PID``, a scheduler's stop), raised where Ctrl-C would be, so that a
    run ends the same way: back at its last complete epoch."""


def raise_terminated(signum: int, frame: FrameType | None) -> None:
    """Raise :class:`Terminated` (for a SIGTERM handler that decides when to)."""
    raise Terminated(f"signal {signum}")


def terminated_handler() -> Callable[[int, FrameType | None], None]:
    """A SIGTERM handler raising :class:`Terminated` in this process
    (``signal.signal(signal.SIGTERM, terminated_handler())``).

    A process forked from this one inherits the handler (an ``AsyncVectorEnv`` worker
    does); there SIGTERM keeps its default and ends the process quietly, as the parent
    that stops its workers expects, instead of a traceback of ``Terminated``.
    """
    owner = os.getpid()

    def handler(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise_terminated(signum, frame)

    return handler


class CheckpointError(ValueError):
    """A checkpoint, buffer or dataset file that is partial, corrupt, unsafe or cannot be
    written; the message names the file and the cause."""


class NonFiniteError(FloatingPointError):
    """NaN or inf in a loss, a gradient norm, the weights or the data an env returned.

    ``where`` says what went non-finite (``"loss 'critic' at gradient step 12"``,
    ``"reward of sub-env 3 of 'Pendulum-v1' at env step 812"``).
    """

    def __init__(self, message: str, *, where: str = "", env_step: int | None = None) -> None:
        super().__init__(message)
        self.where = where
        self.env_step = env_step
        """For env data: env steps into the collect step at which it was seen."""


class EnvError(RuntimeError):
    """An env's ``step()`` or ``reset()`` raised; the message names the sub-env, the env id,
    the env step and the epoch, and the original exception is the ``__cause__``.

    The vector env was closed before this was raised (no worker process is left behind).
    """

    def __init__(
        self,
        message: str,
        *,
        sub_env: int | None = None,
        env_id: str = "",
        env_step: int | None = None,
    ) -> None:
        super().__init__(message)
        self.sub_env = sub_env
        self.env_id = env_id
        self.env_step = env_step
