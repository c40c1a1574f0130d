"""A sweep killed (``kill -9``) between a run's ``result.json`` and the release of the
run's lock: the finished run keeps no stale lock once the sweep's command runs again."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from epochtrain.experiment import grid, run_experiment
from tests.experiment.settings import FAST, results

LOCK = Path("checkpoints") / ".lock"


def _lock_of(pid: int) -> str:
    return json.dumps({"pid": pid, "host": socket.gethostname(), "token": "t", "created": "then"})


def test_rerunning_a_sweep_drops_the_lock_a_killed_writer_left_in_a_finished_run(
    tmp_path: Path, dead_pid: int, live_pid: int
) -> None:
    # before: the lock stayed for ever (a finished run is skipped, so nothing took it over);
    # Ray's driver killed between a trial's last step and its cleanup left one (1 of 12)
    specs = grid(["ppo"], ["CartPole-v1"], [0, 1], **FAST)
    run_experiment(specs, tmp_path, show_progress=False)
    finished = results(tmp_path)
    dead_run, live_run = (tmp_path / s.run_id for s in specs)
    (dead_run / LOCK).write_text(_lock_of(dead_pid))
    (live_run / LOCK).write_text(_lock_of(live_pid))  # a live process's: not ours to drop
    kept = {
        p: p.stat().st_mtime_ns for p in dead_run.rglob("*") if p.is_file() and p.name != ".lock"
    }

    experiment = run_experiment(specs, tmp_path, show_progress=False)
    assert [r.status for r in experiment.runs] == ["finished", "finished"]
    assert not (dead_run / LOCK).exists()
    assert json.loads((live_run / LOCK).read_text())["pid"] == live_pid
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # nothing else was written
    assert results(tmp_path) == finished
    assert not [n for n in os.listdir(dead_run / "checkpoints") if n.startswith(".")]
