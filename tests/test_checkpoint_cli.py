"""`epochtrain train --resume PATH` continues a run; `epochtrain eval PATH` tests its policy."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from epochtrain.checkpoint import find_checkpoints
from epochtrain.cli import main
from epochtrain.factory import UnusedSettingWarning
from epochtrain.spec import RunSpec

TRAIN = ["train", "--algo", "ppo", "--step-per-epoch", "256", "--no-progress", "--quiet"]


def test_train_checkpoints_then_resume_continues_the_same_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*TRAIN, "--max-epoch", "1", "--logdir", str(tmp_path), "--stop-at", "1e9"]) == 0
    (run_dir,) = tmp_path.iterdir()
    ckpt_dir = run_dir / "checkpoints"
    assert [p.name for p in find_checkpoints(ckpt_dir)] == ["epoch_000001"]
    capsys.readouterr()

    resume = [*TRAIN, "--max-epoch", "2", "--logdir", str(tmp_path), "--stop-at", "1e9"]
    # the run directory the first run printed resumes as its checkpoint_dir does
    assert main([*resume, "--resume", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "Finished (max_epoch) after 2 epochs" in out
    assert list(tmp_path.iterdir()) == [run_dir]  # the logs continue in the same run dir
    assert [p.name for p in find_checkpoints(ckpt_dir)] == ["epoch_000001", "epoch_000002"]

    assert main(["eval", str(ckpt_dir), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    assert "ppo on CartPole-v1" in out and "epoch 2" in out and "over 3 episodes" in out
    assert main(["eval", str(run_dir), "--episodes", "1"]) == 0
    assert f"checkpoint {ckpt_dir / 'epoch_000002'} (epoch 2" in capsys.readouterr().out


def test_resume_alone_continues_the_run_with_the_settings_it_was_started_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = [*TRAIN, "--set", "step_per_collect=64", "--set", "lr=5e-4", "--seed", "3"]
    assert main([*started, "--max-epoch", "1", "--logdir", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    capsys.readouterr()
    # no --algo, --seed or settings: the checkpoint's spec is the base, not ppo's preset
    assert main(["train", "--resume", str(run_dir), "--max-epoch", "2", "--quiet"]) == 0
    assert "Finished (max_epoch) after 2 epochs, 512 env steps" in capsys.readouterr().out
    spec = RunSpec.from_file(run_dir / "spec.toml")
    assert (spec.seed, spec.trainer.step_per_collect, spec.config.lr) == (3, 64, 5e-4)


def test_resume_writes_where_the_checkpoint_is_from_another_directory_and_after_a_move(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    assert main([*TRAIN, "--max-epoch", "1", "--logdir", "runs", "--stop-at", "1e9"]) == 0
    (run_dir,) = (tmp_path / "a" / "runs").iterdir()  # its spec saved the relative paths
    moved = run_dir.rename(tmp_path / "a" / "runs" / "moved")
    monkeypatch.chdir(tmp_path / "b")
    more = [*TRAIN, "--max-epoch", "2", "--stop-at", "1e9", "--resume", str(moved)]
    assert main(more) == 0
    assert not list((tmp_path / "b").iterdir())  # nothing under the new working directory
    assert [p.name for p in (tmp_path / "a" / "runs").iterdir()] == ["moved"]  # none recreated
    assert [p.name for p in find_checkpoints(moved / "checkpoints")] == [
        "epoch_000001",
        "epoch_000002",
    ]
    assert f"Run directory (spec.toml, TensorBoard logs): {moved}" in capsys.readouterr().out


def test_resume_and_eval_errors_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main([*TRAIN, "--max-epoch", "1", "--logdir", "", "--checkpoint-dir", str(tmp_path)]) == 0
    )
    capsys.readouterr()
    wrong = ["train", "--algo", "dqn", "--logdir", "", "--resume", str(tmp_path)]
    assert main(wrong) == 2
    assert "--algo dqn differs from the algo 'ppo' of the checkpoint" in capsys.readouterr().err
    assert main(["train", "--env", "Pendulum-v1", *wrong[3:]]) == 2
    assert "--env Pendulum-v1 differs from the env 'CartPole-v1'" in capsys.readouterr().err
    assert main(["train", "--seed", "1", *wrong[3:]]) == 2
    assert "the checkpoint's run is ppo on CartPole-v1 with seed 0" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "missing")]) == 2
    assert "missing does not exist" in capsys.readouterr().err
    assert main(["eval", str(tmp_path), "--episodes", "0"]) == 2
    assert "--episodes must be >= 1" in capsys.readouterr().err


def test_the_printed_resume_command_of_a_relative_logdir_warns_of_no_changed_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*TRAIN, "--max-epoch", "1", "--logdir", "rel", "--stop-at", "1e9"]) == 0
    (run_dir,) = Path("rel").iterdir()  # relative, as the user typed it
    capsys.readouterr()
    more = [*TRAIN, "--max-epoch", "2", "--logdir", "rel", "--stop-at", "1e9"]
    assert main([*more, "--resume", str(run_dir / "checkpoints")]) == 0
    err = capsys.readouterr().err
    assert "changed settings" in err and "trainer.max_epoch: saved 1, now 2" in err
    assert "logdir" not in err and "checkpoint_dir" not in err


def test_eval_of_a_run_with_checkpoint_and_logging_settings_warns_of_none_of_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """eval builds a trainer from the run's spec, without its checkpoint dir or loggers:
    the run's keep_last and loggers are no setting of the eval, so no warning names them."""
    run = [*TRAIN, "--max-epoch", "1", "--logdir", str(tmp_path), "--stop-at", "1e9"]
    assert main([*run, "--keep-last", "5", "--set", 'loggers=["jsonl"]']) == 0
    (run_dir,) = tmp_path.iterdir()
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnusedSettingWarning)
        assert main(["eval", str(run_dir), "--episodes", "1"]) == 0
    assert "has no effect" not in capsys.readouterr().err
