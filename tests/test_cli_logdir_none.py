"""``epochtrain train --logdir none`` is no run directory, as ``--logdir ''`` is (and as
``--checkpoint-dir none`` is no checkpoints); ``--logdir ./none`` is a folder named none."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochtrain.cli import main

SHORT = ["--algo", "ppo", "--step-per-epoch", "64", "--set", "step_per_collect=64"]
QUIET = ["--max-epoch", "1", "--no-progress", "--quiet"]


@pytest.mark.parametrize("word", ["none", "None", "NONE", ""])
def test_logdir_none_makes_no_run_directory_and_no_checkpoints(
    word: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", *SHORT, *QUIET, "--logdir", word]) == 0
    assert list(tmp_path.iterdir()) == []  # no folder named "none", no checkpoints
    out = capsys.readouterr().out
    shown = word or "''"  # as typed
    assert f"; no run directory (--logdir {shown})" in out
    assert "Run directory" not in out and "Checkpoints:" not in out


def test_logdir_none_with_a_checkpoint_dir_writes_only_the_checkpoints(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    ckpts = ["--checkpoint-dir", "ckpts"]
    assert main(["train", *SHORT, *QUIET, "--logdir", "none", *ckpts]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["ckpts"]
    assert "Checkpoints: ckpts" in capsys.readouterr().out


def test_a_path_to_a_folder_named_none_is_that_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", *SHORT, *QUIET, "--logdir", "./none"]) == 0
    (run_dir,) = (tmp_path / "none").iterdir()
    assert (run_dir / "spec.toml").is_file()
