"""A run's writer lock in a sweep: taken before anything of the run is built or created,
and held until its ``result.json`` is written, on every path that writes one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from epochtrain.errors import CheckpointError
from epochtrain.experiment import grid, run_experiment, runner, runs
from epochtrain.experiment.prepare import prepare_runs
from epochtrain.experiment.runs import close_envs, finished_result, open_trainer, timed_epoch
from tests.experiment.settings import FAST
from tests.experiment.test_runner import hold_lock

ENVS = ["CartPole-v1"]
TRY_TO_TAKE = (
    "import os, sys\n"
    "lock = os.path.join(sys.argv[1], '.lock')\n"
    "try:\n    fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL)\n"
    "except FileExistsError:\n    sys.exit(3)\n"
    "os.close(fd)\nos.unlink(lock)\n"
)
"""A second sweep's attempt to take a run, as :class:`CheckpointLock` creates its lock file
(exit 3: refused; 0: it could have taken the run, and let it go again)."""


def lock_holder(run_dir: Path) -> int | None:
    """The pid in ``run_dir``'s checkpoint lock, None without one."""
    lock = run_dir / "checkpoints" / ".lock"
    return int(json.loads(lock.read_text())["pid"]) if lock.exists() else None


def files(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Every entry under ``run_dir`` with its inode and modification time."""
    return {
        os.fspath(p.relative_to(run_dir)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in run_dir.rglob("*")
    }


def test_a_run_another_sweep_took_first_gets_no_file_of_this_one(
    tmp_path: Path, other_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = grid(["ppo"], ENVS, [0], **FAST, **{"logging.loggers": ("tensorboard", "csv")})
    run_dir = tmp_path / specs[0].run_id
    real_open = runner.open_trainer

    def the_other_sweep_wins(run_dir: Path) -> Any:
        # the other sweep takes the run after this one saw it free, before it opens it
        hold_lock(run_dir, other_process.pid)
        before.update(files(run_dir))
        return real_open(run_dir)

    before: dict[str, tuple[int, int]] = {}
    monkeypatch.setattr(runner, "open_trainer", the_other_sweep_wins)
    with pytest.warns(UserWarning, match="in use by another sweep"):
        experiment = run_experiment(specs, tmp_path, show_progress=False)
    assert [r.status for r in experiment.runs] == ["running"]
    assert files(run_dir) == before  # no log.csv, log.jsonl, events file of the loser
    assert lock_holder(run_dir) == other_process.pid


def test_opening_a_run_another_process_holds_builds_nothing(
    tmp_path: Path, other_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import epochtrain.factory

    (run_dir,) = prepare_runs(grid(["ppo"], ENVS, [0], **FAST), tmp_path)
    hold_lock(run_dir, other_process.pid)
    built: list[object] = []
    monkeypatch.setattr(epochtrain.factory, "make_trainer", lambda spec: built.append(spec))
    with pytest.raises(CheckpointError, match="is in use by process"):
        open_trainer(run_dir)
    assert built == []


def test_lockstep_writes_each_result_while_it_holds_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: dict[str, int] = {}
    real_write = runs.write_json

    def another_sweep_tries_first(path: Path, data: Any) -> None:
        if path.name == "result.json":  # a sweep waiting for the run tries to take it now
            taken = subprocess.run(
                [sys.executable, "-c", TRY_TO_TAKE, os.fspath(path.parent / "checkpoints")]
            )
            attempts[path.parent.name] = taken.returncode
        real_write(path, data)

    monkeypatch.setattr(runs, "write_json", another_sweep_tries_first)
    experiment = run_experiment(grid(["ppo"], ENVS, [0, 1], **FAST), tmp_path, show_progress=False)
    assert [r.status for r in experiment.runs] == ["finished", "finished"]
    assert attempts == {"ppo-CartPole-v1-s0": 3, "ppo-CartPole-v1-s1": 3}  # refused
    assert [lock_holder(tmp_path / r.run_id) for r in experiment.runs] == [None, None]


def test_a_run_that_fails_to_open_is_recorded_under_its_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import epochtrain.factory

    def cannot_build(spec: object) -> Any:
        raise RuntimeError("no env here")

    held_at_write: list[int | None] = []
    real_write = runs.write_json

    def record(path: Path, data: Any) -> None:
        held_at_write.append(lock_holder(path.parent))
        real_write(path, data)

    monkeypatch.setattr(epochtrain.factory, "make_trainer", cannot_build)
    monkeypatch.setattr(runs, "write_json", record)
    experiment = run_experiment(grid(["ppo"], ENVS, [0], **FAST), tmp_path, show_progress=False)
    assert [(r.status, r.error) for r in experiment.runs] == [
        ("failed", "RuntimeError: no env here")
    ]
    assert held_at_write == [os.getpid()]
    assert lock_holder(tmp_path / "ppo-CartPole-v1-s0") is None


def test_an_opened_run_keeps_its_lock_past_its_last_checkpoint_until_closed(
    tmp_path: Path,
) -> None:
    # the processes and Ray backends: result.json written between the last epoch and close
    (run_dir,) = prepare_runs(grid(["ppo"], ENVS, [0], **FAST), tmp_path)
    trainer = open_trainer(run_dir)
    while timed_epoch(trainer)[0]:
        pass
    assert trainer.finished and (run_dir / "checkpoints" / "epoch_000002").is_dir()
    assert lock_holder(run_dir) == os.getpid()
    finished_result(run_dir, trainer, 1.0)
    close_envs(trainer)
    assert lock_holder(run_dir) is None


def test_the_processes_backend_records_a_failure_only_under_the_runs_lock(
    tmp_path: Path, other_process: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    from epochtrain.experiment import processes

    run_dir = prepare_runs(grid(["ppo"], ENVS, [0], **FAST), tmp_path)[0]
    held_at_write: list[int | None] = []
    real_write = runs.write_json

    def record(path: Path, data: Any) -> None:
        held_at_write.append(lock_holder(path.parent))
        real_write(path, data)

    monkeypatch.setattr(runs, "write_json", record)
    hold_lock(run_dir, other_process.pid)  # another sweep took the run since it failed here
    assert processes._failed(run_dir, RuntimeError("boom")) == processes.IN_USE
    assert not (run_dir / "result.json").exists() and held_at_write == []
    (run_dir / "checkpoints" / ".lock").unlink()
    assert processes._failed(run_dir, RuntimeError("boom")) == "failed"
    assert held_at_write == [os.getpid()] and lock_holder(run_dir) is None
    assert json.loads((run_dir / "result.json").read_text())["status"] == "failed"
