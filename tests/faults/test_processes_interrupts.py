"""The processes backend (epochtrain.experiment.processes) interrupted at its awkward
moments: a Ctrl-C while the pool spawns its workers or while they still import, the stop's
end, a worker killed while its sibling is idle. Each ends quietly, and no Ctrl-C is lost.

The Ctrl-C tests give SIGINT its default disposition first (a terminal's): CI starts as a
background job of a non-interactive shell, which inherits SIGINT ignored."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochtrain.experiment import grid, run_experiment
from epochtrain.experiment import processes as backend
from epochtrain.experiment.prepare import prepare_runs
from epochtrain.experiment.progress import Progress
from tests.experiment.settings import FAST, results
from tests.experiment.test_processes import ROOT, SETTINGS, SWEEP, children, cmdline

SIGINT_BIT = 1 << (signal.SIGINT - 1)  # in /proc/PID/status's signal masks
SWEEP_OF_3 = [*SWEEP[: SWEEP.index("0-3")], "0-2", *SWEEP[SWEEP.index("0-3") + 1 :]]


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this process for the test, as in a terminal."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def as_from_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sweep(command: list[str], out: Path) -> subprocess.Popen[bytes]:
    """The sweep in a session of its own (its Ctrl-C reaches its processes only)."""
    return subprocess.Popen(
        [*command, "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=as_from_a_terminal,
    )  # fmt: skip


def communicate(proc: subprocess.Popen[bytes], timeout: float) -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return out.decode(), err.decode()


def signal_masks(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    return {
        key: int(value, 16)
        for key, value in (line.split(":\t") for line in status.splitlines())
        if key in ("SigBlk", "SigIgn")
    }


@pytest.mark.slow
def test_ctrl_c_while_the_workers_start_is_the_one_line_without_their_tracebacks(
    tmp_path: Path,
) -> None:
    # before: each worker, still importing torch, printed a KeyboardInterrupt traceback
    # (about 60 lines), and the broken pool's thread an InvalidStateError
    proc = sweep(SWEEP, tmp_path / "exp")
    deadline = time.monotonic() + 120
    while not {p for p in children(proc.pid) if b"spawn_main" in cmdline(p)}:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.3)  # into their imports
    os.killpg(proc.pid, signal.SIGINT)
    start = time.monotonic()
    _, err = communicate(proc, backend.STOP_GRACE + 60)
    assert proc.returncode == 130, err
    # once imported, each worker ends at once: none waits for a run, and none is killed
    assert time.monotonic() - start < backend.STOP_GRACE
    assert "Traceback" not in err, err
    assert [line for line in err.splitlines() if line.strip()] == [
        line for line in err.splitlines() if line.startswith("epochtrain: interrupted; ")
    ], err
    assert not list((tmp_path / "exp").glob("*/result.json"))


def spawn_recorder(masks: list[dict[str, int]]) -> Any:
    """A worker spawner that records in ``masks`` the signal masks of each worker as it
    spawns it, and presses Ctrl-C right after the first one (while it spawns the next)."""
    spawn = backend._spawn_worker

    def spawn_and_record(stop_reader: Any) -> Any:
        seat = spawn(stop_reader)
        masks.append({"pid": seat.process.pid, **signal_masks(seat.process.pid)})
        if len(masks) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return seat

    return spawn_and_record


def test_a_ctrl_c_while_the_pool_spawns_its_workers_stops_the_sweep_and_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, default_sigint: None
) -> None:
    # before (1fb975c): SIGINT was ignored while the pool spawned its workers; this Ctrl-C
    # was dropped, and the runs went on to the end
    masks: list[dict[str, int]] = []
    monkeypatch.setattr(backend, "_spawn_worker", spawn_recorder(masks))
    run_dirs = prepare_runs(grid(["ppo"], ["CartPole-v1"], [0, 1], **FAST), tmp_path)
    with pytest.raises(KeyboardInterrupt), Progress(run_dirs, run_dirs, enabled=False) as p:
        backend.run_processes(run_dirs, 2, p)
    assert len(masks) == 2, masks
    for worker in masks:  # born with SIGINT blocked: pending until it ignores it, not lost
        assert worker["SigBlk"] & SIGINT_BIT and not worker["SigIgn"] & SIGINT_BIT, worker
    assert signal_masks(os.getpid())["SigBlk"] & SIGINT_BIT == 0  # unblocked here again
    assert not list(tmp_path.glob("*/result.json"))  # stopped: every run resumes
    assert multiprocessing.active_children() == []


def test_an_interrupted_pool_leaves_no_thread_or_worker_to_the_interpreters_exit(
    tmp_path: Path, default_sigint: None
) -> None:
    # before: the pool's thread and its workers were still ending when the interrupt was
    # raised, and the interpreter's exit joined them: a second Ctrl-C right after the
    # 'interrupted' line printed a traceback of threading's shutdown
    before = {t for t in threading.enumerate() if not t.daemon}
    run_dirs = prepare_runs(grid(["ppo"], ["CartPole-v1"], [0, 1], **SETTINGS), tmp_path)

    def ctrl_c_after_a_checkpoint() -> None:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("*/checkpoints/epoch_*/manifest.json")):
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c_after_a_checkpoint, daemon=True).start()
    with pytest.raises(KeyboardInterrupt), Progress(run_dirs, run_dirs, enabled=False) as p:
        backend.run_processes(run_dirs, 2, p)
    assert {t for t in threading.enumerate() if not t.daemon} <= before
    assert multiprocessing.active_children() == []
    assert len(results(tmp_path)) < len(run_dirs)  # interrupted, not finished


@pytest.fixture(scope="module")
def reference_of_3(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("uninterrupted")
    run_experiment(grid(["ppo"], ["CartPole-v1"], [0, 1, 2], **SETTINGS), out, show_progress=False)
    return results(out)


def busy_worker_while_the_other_is_idle(out: Path, proc: subprocess.Popen[bytes]) -> int:
    """The pid of the worker running the last run once the other two have ended (from the
    run's checkpoint lock)."""
    deadline = time.monotonic() + 300
    while True:
        assert proc.poll() is None and time.monotonic() < deadline
        runs = [spec.parent for spec in out.glob("*/spec.toml")]
        left = [run for run in runs if not (run / "result.json").exists()]
        if len(runs) == 3 and len(left) == 1:
            with contextlib.suppress(OSError, ValueError, KeyError):  # not written yet
                lock = left[0] / "checkpoints" / ".lock"
                return int(json.loads(lock.read_text())["pid"])
        time.sleep(0.01)


@pytest.mark.slow
def test_a_worker_killed_while_its_sibling_is_idle_ends_quietly_and_the_runs_finish(
    tmp_path: Path, reference_of_3: dict[str, dict[str, Any]]
) -> None:
    # before: the broken pool's SIGTERM raised Terminated in the idle sibling where it
    # waited for work, and it printed a 25-line traceback
    out = tmp_path / "exp"
    proc = sweep(SWEEP_OF_3, out)
    busy = busy_worker_while_the_other_is_idle(out, proc)
    workers = {p for p in children(proc.pid) if b"spawn_main" in cmdline(p)}
    assert busy in workers and len(workers) == 2, (busy, workers)
    os.kill(busy, signal.SIGKILL)  # as the OOM killer would
    _, err = communicate(proc, 600)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Terminated" not in err, err
    assert results(out) == reference_of_3  # the third run went on from its checkpoint


# an interrupted command's end: the line, then an exit that takes a while (as torch's
# finalizers and the joins of its threads do)
INTERRUPTED_COMMAND = """
import atexit, signal, sys, time
from epochtrain.cli_interrupts import ignore_further_interrupts
atexit.register(time.sleep, 1.0)
ignore_further_interrupts()
print("epochtrain: interrupted", file=sys.stderr, flush=True)
sys.exit(130)
"""


def test_ctrl_c_after_the_interrupted_line_changes_neither_the_output_nor_the_status() -> None:
    # without ignore_further_interrupts: a traceback of the atexit callback it lands in,
    # and the process ends by SIGINT (-2), not with 130
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_COMMAND], cwd=ROOT, stderr=subprocess.PIPE,
        start_new_session=True, preexec_fn=as_from_a_terminal,
    )  # fmt: skip
    assert proc.stderr is not None
    line = proc.stderr.readline()
    while proc.poll() is None:  # Ctrl-C, again and again, until it has exited
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.01)
    assert (line + proc.stderr.read()).decode() == "epochtrain: interrupted\n"
    assert proc.returncode == 130


STOP_IN_A_SAVE = """
import _thread, os, signal, sys
from pathlib import Path
from epochtrain import make_trainer
from epochtrain.experiment import process_worker

class Never:  # the stop pipe, not closed: only the tripped interrupt stops the run
    def is_set(self): return False
    def wait(self, timeout=None): return False

class Drop:
    def put(self, item): pass

root = Path(sys.argv[1])
trainer = make_trainer("ppo", "CartPole-v1", seed=0, checkpoint_dir=str(root), verbose=False,
                       **{**eval(sys.argv[2]), "max_epoch": 3})
process_worker._worker = worker = process_worker._Worker(Drop(), Never(), os.getppid())
worker.running = True
signal.signal(signal.SIGTERM, process_worker._sigterm_handler())
mkdir = os.mkdir

def mkdir_then_stop(path, *args, **kwargs):
    mkdir(path, *args, **kwargs)
    if os.path.basename(path).startswith(".tmp-epoch_"):
        # as the watcher thread does, having taken the GIL while the main thread was in
        # the mkdir system call
        _thread.interrupt_main(signal.SIGTERM)

os.mkdir = mkdir_then_stop
try:
    for _ in trainer:
        pass
except KeyboardInterrupt as exc:
    print(type(exc).__name__, trainer.state.epoch)
"""


def test_a_stop_that_lands_in_a_checkpoint_save_leaves_no_temp_dir(
    tmp_path: Path,
) -> None:
    # before: the interrupt, raised right after the mkdir of the save's temp dir and before
    # its clean-up was armed, left an empty .tmp-epoch_* in the run's checkpoints (CI: after
    # SIGTERM to the driver, test_an_interrupted_sweep_stops_its_workers_...[sigterm])
    done = subprocess.run(
        [sys.executable, "-c", STOP_IN_A_SAVE, str(tmp_path / "ckpt"), repr(FAST)],
        cwd=ROOT, capture_output=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    # interrupted in epoch 1's save: the epoch is complete in memory, its save undone whole
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir() if p.name != ".lock")
    assert (done.stdout.decode().split(), names) == (["Terminated", "1"], [])
