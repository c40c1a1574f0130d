"""The CLI's optional-extra paths: eval --video, collect --format minari, --dataset minari:,
and a missing extra as one line with exit status 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from epochtrain.cli import main


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    argv = ["train", "--algo", "ppo", "--max-epoch", "1", "--step-per-epoch", "256"]
    assert main([*argv, "--logdir", str(tmp_path / "runs"), "--no-progress", "--quiet"]) == 0
    (ckpts,) = (tmp_path / "runs").glob("*/checkpoints")
    return ckpts


def test_eval_video_writes_an_mp4_of_a_test_episode(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("imageio_ffmpeg", reason="the video extra is not installed")
    out = tmp_path / "episode.mp4"
    assert main(["eval", str(checkpoint), "--episodes", "1", "--video", str(out)]) == 0
    assert out.stat().st_size > 1000 and out.read_bytes()[4:8] == b"ftyp"  # an mp4 container
    assert f"Video of a test episode: {out}" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["afile/out.mp4", "out.avi"])
def test_eval_refuses_a_video_path_before_the_episodes_run(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    pytest.importorskip("imageio_ffmpeg", reason="the video extra is not installed")
    (tmp_path / "afile").write_text("x")
    assert main(["eval", str(checkpoint), "--episodes", "1", "--video", str(tmp_path / name)]) == 2
    captured = capsys.readouterr()
    assert "mean return" not in captured.out  # refused before the episodes
    assert len(captured.err.strip().splitlines()) == 1 and "--video" in captured.err


def test_collect_to_minari_then_train_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("minari", reason="the minari extra is not installed")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    argv = ["collect", "--env", "CartPole-v1", "--random", "--steps", "300"]
    assert main([*argv, "--format", "minari", "--out", "cartpole/random-v0"]) == 0
    captured = capsys.readouterr()
    assert "cartpole" in captured.out
    assert list((tmp_path / "minari").rglob("*"))
    # Minari's four metadata warnings (one of them a 600-character env spec) are one line
    assert captured.err.splitlines() == [
        "epochtrain: warning: the dataset has no --author, --author-email, --code-permalink: "
        "Minari recommends them for a dataset that is shared"
    ]
    metadata = ["--author", "Ada", "--author-email", "ada@example.org", "--code-permalink", "x"]
    assert main([*argv, "--format", "minari", "--out", "cartpole/random-v1", *metadata]) == 0
    assert capsys.readouterr().err == ""
    import minari

    stored = minari.load_dataset("cartpole/random-v1").storage.metadata
    assert (stored["author"], stored["author_email"], stored["code_permalink"]) == (
        {"Ada"},
        {"ada@example.org"},
        "x",
    )
    train = ["train", "--algo", "bc", "--dataset", "minari:cartpole/random-v0"]
    assert main([*train, "--max-epoch", "1", "--step-per-epoch", "20", "--logdir", ""]) == 0
    capsys.readouterr()
    # the same id again is refused before any training (10^6 steps would take minutes)
    again = ["collect", "--env", "CartPole-v1", "--algo", "ppo", "--train-steps", "1000000"]
    assert (
        main([*again, "--steps", "300", "--format", "minari", "--out", "cartpole/random-v0"]) == 2
    )
    captured = capsys.readouterr()
    assert "trained" not in captured.out
    assert "already exists" in captured.err and "minari delete" in captured.err


def test_a_missing_minari_dataset_names_the_download_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("minari", reason="the minari extra is not installed")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "empty"))
    argv = ["train", "--algo", "bc", "--dataset", "minari:nope/none-v0", "--logdir", ""]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "minari download" in err


def test_a_missing_extra_is_one_line_naming_the_pip_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "minari", None)  # import minari now fails
    argv = ["collect", "--env", "CartPole-v1", "--random", "--steps", "10"]
    assert main([*argv, "--format", "minari", "--out", "x/y-v0"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "pip install 'epochtrain[minari]'" in err


def test_an_env_missing_its_package_exits_2_with_the_pip_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import importlib.util

    if importlib.util.find_spec("Box2D") is not None:
        pytest.skip("Box2D is installed here: LunarLander builds")
    assert main(["train", "--algo", "ppo", "--env", "LunarLander-v3", "--logdir", ""]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "gymnasium[box2d]" in err


def test_collect_to_minari_reports_the_steps_the_dataset_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("minari", reason="the minari extra is not installed")
    import minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    # an env id of the module form, as gymnasium.make takes it
    env = "gymnasium.envs.classic_control:CartPole-v1"
    argv = ["collect", "--env", env, "--random", "--steps", "301", "--num-envs", "2"]
    assert main([*argv, "--format", "minari", "--out", "cartpole/random-v0"]) == 0
    out = capsys.readouterr().out
    dataset = minari.load_dataset("cartpole/random-v0")
    assert 0 < dataset.total_steps < 301  # the episodes still running were left out
    assert f"the dataset holds {dataset.total_steps} steps" in out
    assert f"({dataset.total_episodes} complete episodes" in out


def test_eval_video_without_the_video_extra_exits_2_before_the_episodes_run(
    checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The test episodes ran and printed their returns, then the missing extra was found."""
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # import imageio_ffmpeg now fails
    argv = ["eval", str(checkpoint), "--episodes", "1", "--video", str(tmp_path / "e.mp4")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "mean return" not in captured.out
    assert len(captured.err.strip().splitlines()) == 1
    assert "pip install 'epochtrain[video]'" in captured.err
