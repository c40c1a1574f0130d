"""A processes-backend sweep (epochtrain.experiment.processes) killed with SIGKILL: its driver
alone (``kill -9 PID``), or its whole process group (a scheduler's kill, the OOM killer of a
container). Nothing can run in a SIGKILLed process, so whatever it created that outlives it
(a named semaphore is a file in /dev/shm until reboot) is cleaned by someone else or leaked.

Before: the pool's queues and the stop event were 13 named semaphores. After ``kill -9`` of
the driver, multiprocessing's resource tracker (a child of the driver, left running) removed
them once the last worker exited and printed, after the shell's prompt, ``UserWarning:
resource_tracker: There appear to be 13 leaked semaphore objects to clean up at shutdown``
(every kill, 7 of 7); killing the group killed the tracker too, and the 13 stayed."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from epochtrain.experiment import grid, process_worker
from epochtrain.experiment import processes as backend
from epochtrain.experiment.prepare import prepare_runs
from epochtrain.experiment.progress import Progress
from tests.experiment.settings import FAST, results
from tests.experiment.test_processes import ROOT, SWEEP, alive, children, cmdline

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/maps").exists(), reason="reads the processes' mappings in /proc (Linux)"
)


def sweep(out: Path) -> subprocess.Popen[bytes]:
    """The sweep in a session (and process group) of its own, its output in pipes."""
    return subprocess.Popen(
        [*SWEEP, "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip


def workers_running(out: Path, proc: subprocess.Popen[bytes]) -> set[int]:
    """The pids of the sweep's two workers, once a run has begun (holds its lock)."""
    deadline = time.monotonic() + 60
    while not list(out.glob("*/checkpoints/.lock")):
        assert proc.poll() is None, proc.communicate()[1].decode()
        assert time.monotonic() < deadline, "no run began within 60 s"
        time.sleep(0.02)
    workers = {p for p in children(proc.pid) if b"spawn_main" in cmdline(p)}
    assert len(workers) == 2, workers
    return workers


def named_semaphores(pids: set[int]) -> set[Path]:
    """The named POSIX semaphores (glibc: files /dev/shm/sem.*) that ``pids`` have open."""
    found = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:  # ended meanwhile
            continue
        found |= {Path(line.split()[-1]) for line in maps.splitlines() if "/dev/shm/sem." in line}
    return found


def stderr_to_the_end(proc: subprocess.Popen[bytes]) -> str:
    """Everything written to the sweep's stderr until its every process (they share it) has
    exited."""
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return err.decode()


def test_kill_9_of_the_driver_stops_its_workers_and_nothing_is_printed_after_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "exp"
    proc = sweep(out)
    workers = workers_running(out, proc)
    before = set(out.glob("*/checkpoints/epoch_*"))
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    killed = time.monotonic()
    err = stderr_to_the_end(proc)  # its end: the last of the workers and the tracker exited
    assert time.monotonic() - killed < 15.0, "the workers outlived their killed driver"
    assert not alive(workers)
    assert err == "", err  # was the resource tracker's 'leaked semaphore objects' warning
    assert not list(out.glob("*/checkpoints/.lock")), "a run's lock outlived the sweep"
    # each run stopped at once: at most the checkpoint it was saving (was up to a second
    # more of training, 4 epochs of these runs)
    after = [path.parent.parent.name for path in set(out.glob("*/checkpoints/epoch_*")) - before]
    assert all(after.count(run) <= 1 for run in after), sorted(after)


def test_kill_9_of_the_whole_sweep_leaves_no_named_semaphore(tmp_path: Path) -> None:
    out = tmp_path / "exp"
    proc = sweep(out)
    workers = workers_running(out, proc)
    semaphores = named_semaphores({proc.pid, *workers})
    os.killpg(proc.pid, signal.SIGKILL)  # driver, workers and the resource tracker
    stderr_to_the_end(proc)
    left = {path for path in semaphores if path.exists()}
    for path in left:  # not this test's to keep
        path.unlink(missing_ok=True)
    assert not left, f"{len(left)} named semaphores outlived the killed sweep"


def dead_at_birth(spawned: list[int]) -> object:
    """A worker spawner whose workers have died (exit status 1) before the pool hears from
    them, as when a worker cannot import; ``spawned`` counts them."""

    def spawn(stop_reader: Connection) -> backend._Seat:
        ctx = multiprocessing.get_context("spawn")
        here, there = ctx.Pipe()
        process = ctx.Process(target=os._exit, args=(1,))
        process.start()
        there.close()
        process.join()
        spawned.append(1)
        return backend._Seat(process, here)

    return spawn


def test_a_pool_whose_workers_die_at_birth_ends_after_max_failures_with_every_run_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a death seen only once the worker had exited (no pipe, no sentinel left to wait on)
    # was not seen at all, and its run was dropped: neither run again nor recorded
    spawned: list[int] = []
    monkeypatch.setattr(backend, "_spawn_worker", dead_at_birth(spawned))
    run_dirs = prepare_runs(grid(["ppo"], ["CartPole-v1"], [0, 1], **FAST), tmp_path)
    with Progress(run_dirs, run_dirs, enabled=False) as progress:
        backend.run_processes(run_dirs, 2, progress, max_failures=2)
    assert len(spawned) == 6  # 3 pools of 2: no run began, so each run counts every pool
    found = results(tmp_path)
    assert sorted(found) == [d.name for d in run_dirs]
    for result in found.values():
        assert result["status"] == "failed"
        assert "died while this run was in its pool 3 times (max_failures=2)" in result["error"]
        assert "exited with status 1" in result["error"]  # how the last one ended


def says_its_run_ended_then_dies(conn: Connection, stop_reader: Connection, pid: int) -> None:
    """A worker that ends its first run, then dies between runs: its pipe closes a moment
    before its exit can be seen (the kernel closes a dying process's files first)."""
    run_dir_name = conn.recv()
    conn.send((run_dir_name, "end", "finished"))
    conn.close()
    time.sleep(0.5)
    os._exit(1)


def test_a_worker_that_dies_between_runs_fails_the_pool_not_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # its closed pipe, seen before its exit, made the driver hand it the next run, and an
    # assertion ended the sweep with a traceback
    monkeypatch.setattr(process_worker, "_serve", says_its_run_ended_then_dies)
    run_dirs = prepare_runs(grid(["ppo"], ["CartPole-v1"], [0, 1], **FAST), tmp_path)
    with Progress(run_dirs, run_dirs, enabled=False) as progress:
        backend.run_processes(run_dirs, 1, progress, max_failures=0)
    found = results(tmp_path)  # the first run "ended" without a result: this worker's lie
    assert list(found) == [run_dirs[1].name], found
    assert found[run_dirs[1].name]["status"] == "failed"
    assert "worker process" in found[run_dirs[1].name]["error"]
    assert "exited with status 1" in found[run_dirs[1].name]["error"]
