"""``wall_time`` in ``result.json`` counts the seconds in the run's epochs on every backend:
not the trainer's construction (nor a worker's imports, which the first run of a process
pays in ``open_trainer``)."""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochtrain.experiment import grid, process_worker, run_experiment, runner
from epochtrain.experiment.prepare import prepare_runs
from epochtrain.experiment.runs import RESULT_FILE
from tests.experiment.settings import FAST

OPEN_DELAY = 1.5
"""Seconds the patched ``open_trainer`` sleeps: far more than the tiny run's epochs take."""


def slow(open_trainer: Callable[[Path], Any]) -> Callable[[Path], Any]:
    """``open_trainer`` that first sleeps :data:`OPEN_DELAY`, as a cold worker's imports do."""

    def open_slowly(run_dir: Path) -> Any:
        time.sleep(OPEN_DELAY)
        return open_trainer(run_dir)

    return open_slowly


def wall_time(run_dir: Path) -> float:
    value = json.loads((run_dir / RESULT_FILE).read_text())["wall_time"]
    assert isinstance(value, float)
    return value


def test_lockstep_wall_time_leaves_out_opening_the_trainer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "open_trainer", slow(runner.open_trainer))
    start = time.perf_counter()
    run_experiment(grid(["ppo"], ["CartPole-v1"], [0], **FAST), tmp_path, show_progress=False)
    elapsed = time.perf_counter() - start
    seconds = wall_time(tmp_path / "ppo-CartPole-v1-s0")
    assert 0.0 < seconds <= elapsed - OPEN_DELAY


def test_processes_wall_time_of_a_workers_first_run_leaves_out_opening_the_trainer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (run_dir,) = prepare_runs(grid(["ppo"], ["CartPole-v1"], [0], **FAST), tmp_path)
    # the worker function, run here as in a fresh pool process (no run before it)
    worker = process_worker._Worker(queue.Queue(), threading.Event(), os.getppid())
    monkeypatch.setattr(process_worker, "_worker", worker)
    monkeypatch.setattr(process_worker, "open_trainer", slow(process_worker.open_trainer))
    start = time.perf_counter()
    assert process_worker._run_in_worker(os.fspath(run_dir)) == "finished"
    elapsed = time.perf_counter() - start
    assert 0.0 < wall_time(run_dir) <= elapsed - OPEN_DELAY
