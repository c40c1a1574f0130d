"""Two live processes never both hold a ``checkpoint_dir``'s lock: not when both find the
same stale lock and take it over, nor when one finds the lock of a creator still writing it.

Processes are played by :class:`CheckpointLock` objects of this process whose records name
other live processes (a sleeping child), interleaved deterministically by monkeypatching,
and by a stress test of real processes racing for a dead writer's lock."""

from __future__ import annotations

import errno
import fcntl
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from epochtrain.checkpoint_files import LOCK_FILE, CheckpointLock
from epochtrain.errors import CheckpointError

ROUNDS, WORKERS = 100, 6


def write_stale(root: Path, pid: int) -> None:
    record = {"pid": pid, "host": socket.gethostname(), "token": "dead", "created": "then"}
    (root / LOCK_FILE).write_text(json.dumps(record))


def as_process(lock: CheckpointLock, pid: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``lock`` write records of process ``pid`` (another live process of this host)."""
    real = lock._record
    monkeypatch.setattr(lock, "_record", lambda: {**real(), "pid": pid})


def holder(root: Path) -> Any:
    return json.loads((root / LOCK_FILE).read_text())["token"]


def test_two_takers_of_the_same_stale_lock_never_both_hold_it(
    tmp_path: Path, dead_pid: int, live_pid: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reproduced: B read the stale record, A took the lock over, then B moved A's fresh
    lock aside as the stale one and created its own: both held the lock."""
    write_stale(tmp_path, dead_pid)
    a, b = CheckpointLock(tmp_path), CheckpointLock(tmp_path)
    as_process(a, live_pid, monkeypatch)
    real_read = b._read

    def read_then_a_takes_over() -> dict[str, Any] | None:
        record = real_read()  # the stale record...
        if not a.held:
            a.acquire()  # ...which A replaces before B acts on it
        return record

    monkeypatch.setattr(b, "_read", read_then_a_takes_over)
    with pytest.raises(CheckpointError, match=f"process {live_pid} "):
        b.acquire()
    assert a.held and not b.held
    assert holder(tmp_path) == a.token


def test_a_taker_that_opened_the_stale_lock_before_it_was_replaced_leaves_the_new_one(
    tmp_path: Path, dead_pid: int, live_pid: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B opened the stale lock file, A took it over before B had it locked: what B holds
    is the old file, no longer at the path, so B must not delete the path."""
    write_stale(tmp_path, dead_pid)
    a, b = CheckpointLock(tmp_path), CheckpointLock(tmp_path)
    as_process(a, live_pid, monkeypatch)
    real_flock, real_replace = fcntl.flock, os.replace
    started: list[CheckpointLock] = []

    def a_goes_first() -> None:
        if not started:
            started.append(a)
            a.acquire()

    def a_takes_over_first(fd: int, operation: int) -> None:
        a_goes_first()  # B has the old file open, not yet locked
        real_flock(fd, operation)

    def replace(src: Any, dst: Any) -> None:  # the old code's takeover: a moves first
        if os.fspath(src) == os.fspath(tmp_path / LOCK_FILE):
            a_goes_first()
        real_replace(src, dst)

    monkeypatch.setattr(fcntl, "flock", a_takes_over_first)
    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(CheckpointError, match=f"process {live_pid} "):
        b.acquire()
    assert a.held and not b.held
    assert holder(tmp_path) == a.token


def test_the_lock_file_is_never_seen_empty_while_its_creator_writes_it(
    tmp_path: Path, live_pid: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reproduced: the lock was created empty, then written; a process that read it in
    between took it for torn, hence stale, and took it over from its live creator."""
    a, b = CheckpointLock(tmp_path), CheckpointLock(tmp_path)
    as_process(b, live_pid, monkeypatch)
    real_record, seen = a._record, []

    def record_while_b_looks() -> dict[str, Any]:
        path = tmp_path / LOCK_FILE
        seen.append(path.read_bytes() if path.exists() else None)  # another process's view
        if not b.held:
            b.acquire()
        return real_record()

    monkeypatch.setattr(a, "_record", record_while_b_looks)
    with pytest.raises(CheckpointError, match=f"process {live_pid} "):
        a.acquire()
    assert b"" not in seen
    assert b.held and not a.held
    assert holder(tmp_path) == b.token


def test_a_lock_is_created_whole_where_hard_links_are_not_supported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_link(src: Any, dst: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    lock = CheckpointLock(tmp_path)
    lock.acquire()
    assert holder(tmp_path) == lock.token
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_FILE]  # no temp file left
    lock.release()
    assert list(tmp_path.iterdir()) == []


def test_a_killed_creators_temporary_lock_file_is_swept_and_a_live_ones_kept(
    tmp_path: Path, dead_pid: int, live_pid: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    names: list[str] = []
    real_link = os.link

    def link(src: Any, dst: Any) -> None:
        names.append(Path(src).name)
        real_link(src, dst)

    monkeypatch.setattr(os, "link", link)
    probe = CheckpointLock(tmp_path)
    probe.acquire()
    probe.release()
    assert len(names) == 1 and names[0].endswith(f"-{os.getpid()}")
    mine = names[0][: -len(str(os.getpid()))]
    for pid in (dead_pid, live_pid):  # temp files that creators killed before linking left
        (tmp_path / f"{mine}{pid}").write_text("{}")
    lock = CheckpointLock(tmp_path)
    lock.acquire()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([LOCK_FILE, f"{mine}{live_pid}"])
    lock.release()


KILLED_IN_TAKEOVER = """
import os, pathlib, signal, sys
from epochtrain.checkpoint_files import CheckpointLock

real = os.unlink
def unlink(path, *args, **kwargs):
    if os.path.basename(os.fspath(path)) == ".lock":  # checked stale, about to delete it
        os.kill(os.getpid(), signal.SIGKILL)
    return real(path, *args, **kwargs)
os.unlink = unlink
CheckpointLock(pathlib.Path(sys.argv[1])).acquire()
"""


def test_a_taker_killed_in_the_takeover_leaves_only_the_stale_lock_for_the_next(
    tmp_path: Path, dead_pid: int
) -> None:
    write_stale(tmp_path, dead_pid)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *sys.path])}
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_IN_TAKEOVER, str(tmp_path)],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert [p.name for p in tmp_path.iterdir()] == [LOCK_FILE]  # the dead writer's, as it was
    lock = CheckpointLock(tmp_path)
    lock.acquire()  # the killed taker's flock went with it
    assert [p.name for p in tmp_path.iterdir()] == [LOCK_FILE]
    assert holder(tmp_path) == lock.token
    lock.release()


def _race(root: str, start: Any, done: Any, results: Any) -> None:
    """One of the processes of the stress test: each round, try the lock when all do."""
    for _ in range(ROUNDS):
        lock = CheckpointLock(Path(root))
        start.wait()
        try:
            lock.acquire()
            results.put(os.getpid())
        except CheckpointError:
            results.put(0)
        except Exception as exc:  # reported, not hidden behind a timeout
            results.put(repr(exc))
        done.wait()  # every process has tried before the winner lets go
        lock.release()
        done.wait()


def test_processes_racing_for_a_dead_writers_lock_take_it_once(
    tmp_path: Path, dead_pid: int
) -> None:
    # fresh interpreters, not forks of pytest; forked from one that imported epochtrain once
    # (six spawns importing torch each take 20 s on a loaded machine, the rounds 0.2 s)
    ctx: Any = multiprocessing.get_context("spawn")
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([__name__])
    start, done = ctx.Barrier(WORKERS + 1, timeout=60), ctx.Barrier(WORKERS + 1, timeout=60)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_race, args=(str(tmp_path), start, done, results))
        for _ in range(WORKERS)
    ]
    for proc in procs:
        proc.start()
    winners = []
    try:
        for _ in range(ROUNDS):
            write_stale(tmp_path, dead_pid)
            start.wait()
            outcomes = [results.get(timeout=60) for _ in range(WORKERS)]
            assert all(isinstance(pid, int) for pid in outcomes), outcomes
            winners.append(sum(1 for pid in outcomes if pid))
            done.wait()
            done.wait()  # released: the next round starts from the stale lock again
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    assert winners == [1] * ROUNDS
    assert [p.exitcode for p in procs] == [0] * WORKERS


def test_the_module_imports_without_fcntl_and_takes_over_a_dead_writers_lock(
    tmp_path: Path, dead_pid: int
) -> None:
    """Where ``fcntl`` is absent (not POSIX), a stale lock is taken over without ``flock``."""
    code = (
        "import json, sys, pathlib\n"
        "sys.modules['fcntl'] = None\n"
        "from epochtrain.checkpoint_files import CheckpointLock\n"
        "lock = CheckpointLock(pathlib.Path(sys.argv[1]))\n"
        "lock.acquire()\n"
        "print(json.loads((lock.path).read_text())['token'] == lock.token)\n"
    )
    write_stale(tmp_path, dead_pid)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "True"
