"""Tests of what ``epochtrain sweep`` and ``compare`` refuse before any work, and of what the
sweep's summary tells (epochtrain.experiment.cli, prepare, runner, processes)."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest

from epochtrain.cli import main
from epochtrain.experiment import grid, run_experiment
from epochtrain.experiment.cli import MAX_SEEDS, parse_seeds
from epochtrain.spec import RunSpec
from tests.experiment.settings import FAST

SWEEP = [
    "sweep", "--algo", "ppo", "--env", "CartPole-v1", "--no-progress",
    "--max-epoch", "2", "--step-per-epoch", "64", "--step-per-collect", "64",
    "--repeat-per-collect", "1", "--num-envs", "1", "--num-test-envs", "1",
    "--episode-per-test", "1",
]  # fmt: skip


@pytest.fixture(scope="module")
def experiment_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exp") / "exp"
    run_experiment(grid(["ppo"], ["CartPole-v1"], [0, 1], **FAST), out, show_progress=False)
    return out


@pytest.fixture
def copy(experiment_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "exp"
    shutil.copytree(experiment_dir, out)
    return out


def one_error_line(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"epochtrain {command}: error: "), err
    return lines[0]


def test_the_summary_lists_runs_that_stopped_early_with_reason_and_epoch(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = copy / "ppo-CartPole-v1-s1" / "result.json"
    result = json.loads(path.read_text())
    result.update(stop_reason="nonfinite", epochs=1)
    path.write_text(json.dumps(result))

    assert main([*SWEEP, "--seeds", "0-1", "--out", str(copy)]) == 0  # finished by choice
    out, err = capsys.readouterr()
    assert "2/2 runs finished" in out and "(1 stopped early, listed below)" in out
    line = next(x for x in err.splitlines() if "stopped early:" in x)
    assert "ppo-CartPole-v1-s1" in line and "non-finite values" in line
    assert "at epoch 1 of 2" in line
    assert "ppo-CartPole-v1-s0" not in err  # ended at max_epoch: as planned


def test_seeds_below_zero_or_too_many_are_refused_in_the_options_words() -> None:
    with pytest.raises(ValueError, match=r"--seeds '-1': seeds must be >= 0"):
        parse_seeds(["-1"])
    with pytest.raises(ValueError, match=rf"--seeds 0-1000000: at most {MAX_SEEDS} seeds"):
        parse_seeds(["0-1000000"])
    assert parse_seeds([f"0-{MAX_SEEDS - 1}"]) == list(range(MAX_SEEDS))


def test_max_failures_with_the_lockstep_backend_is_refused_before_any_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "exp"
    assert main([*SWEEP, "--max-failures", "1", "--out", str(out)]) == 2
    assert "--max-failures" in one_error_line(capsys.readouterr().err, "sweep")
    specs = grid(["ppo"], ["CartPole-v1"], [0], **FAST)
    with pytest.raises(ValueError, match=r"max_failures .* backend='lockstep'"):
        run_experiment(specs, out, max_failures=1, show_progress=False)
    assert not out.exists()


def test_an_algo_other_than_the_configs_is_refused_naming_both_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = RunSpec.tuned("dqn", "CartPole-v1", seed=0).to_file(tmp_path / "dqn.toml")
    argv = ["sweep", "--config", str(config), "--algo", "ppo", "--out", str(tmp_path / "x")]
    assert main(argv) == 2
    line = one_error_line(capsys.readouterr().err, "sweep")
    assert "--algo ppo" in line and "--config" in line and "--algo dqn" in line
    assert "algos must be" not in line


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--reference", "CartPole-v1=nan"], "--reference 'CartPole-v1=nan'"),
        (["--random", "CartPole-v1=inf"], "--random 'CartPole-v1=inf'"),
        (["--reference", "CartPol-v1=400"], "--reference"),
        (["--reference", "CartPole-v1=400", "--reference", "CartPole-v1=450"], "twice"),
        (["--reference", "CartPole-v1=20", "--random", "CartPole-v1=20"], "--reference"),
        (["--reps", "100000000"], "--reps must be at most"),
    ],
)
def test_compare_refuses_bad_normalisation_values_and_huge_reps_before_any_work(
    experiment_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    expected: str,
) -> None:
    report = tmp_path / "report"
    assert main(["compare", str(experiment_dir), "--out", str(report), *flags]) == 2
    out, err = capsys.readouterr()
    assert expected in one_error_line(err, "compare")
    assert out == "" and not report.exists()


def test_a_spec_toml_from_a_newer_epochtrain_is_refused_naming_the_file_and_the_fix(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = copy / "ppo-CartPole-v1-s0" / "spec.toml"
    spec.write_text("future_key = 1\n" + spec.read_text())
    assert main([*SWEEP, "--seeds", "2", "--out", str(copy)]) == 2
    line = one_error_line(capsys.readouterr().err, "sweep")
    assert str(spec) in line and "future_key" in line
    assert "another epochtrain version" in line
    assert f"delete '{spec.parent}' to run that seed again" in line
    assert not (copy / "ppo-CartPole-v1-s2").exists()


def test_a_torn_spec_toml_or_index_is_refused_with_the_way_out(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (copy / "ppo-CartPole-v1-s0" / "spec.toml").write_text('algo = "pp')
    assert main([*SWEEP, "--seeds", "2", "--out", str(copy)]) == 2
    line = one_error_line(capsys.readouterr().err, "sweep")
    assert "is not valid TOML" in line and "or is damaged" in line
    (copy / "experiment.json").write_text('{"format": "epochtr')
    assert main([*SWEEP, "--seeds", "2", "--out", str(copy)]) == 2
    line = one_error_line(capsys.readouterr().err, "sweep")
    assert "is not valid JSON" in line and "Delete it and run again each sweep" in line


def test_a_full_disk_at_set_up_says_so_and_leaves_the_directory_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    to_file = RunSpec.to_file
    written: list[Path] = []

    def fill_disk(self: RunSpec, path: Path) -> Path:
        if written:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        written.append(path)
        return to_file(self, path)

    monkeypatch.setattr(RunSpec, "to_file", fill_disk)
    parent = tmp_path / "disk"
    parent.mkdir()
    assert main([*SWEEP, "--seeds", "0-2", "--out", str(parent / "exp")]) == 2
    line = one_error_line(capsys.readouterr().err, "sweep")
    assert "No space left on device" in line and "free space there" in line
    assert "this user can write" not in line
    assert written and list(parent.iterdir()) == []


def test_a_runs_warning_in_a_worker_process_reads_as_an_epochtrain_warning(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    first, moved = tmp_path / "first", tmp_path / "moved"
    assert main([*SWEEP, "--seeds", "0", "--out", str(first)]) == 0
    run = first / "ppo-CartPole-v1-s0"
    (run / "result.json").unlink()  # unfinished: resumes from epoch 1 in its copy
    shutil.rmtree(run / "checkpoints" / "epoch_000002")
    shutil.copytree(first, moved)
    capfd.readouterr()

    argv = [*SWEEP, "--seeds", "0", "--out", str(moved), "--backend", "processes"]
    assert main([*argv, "--workers", "1"]) == 0
    err = capfd.readouterr().err
    assert "epochtrain: warning: ppo-CartPole-v1-s0: resuming" in err
    assert "UserWarning" not in err
