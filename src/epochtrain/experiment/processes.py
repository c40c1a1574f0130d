"""The ``"processes"`` backend's driver: runs in a pool of spawned workers, stopped together.

The driver (the process in :func:`run_processes`) holds a pipe to each worker: it hands an
idle worker the next run, and the worker sends the run's progress and status back. None of
this is a named semaphore (a multiprocessing queue's or event's lock is one: a file in
``/dev/shm`` that only the process which made it removes, as it exits), so a driver killed
with ``kill -9`` leaves nothing behind: no file, and no warning of multiprocessing's resource
tracker ("There appear to be 13 leaked semaphore objects to clean up at shutdown", printed
after the shell's prompt once the last worker had exited, when the pool had queues).

When the driver is interrupted (Ctrl-C, SIGTERM through the CLI, any exception) it closes
the stop pipe, whose write end only it holds: every worker interrupts its run as Ctrl-C
would (the trainer goes back to its last complete epoch, whose checkpoint is on disk, and
its envs close), no queued run starts, and the interrupt is raised again once the workers
have exited. A worker still busy :data:`STOP_GRACE` seconds later, or at a second Ctrl-C,
is killed. A driver killed with ``kill -9`` closes the stop pipe as it dies, so each worker
interrupts its run the same way at once, and exits. Interrupted runs get no
``result.json``, so re-running the experiment resumes them. A worker that dies on its own
(the OOM killer) takes its pool down: the runs not ended start again in a new pool from
their latest checkpoints, ``max_failures`` times (:func:`run_processes`).

Workers ignore SIGINT (:mod:`epochtrain.experiment.process_worker`): a terminal's Ctrl-C
reaches the whole process group, and each run must be interrupted once, by its worker's
watcher. They are born with SIGINT blocked (the signal mask is inherited across fork and
exec), so a Ctrl-C while one still imports torch stays pending until the worker discards
it. The parent holds SIGINT meanwhile and raises it once the workers are spawned: it is
late, never lost (an ignored disposition instead of the mask would drop a Ctrl-C pressed
during the spawning).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import signal
import threading
import time
import warnings
from collections import deque
from collections.abc import Collection, Iterator
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnProcess
from pathlib import Path

from epochtrain.checkpoint_files import deferred_signals
from epochtrain.experiment import process_worker
from epochtrain.experiment.process_worker import IN_USE, _failed
from epochtrain.experiment.progress import Progress
from epochtrain.experiment.runs import is_finished, note_in_use, run_in_use

__all__ = ["IN_USE", "STOP_GRACE", "run_processes"]

STOP_GRACE = 30.0
"""Seconds the workers get to end their interrupted runs before they are killed."""


def run_processes(
    run_dirs: Collection[Path], workers: int, progress: Progress, *, max_failures: int = 3
) -> None:
    """Run each of ``run_dirs`` to its end in a pool of ``workers`` spawned processes.

    A worker that dies (the OOM killer, ``kill -9``) breaks the pool, and the pool stops
    the other workers as SIGTERM would, so their runs go back to their last complete
    epochs and say so. The run the dead worker had begun counts a failure; the runs
    stopped by the pool do not (when no run can be blamed, as when a worker cannot start or
    died between runs, each run that had begun counts one, or every run when none had).
    Every run not ended starts again from its latest checkpoint in a new pool; a run past
    ``max_failures`` failures is recorded as failed, naming how its worker died.
    """
    failures: dict[Path, int] = {}
    todo = list(run_dirs)
    while todo:
        todo = _run_pool(todo, min(workers, len(todo)), progress, failures, max_failures)


def _run_pool(
    run_dirs: list[Path],
    workers: int,
    progress: Progress,
    failures: dict[Path, int],
    max_failures: int,
) -> list[Path]:
    """Run ``run_dirs`` in one pool; returns those to run again (a worker died, or stopped)."""
    pool = _Pool(progress)
    try:
        with _workers_born_with_sigint_blocked():
            for _ in range(workers):
                pool.seats.append(_spawn_worker(pool.stop_reader))
        pool.run(run_dirs)
    except BaseException:
        pool.stop()
        raise
    pool.close()
    # the dead worker's run is to blame; if it had begun none (it died between runs or as
    # it started), every run begun counts one, and when none had, every run
    again = [run_dir for run_dir in run_dirs if run_dir in pool.again]
    blamed = (set(pool.died_with) & pool.begun) or (pool.begun & set(again)) or set(again)
    why = "a worker process of the sweep died" if pool.died else "its worker was stopped"
    todo = []
    for run_dir in again:
        if is_finished(run_dir):  # it ended just before its worker died
            progress.end(run_dir, failed=False)
            continue
        failures[run_dir] = failures.get(run_dir, 0) + (bool(pool.died) and run_dir in blamed)
        if failures[run_dir] > max_failures:
            times = f"{failures[run_dir]} time{'s' if failures[run_dir] > 1 else ''}"
            error = BrokenProcessPool(
                f"a worker process died while this run was in its pool {times} "
                f"(max_failures={max_failures}); the last time: "
                f"{pool.died_with.get(run_dir, pool.died[-1])}"
            )
            if _failed(run_dir, error) == IN_USE:
                note_in_use(run_dir, run_in_use(run_dir) or "it has ended since")
            else:
                progress.end(run_dir, failed=True)
        else:
            if run_dir in pool.begun:
                progress.restart(run_dir, why)
            todo.append(run_dir)
    return todo


@dataclass(eq=False)
class _Seat:
    """A worker process as the driver sees it: its pipe, and the run it holds."""

    process: SpawnProcess
    conn: Connection | None
    """The driver's end of the worker's pipe; None once closed (no more to send or read)."""
    run: Path | None = None
    """The run handed to the worker, until it says how that run ended."""
    dismissed: bool = False
    """Told to exit, or stopped: its end is expected, not a death."""
    exited: bool = False
    """Its exit has been seen (and judged: a death unless it was dismissed)."""
    semaphores: set[str] = field(default_factory=set)
    """The named semaphores it holds, as it said (:func:`_remove_semaphores`)."""
    cut_off: bool = False
    """Its pipe was closed while it ran: what it said since, of its semaphores, is lost."""


def _spawn_worker(stop_reader: Connection) -> _Seat:
    """Start a worker process (:func:`~epochtrain.experiment.process_worker._serve`, looked
    up there as it starts) with a pipe of its own."""
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    process = ctx.Process(
        target=process_worker._serve,
        args=(there, stop_reader, os.getpid()),
        name="epochtrain-sweep-worker",
    )
    process.start()
    there.close()
    return _Seat(process, here)


class _Pool:
    """The workers of one pool, the runs handed to them and what they said of them.

    The pool's stop pipe has one write end, the driver's: the driver closes it to stop the
    pool, and it closes as the driver dies; every worker watches the read end."""

    def __init__(self, progress: Progress) -> None:
        self.stop_reader, self._stop_writer = multiprocessing.get_context("spawn").Pipe(
            duplex=False
        )
        self.seats: list[_Seat] = []
        self.begun: set[Path] = set()
        self.again: set[Path] = set()
        """Runs handed back: stopped in their worker, or held by one that died."""
        self.died: list[str] = []
        """How each worker that died on its own ended (``worker process 12 was killed by
        SIGKILL``)."""
        self.died_with: dict[Path, str] = {}
        """The runs those workers held, and how each one's worker ended."""
        self._progress: Progress | None = progress

    def run(self, run_dirs: list[Path]) -> None:
        """Hand ``run_dirs`` out in order, the next one to each worker that is idle, until
        every run has ended or been handed back; a worker that dies takes the pool down
        (:meth:`_take_down`)."""
        queue = deque(run_dirs)
        while True:
            for seat in self.seats:
                if seat.run is not None or seat.dismissed or seat.conn is None:
                    continue  # busy, told to exit, or gone (its exit is judged once seen)
                if queue:
                    self._hand(seat, queue.popleft())
                else:  # nothing left for it: it exits as its pipe closes
                    self._dismiss(seat)
            if not self._step(None):
                break
            if self.died:
                self._take_down()
                break
        self.again.update(queue)  # left when every worker was stopped, or the pool broke

    def stop(self) -> None:
        """Interrupt every worker's run and wait for them (module docstring), then for the
        workers' exit: nothing is left for the interpreter's exit to wait on, where a second
        Ctrl-C would print a traceback of ``threading``. Nothing is reported any more."""
        self._progress = None
        self._stop_writer.close()  # every worker: its run is interrupted, or it exits
        for seat in self.seats:  # not read again (an interrupt may have cut a message)
            self._dismiss(seat)
        kill = True
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: kill them now
            kill = not self._wait_exits(STOP_GRACE)
        while True:
            if kill:
                self._kill()
            try:
                self._wait_exits(None)
                break
            except KeyboardInterrupt:  # another Ctrl-C while they exit: kill them
                kill = True
        self.close()

    def close(self) -> None:
        """Reap the workers (every one has exited) and close every pipe."""
        for seat in self.seats:
            seat.process.join()
            if seat.conn is not None:
                seat.conn.close()
                seat.conn = None
        self._stop_writer.close()
        self.stop_reader.close()

    def _hand(self, seat: _Seat, run_dir: Path) -> None:
        assert seat.conn is not None, "run() hands runs to workers with a pipe"
        seat.run = run_dir
        with contextlib.suppress(OSError):  # it has died: seen at its exit
            seat.conn.send(os.fspath(run_dir))

    def _dismiss(self, seat: _Seat) -> None:
        seat.dismissed = True
        if seat.conn is not None:
            seat.cut_off = not seat.exited
            seat.conn.close()
            seat.conn = None

    def _kill(self) -> None:
        for seat in self.seats:
            if not seat.exited:
                seat.process.kill()

    def _step(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for a worker to say something or exit, then read
        what they said and note the deaths; False once every worker has exited."""
        live = [seat for seat in self.seats if not seat.exited]
        conns = [seat.conn for seat in self.seats if seat.conn is not None]
        if not live and not conns:
            return False
        wait([*conns, *(seat.process.sentinel for seat in live)], timeout)
        # exits first, then the pipes: what a worker said before it exited is read before
        # its exit is judged, so a stopped worker's last word is never taken for a death
        exited = [seat for seat in live if seat.process.exitcode is not None]
        for seat in self.seats:
            self._read(seat)
        for seat in exited:
            seat.exited = True
            code = seat.process.exitcode
            if code is not None and code < 0 and not seat.cut_off:  # killed: no clean-up ran
                _remove_semaphores(seat.semaphores)
            if not seat.dismissed:
                self.died.append(_how_it_ended(seat.process))
                if seat.run is not None:
                    self.died_with[seat.run] = self.died[-1]
        return True

    def _wait_exits(self, timeout: float | None) -> bool:
        """Wait, reading what the workers say, until every one has exited (True) or
        ``timeout`` seconds have passed (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if all(seat.exited for seat in self.seats):
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._step(left)

    def _take_down(self) -> None:
        """A worker died: stop the others as SIGTERM does (a run goes back to its last
        complete epoch and says so; an idle worker ends quietly) and wait for them."""
        for seat in self.seats:
            seat.dismissed = True
            if not seat.exited:
                seat.process.terminate()
        if not self._wait_exits(STOP_GRACE):
            self._kill()
            self._wait_exits(None)
        self.again.update(seat.run for seat in self.seats if seat.run is not None)

    def _read(self, seat: _Seat) -> None:
        while seat.conn is not None and seat.conn.poll():
            try:
                name, kind, value = seat.conn.recv()
            except Exception:  # EOFError: it has exited (or was killed mid-message)
                seat.conn.close()
                seat.conn = None
                return
            run_dir = Path(name)
            if kind == "semaphore":
                action, semaphore = value
                if action == "register":
                    seat.semaphores.add(semaphore)
                else:
                    seat.semaphores.discard(semaphore)
            elif kind == "begin":
                self.begun.add(run_dir)
            elif kind == "end":
                seat.run = None
                self._ended(seat, run_dir, value)
            elif kind == "warning":  # a run's, warned here: the CLI shows it as its own
                category, text = value
                warnings.warn(f"{run_dir.name}: {text}", category, stacklevel=2)
            elif self._progress is None:
                continue
            elif kind == "start":
                self._progress.start(run_dir, value)
            else:
                self._progress.epoch(run_dir, value)

    def _ended(self, seat: _Seat, run_dir: Path, status: str | BaseException) -> None:
        if status == "interrupted":  # stopped (the pool, a SIGTERM): it runs no more
            self.again.add(run_dir)
            self._dismiss(seat)
            return
        if self._progress is None:
            return
        if isinstance(status, BaseException):  # the worker could not record the end
            status = _failed(run_dir, status)
        if status == IN_USE:
            note_in_use(run_dir, run_in_use(run_dir) or "it has ended since")
        else:
            self._progress.end(run_dir, failed=status != "finished")


def _remove_semaphores(names: set[str]) -> None:
    """Unlink the named semaphores of a worker killed while it held them (an ``"async"``
    vector env's), and take them off multiprocessing's resource tracker, which this
    process shares with its workers: else it would remove them only as the sweep ends,
    warning "There appear to be 6 leaked semaphore objects to clean up at shutdown"."""
    semaphores = importlib.import_module("_multiprocessing")  # sem_unlink has no stub
    for name in names:
        with contextlib.suppress(OSError):  # unlinked as the worker died (a name it held)
            semaphores.sem_unlink(name)
        resource_tracker.unregister(name, "semaphore")
    names.clear()


def _how_it_ended(process: SpawnProcess) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"worker process {process.pid} was killed by {signal.Signals(-code).name}"
    return f"worker process {process.pid} exited with status {code}"


@contextlib.contextmanager
def _workers_born_with_sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread for the block, so the workers it spawns are born with
    it blocked (:func:`~epochtrain.experiment.process_worker._init_worker` then ignores it
    and unblocks it); a Ctrl-C meanwhile is held and raised after the block
    (:func:`deferred_signals`), not lost. Main thread only: elsewhere the block runs
    unchanged (signal handlers are the main thread's).

    Multiprocessing's resource tracker, which a POSIX spawn starts if it is not running,
    unblocks SIGINT in the thread that starts it: it is started before the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if os.name == "posix":
        resource_tracker.ensure_running()
    with deferred_signals():
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:  # a SIGINT pending meanwhile arrives here, and is held
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
