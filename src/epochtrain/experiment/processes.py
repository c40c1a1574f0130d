"""The ``"processes"`` backend: runs in a pool of spawned workers, stopped together.

Each worker runs one run at a time to its end and sends its progress to the parent. When
the parent is interrupted (Ctrl-C, SIGTERM through the CLI, any exception) it sets a stop
event: every worker interrupts its run as Ctrl-C would (the trainer goes back to its last
complete epoch, whose checkpoint is on disk, and its envs close), no queued run starts,
and the interrupt is raised again once the workers are idle. A worker still busy
:data:`STOP_GRACE` seconds later, or at a second Ctrl-C, is killed. A worker whose parent
died (``kill -9``) interrupts its run the same way within a second and exits. Interrupted
runs get no ``result.json``, so re-running the experiment resumes them. A worker that
dies on its own (the OOM killer) takes its pool down: the runs not ended start again in a
new pool from their latest checkpoints, ``max_failures`` times (:func:`run_processes`).

Workers ignore SIGINT: a terminal's Ctrl-C reaches the whole process group, and each run
must be interrupted once, by its worker's watcher, not twice. They are born with SIGINT
blocked (the signal mask is inherited across fork and exec), so a Ctrl-C while one still
imports torch stays pending, and ignoring SIGINT in :func:`_init_worker` discards it: no
``KeyboardInterrupt`` traceback from any of them. The parent holds SIGINT meanwhile and
raises it once the workers are spawned: it is late, never lost (an ignored disposition
instead of the mask would drop a Ctrl-C pressed during the spawning). SIGTERM, with which
a broken pool stops its workers, interrupts a worker's run as Ctrl-C would; an idle
worker just exits (:func:`_sigterm_handler`).
"""

from __future__ import annotations

import _thread
import contextlib
import multiprocessing
import os
import queue
import signal
import threading
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from epochtrain.checkpoint_files import deferred_signals
from epochtrain.errors import terminated_handler
from epochtrain.experiment.progress import Progress
from epochtrain.experiment.runs import (
    close_envs,
    failed_result,
    finished_result,
    hold_run,
    in_use_error,
    is_finished,
    note_in_use,
    open_trainer,
    run_in_use,
    spec_of,
    timed_epoch,
)

__all__ = ["IN_USE", "STOP_GRACE", "run_processes"]

STOP_GRACE = 30.0
"""Seconds the workers get to end their interrupted runs before they are killed."""

IN_USE = "in use"
"""What a worker returns for a run another live sweep holds: skipped, its files untouched."""


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
    ``max_failures`` failures is recorded as failed with the pool's error.
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
    """Run ``run_dirs`` in one pool; returns those to run again because a worker died."""
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    stop = ctx.Event()
    pids: set[int] = set()
    begun: set[Path] = set()
    stopped: set[Path] = set()  # runs a live worker stopped when the pool broke
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(events, stop, os.getpid()),
    )
    futures: dict[Future[str], Path] = {}
    broken: dict[Path, BrokenProcessPool] = {}
    try:
        with _workers_born_with_sigint_blocked():  # submit spawns them
            for run_dir in run_dirs:
                futures[pool.submit(_run_in_worker, os.fspath(run_dir))] = run_dir
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            _drain(events, progress, pids, begun, stopped)
            for future in done:
                run_dir = futures[future]
                try:
                    status = future.result()
                except BrokenProcessPool as died:  # decided once the pool is down
                    broken[run_dir] = died
                    continue
                except Exception as exc:  # the result could not come back
                    status = _failed(run_dir, exc)
                if status == IN_USE:
                    note_in_use(run_dir, run_in_use(run_dir) or "it has ended since")
                    continue
                progress.end(run_dir, failed=status != "finished")
    except BaseException:
        _stop(pool, stop, futures, events, pids)
        raise
    pool.shutdown(wait=True)
    _drain(events, progress, pids, begun, stopped)
    events.close()
    # the dead worker's run is the one that began and neither ended nor was stopped
    blamed = (begun & set(broken)) - stopped or begun or set(broken)
    again = []
    for run_dir, pool_error in broken.items():
        if is_finished(run_dir):  # it ended just before the pool broke
            progress.end(run_dir, failed=False)
            continue
        failures[run_dir] = failures.get(run_dir, 0) + (run_dir in blamed)
        if failures[run_dir] > max_failures:
            error = BrokenProcessPool(
                f"a worker process died while this run was in its pool {failures[run_dir]} "
                f"times (max_failures={max_failures}); the last time: {pool_error}"
            )
            if _failed(run_dir, error) == IN_USE:
                note_in_use(run_dir, run_in_use(run_dir) or "it has ended since")
            else:
                progress.end(run_dir, failed=True)
        else:
            if run_dir in begun:
                progress.restart(run_dir, "a worker process of the sweep died")
            again.append(run_dir)
    return again


def _stop(
    pool: ProcessPoolExecutor,
    stop: Any,
    futures: Collection[Future[str]],
    events: Any,
    pids: set[int],
) -> None:
    """Interrupt every worker's run and wait for them (module docstring), then for the
    workers' exit: nothing is left for the interpreter's exit to wait on, where a second
    Ctrl-C would print a traceback of ``threading``."""
    stop.set()  # a queued run is returned at once, not started
    # none is cancelled: a pool broken by the kill below would fail every pending future,
    # and a cancelled one raises InvalidStateError there, which leaves workers running
    all_idle = False
    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: kill them now
        all_idle = not wait(futures, timeout=STOP_GRACE).not_done
    kill = not all_idle
    while True:
        _drain(events, None, pids)
        if kill:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        try:  # one call: a first shutdown(wait=False) would forget the thread to join
            pool.shutdown(wait=True)
            break
        except KeyboardInterrupt:  # another Ctrl-C while they exit: kill them
            kill = True
    events.close()


def _drain(
    events: Any,
    progress: Progress | None,
    pids: set[int],
    begun: set[Path] | None = None,
    stopped: set[Path] | None = None,
) -> None:
    while True:
        try:
            name, kind, value = events.get_nowait()
        except queue.Empty:
            return
        if kind == "pid":
            pids.add(value)
        elif kind == "begin":
            if begun is not None:
                begun.add(Path(name))
        elif kind == "stopped":
            if stopped is not None:
                stopped.add(Path(name))
        elif progress is None:
            continue
        elif kind == "start":
            progress.start(Path(name), value)
        else:
            progress.epoch(Path(name), value)


@dataclass
class _Worker:
    """A pool process's state: where its events go, and whether it may run (or is)."""

    events: Any
    stop: Any
    parent_pid: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    running: bool = False
    stopped: bool = False
    """A run of this worker was interrupted: by the stop event, or by the SIGTERM with which
    a broken pool stops its workers; either way, no further run may start here."""

    def parent_gone(self) -> bool:
        return os.getppid() != self.parent_pid

    def watch(self) -> None:
        """Interrupt the run in progress once told to stop or orphaned; exit if orphaned."""
        while not self.stop.wait(1.0) and not self.parent_gone():
            pass
        with self.lock:
            if self.running:
                _thread.interrupt_main(signal.SIGTERM)
            elif self.parent_gone():
                os._exit(1)  # idle and orphaned: nothing to clean up, nobody to report to


_worker: _Worker | None = None  # in a pool process: its state


@contextlib.contextmanager
def _workers_born_with_sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread for the block, so the workers it spawns are born with
    it blocked (:func:`_init_worker` then ignores it and unblocks it); a Ctrl-C meanwhile
    is held and raised after the block (:func:`deferred_signals`), not lost. Main thread
    only: elsewhere the block runs unchanged (signal handlers are the main thread's)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with deferred_signals():
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:  # a SIGINT pending meanwhile arrives here, and is held
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _sigterm_handler() -> Callable[[int, FrameType | None], None]:
    """A worker's SIGTERM handler (a broken pool stops its workers with SIGTERM): the run
    in progress is interrupted as by Ctrl-C (:func:`terminated_handler`); an idle worker
    ends as SIGTERM's default would, quietly, instead of a traceback of ``Terminated``
    raised where it waits for work (no exception: one raised as it takes a run would be
    sent to the parent as that run's result)."""
    as_ctrl_c = terminated_handler()

    def handler(signum: int, frame: FrameType | None) -> None:
        worker = _worker
        if worker is not None and not worker.running:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        as_ctrl_c(signum, frame)

    return handler


def _init_worker(events: Any, stop: Any, parent_pid: int) -> None:
    import torch

    global _worker
    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # discards a Ctrl-C pending since birth
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGTERM, _sigterm_handler())  # the stop: as Ctrl-C
    _worker = _Worker(events, stop, parent_pid)
    threading.Thread(target=_worker.watch, name="epochtrain-stop-watch", daemon=True).start()
    events.put(("", "pid", os.getpid()))


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
        if worker.stopped or worker.stop.is_set() or worker.parent_gone():
            return "interrupted"
        worker.running = True
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
        worker.stopped = True
        worker.events.put((run_dir_name, "stopped", 0))
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
        if worker.parent_gone():
            os._exit(1)
