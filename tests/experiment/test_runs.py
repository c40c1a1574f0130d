"""Tests of epochtrain.experiment.runs: preparing an experiment directory checks every run
before writing anything, keeps one setting per algorithm and env, merges concurrent
set-ups under a lock, and follows a deleted run directory."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from epochtrain.checkpoint import CheckpointError
from epochtrain.experiment import grid, load_experiment
from epochtrain.experiment.prepare import prepare_runs
from epochtrain.experiment.runs import open_trainer
from tests.experiment.settings import FAST


def listed(out: Path) -> list[str]:
    runs: list[str] = json.loads((out / "experiment.json").read_text())["runs"]
    return runs


def files(out: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``out`` (the index lock aside) with its inode and mtime: equal
    before and after a set-up that wrote nothing."""
    return {
        os.fspath(p.relative_to(out)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != ".experiment.lock"
    }


def test_a_seed_with_other_settings_than_the_runs_of_its_algo_and_env_is_refused(
    tmp_path: Path,
) -> None:
    prepare_runs(grid(["ppo"], ["CartPole-v1"], [0, 1], **FAST), tmp_path)
    before = files(tmp_path)
    changed = grid(["ppo"], ["CartPole-v1"], [2, 3], **{**FAST, "lr": 3e-4, "max_epoch": 4})
    with pytest.raises(ValueError) as refused:
        prepare_runs(changed, tmp_path)
    message = str(refused.value)
    assert "holds runs of ppo on CartPole-v1 with other settings" in message
    assert "config.lr: 0.001 there, 0.0003 now" in message
    assert "trainer.max_epoch: 2 there, 4 now" in message
    assert "ppo-CartPole-v1-s0, ppo-CartPole-v1-s1" in message
    assert "another out_dir" in message
    assert files(tmp_path) == before  # nothing written: no s2, no s3, the index as it was
    assert listed(tmp_path) == ["ppo-CartPole-v1-s0", "ppo-CartPole-v1-s1"]


def test_other_algos_envs_and_seeds_with_the_same_settings_join_the_experiment(
    tmp_path: Path,
) -> None:
    prepare_runs(grid(["ppo"], ["CartPole-v1"], [0], **FAST), tmp_path)
    prepare_runs(grid(["ppo"], ["CartPole-v1"], [1], **FAST), tmp_path)
    # another algorithm (and env) is another row of the comparison: its settings are its own
    prepare_runs(grid(["a2c"], ["Acrobot-v1"], [0], **{**FAST, "lr": 3e-4}), tmp_path)
    assert listed(tmp_path) == ["ppo-CartPole-v1-s0", "ppo-CartPole-v1-s1", "a2c-Acrobot-v1-s0"]


def test_specs_of_one_algo_and_env_with_different_settings_are_refused(tmp_path: Path) -> None:
    specs = [
        *grid(["ppo"], ["CartPole-v1"], [0], **FAST),
        *grid(["ppo"], ["CartPole-v1"], [1], **{**FAST, "lr": 3e-4}),
    ]
    with pytest.raises(ValueError, match=r"s0 and ppo-CartPole-v1-s1 run ppo on CartPole-v1 with"):
        prepare_runs(specs, tmp_path)
    assert not tmp_path.joinpath("experiment.json").exists()


def test_a_refused_set_up_writes_no_run_and_the_corrected_one_is_accepted(tmp_path: Path) -> None:
    prepare_runs(grid(["ppo"], ["CartPole-v1"], [0], **FAST), tmp_path)
    with pytest.raises(ValueError, match="other settings"):
        prepare_runs(grid(["ppo"], ["CartPole-v1"], [5, 0], **{**FAST, "lr": 3e-4}), tmp_path)
    assert not (tmp_path / "ppo-CartPole-v1-s5").exists()
    prepare_runs(grid(["ppo"], ["CartPole-v1"], [5], **FAST), tmp_path)
    assert listed(tmp_path) == ["ppo-CartPole-v1-s0", "ppo-CartPole-v1-s5"]


def test_a_deleted_run_directory_is_dropped_from_the_index_or_started_again(
    tmp_path: Path,
) -> None:
    prepare_runs(grid(["ppo"], ["CartPole-v1"], [0, 1, 2], **FAST), tmp_path)
    for seed in (1, 2):
        (tmp_path / f"ppo-CartPole-v1-s{seed}" / "spec.toml").unlink()
        (tmp_path / f"ppo-CartPole-v1-s{seed}").rmdir()
    with pytest.raises(ValueError, match=r"lists run 'ppo-CartPole-v1-s1' but its directory"):
        load_experiment(tmp_path)
    with pytest.warns(UserWarning, match=r"no longer lists run 'ppo-CartPole-v1-s2'"):
        prepare_runs(grid(["ppo"], ["CartPole-v1"], [1], **FAST), tmp_path)
    assert listed(tmp_path) == ["ppo-CartPole-v1-s0", "ppo-CartPole-v1-s1"]
    assert (tmp_path / "ppo-CartPole-v1-s1" / "spec.toml").is_file()  # started again
    assert [r.status for r in load_experiment(tmp_path).runs] == ["pending", "pending"]


def test_a_set_up_that_changes_nothing_writes_nothing(tmp_path: Path) -> None:
    specs = grid(["ppo"], ["CartPole-v1"], [0, 1], **FAST)
    prepare_runs(specs, tmp_path)
    before = files(tmp_path)
    prepare_runs(specs, tmp_path)
    prepare_runs(specs[:1], tmp_path)
    assert files(tmp_path) == before


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_an_out_dir_that_is_no_directory_is_a_value_error_naming_it(
    tmp_path: Path, where: str
) -> None:
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" if where == "a file" else tmp_path / "afile" / "exp"
    with pytest.raises(ValueError, match=rf"out_dir '{out}' (is a file|cannot hold an exp)"):
        prepare_runs(grid(["ppo"], ["CartPole-v1"], [0], **FAST), out)
    assert (tmp_path / "afile").read_text() == ""


def test_an_out_dir_this_user_cannot_write_is_a_value_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_mkdir = Path.mkdir

    def refused(path: Path, *args: Any, **kwargs: Any) -> None:  # as a directory of root's
        if path.is_relative_to(tmp_path):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refused)
    with pytest.raises(ValueError, match=r"out_dir .* cannot hold an experiment .*Permission"):
        prepare_runs(grid(["ppo"], ["CartPole-v1"], [0], **FAST), tmp_path / "exp")


def _set_up(algo: str, out: str, barrier: Any) -> None:
    specs = grid([algo], ["CartPole-v1"], range(8), **FAST)
    barrier.wait()
    prepare_runs(specs, Path(out))


def test_set_ups_into_one_directory_at_once_all_get_their_runs_listed(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    for trial in range(2):
        out = tmp_path / f"t{trial}"
        barrier = ctx.Barrier(2)
        procs = [ctx.Process(target=_set_up, args=(a, str(out), barrier)) for a in ("ppo", "a2c")]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(60)
        assert [p.exitcode for p in procs] == [0, 0]
        assert sorted(listed(out)) == sorted(d.name for d in out.iterdir() if d.is_dir())
        assert len(listed(out)) == 16


def test_a_run_started_over_before_its_first_checkpoint_drops_the_records_of_its_first_start(
    tmp_path: Path,
) -> None:
    run_dir = prepare_runs(grid(["ppo"], ["CartPole-v1"], [0], **FAST), tmp_path)[0]
    first = open_trainer(run_dir)
    next(first)  # logged epoch 1 and checkpointed it; as if killed before that checkpoint:
    first.close()
    shutil.rmtree(run_dir / "checkpoints")
    logged = _records(run_dir)
    assert logged
    again = open_trainer(run_dir)
    assert (run_dir / "log.jsonl").read_text() == ""
    next(again)
    again.close()
    assert _records(run_dir) == logged  # the same records, none twice


def _records(run_dir: Path) -> list[tuple[str, int]]:
    lines = (run_dir / "log.jsonl").read_text().splitlines()
    return [(r["scope"], r["step"]) for r in map(json.loads, lines)]


def test_opening_a_run_another_trainer_is_running_leaves_its_log_alone(tmp_path: Path) -> None:
    # a second sweep that reaches a run with no checkpoint yet, as the first runs it
    (run_dir,) = prepare_runs(grid(["ppo"], ["CartPole-v1"], [0], **FAST), tmp_path)
    first = open_trainer(run_dir)
    next(first)  # epoch 1 logged; its checkpoint is written
    log = run_dir / "log.jsonl"
    written = log.read_bytes()
    assert written
    for path in (run_dir / "checkpoints").glob("epoch_*"):  # as before the first one
        shutil.rmtree(path)
    with pytest.raises(CheckpointError, match="writ"):
        open_trainer(run_dir)
    assert log.read_bytes() == written  # before: emptied, under the first run's writer
    next(first)
    assert log.read_bytes().startswith(written) and len(log.read_bytes()) > len(written)
    first.close()
