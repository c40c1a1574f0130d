"""A worker of the ``"processes"`` backend: runs what its driver hands it, one run at a time.

The driver (:mod:`epochtrain.experiment.processes`) spawns each worker with :func:`_serve`
as its target (the spawn start method pickles it by its module path, and the worker imports
it from here), a pipe of its own and the read end of the pool's stop pipe. The worker sends
each run's progress and status up its pipe (:class:`_ToDriver`), and a thread of it watches
the stop pipe (:meth:`_Worker.watch`): once the driver closes it, to stop the pool, or dies,
the run in progress is interrupted as Ctrl-C would (the trainer goes back to its last
complete epoch, whose checkpoint is on disk, and its envs close), and no further run starts.

Workers ignore SIGINT: a terminal's Ctrl-C reaches the whole process group, and each run
must be interrupted once, by its worker's watcher, not twice. They are born with SIGINT
blocked (the driver spawns them so), so a Ctrl-C while one still imports torch stays
pending, and ignoring SIGINT in :func:`_init_worker` discards it: no ``KeyboardInterrupt``
traceback from any of them. SIGTERM, with which a broken pool stops its workers, interrupts
a worker's run as Ctrl-C would; an idle worker just exits (:func:`_sigterm_handler`).
"""

from __future__ import annotations

import _thread
import contextlib
import os
import pickle
import signal
import threading
import warnings
from collections.abc import Callable, Sized
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection, wait
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from epochtrain.errors import terminated_handler
from epochtrain.experiment.runs import (
    close_envs,
    failed_result,
    finished_result,
    hold_run,
    in_use_error,
    open_trainer,
    run_in_use,
    spec_of,
    timed_epoch,
)

__all__ = ["IN_USE"]

IN_USE = "in use"
"""What a worker returns for a run another live sweep holds: skipped, its files untouched."""


class _Events(Protocol):
    def put(self, item: tuple[str, str, Any], /) -> None: ...


class _StopFlag(Protocol):
    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


@dataclass
class _ToDriver:
    """A worker's events, sent up its pipe; dropped once the driver is gone (the stop pipe
    has closed with it, so the run is being interrupted)."""

    conn: Connection

    def put(self, item: tuple[str, str, Any], /) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(item)


@dataclass
class _StopPipe:
    """A worker's end of the pool's stop pipe: set once the driver has closed its end, to
    stop the pool, or has died."""

    reader: Connection

    def is_set(self) -> bool:
        return self.reader.poll()

    def wait(self, timeout: float | None = None) -> bool:
        return bool(wait([self.reader], timeout))


@dataclass
class _Worker:
    """A pool process's state: where its events go, and whether it may run (or is)."""

    events: _Events
    stop: _StopFlag
    parent_pid: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    running: bool = False
    run_name: str = ""
    """The run directory this worker runs (or last ran): where its warnings come from."""
    interrupted: bool = False
    """A run of this worker was interrupted: by the stop, or by the SIGTERM with which a
    broken pool stops its workers (:func:`_sigterm_handler`). A run is interrupted once,
    and no further run may start here."""

    def parent_gone(self) -> bool:
        return os.getppid() != self.parent_pid

    def watch(self) -> None:
        """Interrupt the run in progress once the pool is stopped or the driver has died
        (either closes the stop pipe). An idle worker ends as the driver's end of its own
        pipe closes."""
        self.stop.wait()
        with self.lock:
            if self.running:
                _thread.interrupt_main(signal.SIGTERM)


_worker: _Worker | None = None  # in a pool process: its state


def _sigterm_handler() -> Callable[[int, FrameType | None], None]:
    """A worker's SIGTERM handler (the stop pipe's watcher, and a broken pool, stop a
    worker with it): the run in progress is interrupted as by Ctrl-C
    (:func:`terminated_handler`), once; an idle worker ends as SIGTERM's default would,
    quietly, instead of a traceback of ``Terminated`` raised where it waits for work.

    A later one (the stop pipe closing after a broken pool's SIGTERM, at a Ctrl-C while
    the pool waits for its workers) does nothing: the run is already ending, and must not
    be cut in its clean-up (a checkpoint save removing its temp dir)."""
    as_ctrl_c = terminated_handler()

    def handler(signum: int, frame: FrameType | None) -> None:
        worker = _worker
        if worker is not None and not worker.running:
            if worker.stop.is_set():  # the watcher's stop, landing as the run ended: the
                return  # worker exits anyway, with its status
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if worker is not None and worker.interrupted:
            return
        if worker is not None:
            worker.interrupted = True
        as_ctrl_c(signum, frame)

    return handler


def _init_worker(events: _Events, stop: _StopFlag, parent_pid: int) -> None:
    import torch

    global _worker
    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # discards a Ctrl-C pending since birth
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGTERM, _sigterm_handler())  # the stop: as Ctrl-C
    _worker = _Worker(events, stop, parent_pid)
    warnings.showwarning = _forward_warning
    _report_semaphores(events)
    threading.Thread(target=_worker.watch, name="epochtrain-stop-watch", daemon=True).start()


def _report_semaphores(events: _Events) -> None:
    """Tell the driver the name of each named semaphore this process registers with, or
    unregisters from, multiprocessing's resource tracker (an ``"async"`` vector env's queue
    and shared-memory locks), so that it can remove those of a worker killed with them
    (:mod:`epochtrain.experiment.processes`). The driver hears of one before the tracker
    forgets it and after the tracker knows it: a message lost as the worker dies leaves a
    name only the tracker removes, with its "leaked semaphore" warning, and never one the
    driver would unregister twice. A process forked from this one reports nothing."""
    register, unregister, pid = resource_tracker.register, resource_tracker.unregister, os.getpid()

    def registered(name: Sized, rtype: str) -> None:
        register(name, rtype)
        if rtype == "semaphore" and os.getpid() == pid:
            events.put(("", "semaphore", ("register", name)))

    def unregistered(name: Sized, rtype: str) -> None:
        if rtype == "semaphore" and os.getpid() == pid:
            events.put(("", "semaphore", ("unregister", name)))
        unregister(name, rtype)

    resource_tracker.register = registered
    resource_tracker.unregister = unregistered


def _forward_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """A warning of this worker's run, sent to the driver, which warns it again in its own
    process (the command line prints it as ``epochtrain: warning: <run>: ...``) instead of
    Python's ``file:line: Category`` lines on the worker's stderr."""
    worker = _worker
    assert worker is not None, "set as showwarning by _init_worker, after _worker"
    try:
        pickle.dumps(category)
    except Exception:  # a class the driver cannot import: the text is what matters
        category = UserWarning
    worker.events.put((worker.run_name, "warning", (category, str(message))))


def _serve(conn: Connection, stop_reader: Connection, parent_pid: int) -> None:
    """A worker process: run what the driver hands over, one run at a time, and say how
    each ended (:func:`_run_in_worker`), until the driver closes the pipe (no more runs),
    stops the pool or dies, or a run of this worker is interrupted."""
    _init_worker(_ToDriver(conn), _StopPipe(stop_reader), parent_pid)
    worker = _worker
    assert worker is not None, "_init_worker sets it"
    with contextlib.suppress(KeyboardInterrupt):  # a stop that came as its run ended
        while not (worker.interrupted or worker.stop.is_set()):  # a stopped pool waits for it
            try:
                run_dir_name = conn.recv()
            except Exception:  # EOFError: no more runs, or the driver has died
                break
            try:
                status: str | BaseException = _run_in_worker(run_dir_name)
            except Exception as exc:  # recording the run's end failed: the driver records it
                status = _sendable(exc)
            worker.events.put((run_dir_name, "end", status))
    if worker.parent_gone():  # its run is closed; an interpreter's exit would take seconds
        os._exit(1)


def _sendable(exc: Exception) -> BaseException:
    """``exc``, or a ``RuntimeError`` naming it if it cannot be pickled."""
    try:
        pickle.dumps(exc)
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def _failed(run_dir: Path, exc: BaseException) -> str:
    """Record ``run_dir`` as failed with ``exc`` under its lock (its trainer's, or taken for
    the write): ``"failed"``, or :data:`IN_USE` if another sweep has taken the run since
    (nothing written)."""
    with hold_run(run_dir) as ours:
        if ours:
            failed_result(run_dir, spec_of(run_dir), exc)
    return "failed" if ours else IN_USE


def _run_in_worker(run_dir_name: str) -> str:
    """Run one run to its end in a pool process: ``"finished"``, ``"failed"``,
    ``"interrupted"`` (told to stop: no result written, the run resumes next time) or
    :data:`IN_USE` (another sweep runs it: nothing written)."""
    worker = _worker
    assert worker is not None, "_init_worker runs first in every pool process"
    with worker.lock:
        if worker.interrupted or worker.stop.is_set() or worker.parent_gone():
            return "interrupted"
        worker.running = True
        worker.run_name = run_dir_name
    worker.events.put((run_dir_name, "begin", 0))  # a failure counts from here
    run_dir = Path(run_dir_name)
    trainer = None
    try:
        if run_in_use(run_dir) is not None:
            return IN_USE
        trainer = open_trainer(run_dir)
        wall_time = trainer.state.total_time  # of the sessions before, from the checkpoint
        worker.events.put((run_dir_name, "start", trainer.state.epoch))
        while True:
            more, seconds = timed_epoch(trainer)
            wall_time += seconds
            if not more:
                break
            worker.events.put((run_dir_name, "epoch", trainer.state.epoch))
        finished_result(run_dir, trainer, wall_time)
        return "finished"
    except KeyboardInterrupt:  # told to stop, or stopped by a pool another worker broke
        worker.interrupted = True
        return "interrupted"
    except Exception as exc:
        if in_use_error(run_dir, exc) is not None:
            return IN_USE
        return _failed(run_dir, exc)
    finally:
        with worker.lock:
            worker.running = False
        if trainer is not None:
            close_envs(trainer)
