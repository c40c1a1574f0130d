"""The ``epochtrain`` command's input and first words: what a refused ``train`` leaves on
disk, the defaults ``config`` prints against what ``train`` runs, the line a run opens
with, misspelt flags and negative values, and checkpoint paths that are not there."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from epochtrain.cli import main

SHORT = ["--algo", "ppo", "--step-per-epoch", "64", "--set", "step_per_collect=64"]
QUIET = ["--max-epoch", "1", "--no-progress", "--checkpoint-dir", "none"]


@pytest.mark.parametrize(
    "refused",
    [["--algo", "ppo", "--device", "cuda:99"], ["--algo", "dqn", "--device", "mps"]],
)
def test_a_train_refused_for_its_device_leaves_no_folder_of_its_logdir(
    refused: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found when the trainer was built, after ``--logdir``'s folders were made: only the
    run directory was removed, ``new/a/b`` stayed."""
    assert main(["train", *refused, "--logdir", str(tmp_path / "new" / "a" / "b")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("error", "status"), [(ValueError("refused"), 2), (KeyboardInterrupt, 130)]
)
def test_a_train_refused_or_interrupted_while_its_trainer_is_built_removes_the_folders_it_made(
    error: BaseException,
    status: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import epochtrain.factory

    def refuse(spec: Any) -> Any:
        raise error

    (tmp_path / "kept").mkdir()
    monkeypatch.setattr(epochtrain.factory, "make_trainer", refuse)
    logdir = tmp_path / "kept" / "new" / "a"
    assert main(["train", *SHORT, "--logdir", str(logdir)]) == status
    assert list(tmp_path.iterdir()) == [tmp_path / "kept"]  # an existing folder stays
    assert list((tmp_path / "kept").iterdir()) == []


def printed_spec(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["config", *argv]) == 0
    return tomllib.loads(capsys.readouterr().out)


def test_config_prints_the_verbose_train_runs_and_train_writes_it_into_its_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``config`` printed ``verbose = false`` (the class default) while ``train`` ran
    verbose and wrote ``verbose = true`` into its ``spec.toml``."""
    assert printed_spec(capsys, *SHORT)["trainer"]["verbose"] is True
    assert printed_spec(capsys, *SHORT, "--no-verbose")["trainer"]["verbose"] is False
    assert main(["train", *SHORT, *QUIET, "--logdir", str(tmp_path)]) == 0
    assert "Epoch #1:" in capsys.readouterr().out
    (run_dir,) = tmp_path.iterdir()
    assert tomllib.loads((run_dir / "spec.toml").read_text())["trainer"]["verbose"] is True


@pytest.mark.parametrize(("line", "epoch_lines"), [("verbose = false", 0), ("", 1)])
def test_train_keeps_the_verbose_a_config_file_gives_and_else_prints_a_line_per_epoch(
    line: str, epoch_lines: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file's ``verbose = false`` was overridden without a word (train forced it on)."""
    spec = tmp_path / "run.toml"
    spec.write_text(
        f'algo = "ppo"\nenv_id = "CartPole-v1"\n[trainer]\n{line}\nstep_per_epoch = 64\n'
        "step_per_collect = 64\n"
    )
    assert main(["train", "--config", str(spec), *QUIET, "--logdir", ""]) == 0
    assert capsys.readouterr().out.count("Epoch #") == epoch_lines


def test_help_states_the_commands_verbose_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # undo the help's line wrapping
    assert "trainer.verbose = True (in Python: False)" in out
    assert "trainer.verbose = False" not in out
    assert "--verbose, --no-verbose Print one line per epoch. (default: on;" in out


@pytest.mark.parametrize("quiet", [[], ["--quiet"]])
def test_train_opens_with_a_line_naming_the_run_and_its_run_directory(
    quiet: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing was printed before the first epoch's line (with --quiet, before the end): the
    run directory, for TensorBoard while the run goes, only in the closing lines."""
    argv = ["train", "--algo", "ppo", "--step-per-epoch", "64", *QUIET, *quiet]
    assert main([*argv, "--seed", "3", "--logdir", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "ppo on CartPole-v1, seed 3: 1 epochs x 256 env steps (--step-per-epoch 64 rounded "
        f"up to whole collect steps of 256); run directory {run_dir}"
    )
    assert lines[1].startswith("Finished" if quiet else "Epoch #1:")


def test_a_misspelt_flag_suggests_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["config", "--algo", "ppo", "--max-epochs", "3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("unrecognized arguments: --max-epochs 3 (did you mean '--max-epoch'?)")


@pytest.mark.parametrize(
    ("text", "value"), [("-1e2", -100.0), ("-1.5E+2", -150.0), ("-2e-1", -0.2)]
)
def test_a_negative_number_is_a_value_of_a_numeric_flag(
    text: str, value: float, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse read ``-1e2`` as an option: "--stop-at: expected one argument"."""
    spec = printed_spec(capsys, "--algo", "sac", "--env", "Pendulum-v1", "--stop-at", text)
    assert spec["stop_at"] == value


def test_a_value_starting_with_a_dash_is_told_to_follow_an_equals_sign(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["config", "--algo", "ppo", "--checkpoint-dir", "-ckpt"])
    assert exc.value.code == 2
    assert "written --checkpoint-dir=VALUE" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "what"), [("missing", "does not exist"), ("f.toml", "is a file")])
@pytest.mark.parametrize("command", [["eval"], ["collect", "--env", "CartPole-v1", "--checkpoint"]])
def test_a_checkpoint_path_that_is_no_directory_says_so(
    name: str, what: str, command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said "holds no complete checkpoint", as of a directory there."""
    (tmp_path / "f.toml").write_text("")
    path = tmp_path / name
    rest = ["--steps", "10", "--out", str(tmp_path / "x.buf")] if command[0] == "collect" else []
    assert main([*command, str(path), *rest]) == 2
    err = capsys.readouterr().err
    option = "--checkpoint " if command[0] == "collect" else ""
    assert len(err.strip().splitlines()) == 1 and f"error: {option}{path} {what}: pass" in err


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--quiet", "--verbose"], "--quiet and --verbose contradict each other"),
        (["--no-progress", "--show-progress"], "--no-progress and --show-progress contradict"),
    ],
)
def test_train_refuses_flags_that_contradict_each_other_before_any_work(
    flags: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--quiet --verbose`` ran quiet and ``--no-progress --show-progress`` hid the bars,
    whatever the order: one flag was dropped without a word."""
    logdir = tmp_path / "runs"
    assert main(["train", *SHORT, *flags, "--logdir", str(logdir)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err
    assert not logdir.exists()
