"""Tests of epochtrain.experiment.processes: a sweep's workers stop with their driver, and
the same command then resumes the sweep to the results of an uninterrupted one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from epochtrain.experiment import grid, run_experiment
from epochtrain.experiment.processes import STOP_GRACE
from tests.experiment.settings import FAST, results

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {**FAST, "max_epoch": 8}
SEEDS = [0, 1, 2, 3]
SWEEP = [
    sys.executable, "-m", "epochtrain", "sweep", "--algo", "ppo", "--env", "CartPole-v1",
    "--seeds", "0-3", "--backend", "processes", "--workers", "2", "--no-progress",
    *[arg for name, value in SETTINGS.items() for arg in ("--set", f"{name}={value}")],
]  # fmt: skip

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="finds the workers through /proc (Linux)"
)


def children(pid: int) -> set[int]:
    """The live (not zombie) processes whose parent is ``pid``."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (an orphan's zombie counts as ended)."""
    found = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.add(pid)
    return found


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("uninterrupted")
    run_experiment(grid(["ppo"], ["CartPole-v1"], SEEDS, **SETTINGS), out, show_progress=False)
    return results(out)


def start_sweep(out: Path, *flags: str) -> tuple[subprocess.Popen[bytes], set[int]]:
    """The sweep in its own session, once a run has checkpointed, and its workers' pids."""
    proc = subprocess.Popen(
        [*SWEEP, "--out", str(out), *flags],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        # as from a terminal: a job a non-interactive shell started inherits SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(out.glob("*/checkpoints/epoch_*/manifest.json")):
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.02)
    workers = {p for p in children(proc.pid) if b"spawn_main" in cmdline(p)}
    assert len(workers) == 2  # not multiprocessing's resource tracker
    return proc, workers


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def assert_the_same_command_finishes_it(out: Path, reference: dict[str, Any]) -> None:
    rerun = subprocess.run(
        [*SWEEP, "--out", str(out)], cwd=ROOT, capture_output=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr.decode()
    assert results(out) == reference


def wait_gone(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive(pids)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "status", "word"), [("ctrl-c", 130, "interrupted"), ("sigterm", 143, "terminated")]
)
def test_an_interrupted_sweep_stops_its_workers_and_the_same_command_resumes_it(
    tmp_path: Path, reference: dict[str, dict[str, Any]], how: str, status: int, word: str
) -> None:
    out = tmp_path / "exp"
    proc, workers = start_sweep(out)
    try:
        start = time.monotonic()
        if how == "ctrl-c":  # a terminal sends it to the whole process group
            os.killpg(proc.pid, signal.SIGINT)
        else:  # kill PID, or a scheduler: the driver only
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=STOP_GRACE + 60)
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = err.decode()
    assert proc.returncode == status, text
    assert took < STOP_GRACE, f"the workers were killed, not stopped ({took:.1f} s)"
    assert "Traceback" not in text, text
    (line,) = [
        line
        for line in text.splitlines()
        if line.startswith("epochtrain") and not line.startswith("epochtrain: warning:")
    ]
    assert line.startswith(f"epochtrain: {word}; finished runs and checkpoints are kept")
    assert line.endswith(f"--out {out}")
    assert not wait_gone(workers, 5.0), "a worker outlived its sweep"
    assert len(results(out)) < len(SEEDS)  # interrupted, not finished
    for manifest_dir in out.glob("*/checkpoints/*"):
        assert manifest_dir.name.startswith("epoch_") and (manifest_dir / "manifest.json").exists()
    assert_the_same_command_finishes_it(out, reference)


@pytest.mark.slow
def test_the_workers_of_a_killed_sweep_stop_and_the_same_command_resumes_it(
    tmp_path: Path, reference: dict[str, dict[str, Any]]
) -> None:
    out = tmp_path / "exp"
    proc, workers = start_sweep(out)
    proc.send_signal(signal.SIGKILL)  # kill -9: the driver cannot tell its workers
    proc.communicate(timeout=60)
    assert not wait_gone(workers, 10.0), "a worker outlived its killed driver"
    assert_the_same_command_finishes_it(out, reference)


@pytest.mark.slow
def test_a_run_whose_worker_died_starts_again_from_its_checkpoint_and_the_sweep_finishes(
    tmp_path: Path, reference: dict[str, Any]
) -> None:
    out = tmp_path / "exp"
    proc, workers = start_sweep(out)
    os.kill(min(workers), signal.SIGKILL)  # as the OOM killer would
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()
    assert results(out) == reference  # the runs went on from their checkpoints


@pytest.mark.slow
def test_past_max_failures_the_runs_of_a_dead_worker_fail_and_the_others_finish(
    tmp_path: Path, reference: dict[str, Any]
) -> None:
    out = tmp_path / "exp"
    proc, workers = start_sweep(out, "--max-failures", "0")
    os.kill(min(workers), signal.SIGKILL)
    out_text, err_text = proc.communicate(timeout=600)
    assert proc.returncode == 1  # some runs failed
    found = results(out)
    failed = {k for k, v in found.items() if v["status"] == "failed"}
    # the killed worker's run; the run its pool stopped in the other worker is restarted
    assert len(failed) == 1, failed
    for run_id in failed:
        assert "worker process died" in found[run_id]["error"]
        assert "max_failures=0" in found[run_id]["error"]
    assert {k: v for k, v in found.items() if k not in failed} == {
        k: v for k, v in reference.items() if k not in failed
    }  # the others ran in a new pool, to the end
    assert f"{len(found) - len(failed)}/{len(found)} runs finished" in out_text.decode()
    last = err_text.decode().strip().splitlines()[-1]
    assert last.startswith("once fixed, run the same command again: finished runs are kept")
    assert_the_same_command_finishes_it(out, reference)  # a failed run resumes too
