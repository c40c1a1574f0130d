"""The ``"async"`` backend of :func:`~epochtrain.envs.make_envs`: gymnasium's
``AsyncVectorEnv`` made safe to interrupt.

:func:`_env_process` is the env processes' main function (they ignore Ctrl-C and end quietly
when the run's process is gone); :class:`_AsyncVectorEnv` is the vector env that a Ctrl-C or
SIGTERM during a call leaves usable (its replies are awaited for
:data:`_INTERRUPTED_CALL_GRACE` seconds and discarded) and whose ``close`` cannot wait for
ever (:data:`_PENDING_CALL_WAIT`).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import gymnasium as gym
from gymnasium.vector.async_vector_env import AsyncState, _async_worker


def _env_process(*args: Any) -> None:
    """The main function of an ``"async"`` vector env's process: gymnasium's, which ignores
    Ctrl-C and ends quietly when the run's process is gone.

    A terminal's Ctrl-C (and a Jupyter kernel's interrupt) reaches the whole process group,
    the env processes too: gymnasium's worker then stopped with ``KeyboardInterrupt``, and
    the envs were lost. Here the env processes ignore SIGINT; the run's process handles
    the interrupt, and its envs stay usable (:class:`_AsyncVectorEnv`).

    gymnasium's worker reports every error of its env to the parent through its pipe, so
    the pipe's own errors are all that can leave it: the parent's end closed in every
    process (it was killed, ``kill -9`` or the OOM killer), leaving nobody to tell. The
    worker then read EOF (or, mid-reply, a reset connection), and its report of that failed
    with a ``BrokenPipeError`` traceback on the terminal it shares with the dead run, once
    per env process. Here that ends the process (its env closed, as gymnasium's ``finally``
    does) with nothing printed.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _async_worker(*args)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        return  # the parent is gone


_PENDING_CALL_WAIT = 5.0
"""Seconds an ``"async"`` vector env's ``close`` waits for the replies of a call still
pending before it ends the env processes."""

_INTERRUPTED_CALL_GRACE = 3.0
"""Seconds an ``"async"`` vector env waits, after a Ctrl-C or SIGTERM cut a ``step`` or
``reset`` short, for the env processes' replies to that call (read and discarded, so the
envs take new calls); past it the call is left pending (a hung env)."""

_T = TypeVar("_T")


class _AsyncVectorEnv(gym.vector.AsyncVectorEnv):
    """gymnasium's ``AsyncVectorEnv`` that a Ctrl-C leaves usable, and whose ``close``
    cannot wait for ever.

    ``step``/``reset`` first wait until every env process's reply can be read, reading
    nothing; only then are the replies read, at once. A Ctrl-C or SIGTERM
    (``KeyboardInterrupt``) during that wait (where a call spends its time: the envs
    compute) waits up to :data:`_INTERRUPTED_CALL_GRACE` seconds more for the replies,
    reads and discards them, and is raised: the envs then take new calls
    (:attr:`owes_replies` is False; a trainer's roll-back resets them). A second Ctrl-C
    during that grace ends it at once and is raised. While commands are sent or replies
    read (for fast envs, most of a step) ``step``/``reset`` in the main thread hold SIGINT
    (:meth:`_hold_ctrl_c`): a Ctrl-C then is raised once the call has ended. A call whose
    replies do not come within the grace (a hung env), or that another interrupt (SIGTERM,
    or a Ctrl-C outside ``step``/``reset``) cut short while commands were sent or replies
    read (which env processes got or answered it is unknown), is left owing its replies:
    the envs take no further call
    (:class:`~epochtrain.data.Collector` gives up on them) and ``close`` ends the env
    processes at once. ``close`` waits :data:`_PENDING_CALL_WAIT` seconds for the replies
    of a call still pending otherwise (gymnasium's close, without a timeout, waited for ever
    for replies already read), then ends the env processes.
    """

    _transfer_cut = False
    """True from the start of sending commands or reading replies until it completed: an
    interrupt in between leaves it True (a class default: ``make_envs`` swaps the class of
    an env gymnasium built)."""

    @property
    def owes_replies(self) -> bool:
        """True while a call's replies may still be owed: a call pending (one an interrupt
        cut short and whose replies did not come within the grace), or one cut short while
        commands were sent or replies read. The envs then take no further call."""
        return self._state != AsyncState.DEFAULT or self._transfer_cut

    _holding: Any = None
    """While ``step``/``reset`` run in the main thread: the SIGINT handler they replaced
    (see :meth:`_hold_ctrl_c`), else None."""
    _held = False  # a Ctrl-C arrived while commands were sent or replies read
    _waiting = False  # in the wait for the replies: a Ctrl-C is raised at once

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> Any:
        """gymnasium's, with Ctrl-C held while commands are sent or replies read."""
        holds = self._hold_ctrl_c()
        try:
            return super().reset(seed=seed, options=options)
        finally:
            if holds:
                self._release_ctrl_c()

    def step(self, actions: Any) -> Any:
        """gymnasium's, with Ctrl-C held while commands are sent or replies read."""
        holds = self._hold_ctrl_c()
        try:
            return super().step(actions)
        finally:
            if holds:
                self._release_ctrl_c()

    def _hold_ctrl_c(self) -> bool:
        """In the main thread, hold SIGINT while commands are sent and replies read (the
        microseconds in which a Ctrl-C would leave unknown which env processes got or
        answered the call: for fast envs, most of a step): its handler is called at once
        in the wait for the replies, else when the call has ended. True when it holds."""
        if self._holding is not None or threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGINT) is None:  # set outside Python: cannot be put back
            return False
        self._held = False
        self._holding = signal.signal(signal.SIGINT, self._on_ctrl_c)
        return True

    def _on_ctrl_c(self, signum: int, frame: FrameType | None) -> None:
        if self._waiting:
            self._pass_on(signum, frame)
        else:
            self._held = True

    def _release_ctrl_c(self) -> None:
        """Put the SIGINT handler back; call it for a Ctrl-C held meanwhile."""
        previous, self._holding = self._holding, None
        signal.signal(signal.SIGINT, previous)
        if self._held:
            self._held = False
            self._pass_on(signal.SIGINT, None, previous)

    def _pass_on(self, signum: int, frame: FrameType | None, handler: Any = None) -> None:
        """Call the SIGINT handler that was in place (``KeyboardInterrupt``, usually)."""
        handler = self._holding if handler is None else handler
        if callable(handler):
            handler(signum, frame)
        elif handler == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def reset_async(
        self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> None:
        """gymnasium's, marked as a transfer (see :attr:`owes_replies`)."""
        self._transfer_cut = True
        super().reset_async(seed=seed, options=options)
        self._transfer_cut = False

    def step_async(self, actions: Any) -> None:
        """gymnasium's, marked as a transfer (see :attr:`owes_replies`)."""
        self._transfer_cut = True
        super().step_async(actions)
        self._transfer_cut = False

    def reset_wait(self, timeout: float | None = None) -> Any:
        """gymnasium's, once every reply can be read (see the class)."""
        return self._receive(AsyncState.WAITING_RESET, super().reset_wait, timeout)

    def step_wait(self, timeout: float | None = None) -> Any:
        """gymnasium's, once every reply can be read (see the class)."""
        return self._receive(AsyncState.WAITING_STEP, super().step_wait, timeout)

    def _receive(
        self, state: AsyncState, read: Callable[[float | None], _T], timeout: float | None
    ) -> _T:
        """Wait until every reply of the pending call can be read, then ``read`` them."""
        if self.closed or self._state != state:
            return read(timeout)  # gymnasium's error names the misuse
        try:
            self._waiting = True
            ready = self._await_replies(timeout)
        except KeyboardInterrupt:
            self._settle(_INTERRUPTED_CALL_GRACE)
            raise
        finally:
            self._waiting = False
        if not ready:
            self._transfer_cut = True  # the replies may still come: no call can follow
            raise multiprocessing.TimeoutError(
                f"the call to `{state.value}_wait` timed out after {timeout} second(s)"
            )
        self._transfer_cut = True
        try:
            result = read(None)  # every reply is there: read at once
        except Exception:
            # an env's error (gymnasium read every reply, then raised: the state is
            # DEFAULT) leaves nothing owed; a pipe's error (a dead process) leaves it pending
            self._transfer_cut = self._state != AsyncState.DEFAULT
            raise
        self._transfer_cut = False
        return result

    def _await_replies(self, timeout: float | None) -> bool:
        """Wait until every env process's reply can be read, reading nothing; False when
        ``timeout`` seconds passed first. A closed pipe (a dead process) counts as ready:
        reading it raises."""
        pending = [pipe for pipe in self.parent_pipes if pipe is not None]
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = multiprocessing.connection.wait(pending, left)
            if not ready:
                return False
            pending = [pipe for pipe in pending if pipe not in ready]
        return True

    def _settle(self, timeout: float) -> bool:
        """Read and discard the replies of the pending call, if they all come within
        ``timeout`` seconds; True when the envs then take new calls. Otherwise (they did
        not come, an env raised, or a second interrupt, which is raised) the call is left
        owing its replies."""
        self._transfer_cut = True  # unless settled below
        self._waiting = True  # a second Ctrl-C ends the wait at once
        try:
            if not self._await_replies(timeout):
                return False
        finally:
            self._waiting = False
        read = getattr(gym.vector.AsyncVectorEnv, f"{self._state.value}_wait")
        try:
            read(self, None)
        except Exception:  # an env's error in the discarded call: gymnasium closed its pipe
            return False
        self._transfer_cut = False
        return True

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """Close the envs, ending their processes if a pending call's replies do not come
        or a call was cut short mid-transfer (:attr:`owes_replies`)."""
        if self._transfer_cut:
            terminate = True
        elif self._state != AsyncState.DEFAULT and not terminate:
            terminate = not self._settle(_PENDING_CALL_WAIT if timeout is None else timeout)
        self._state = AsyncState.DEFAULT
        super().close_extras(timeout=timeout, terminate=terminate)
        # the ended processes' handles: a closed env kept referenced (a trainer in a
        # sweep's list of results) held 4 of their descriptors per env set; with every one
        # ended, the list is emptied (a closed Process answers nothing, not even exitcode)
        if all(process.exitcode is not None for process in self.processes):
            for process in self.processes:
                process.close()
            self.processes = []
