"""`epochtrain collect` and `eval --video` interrupted (Ctrl-C, SIGTERM) or failing while they
record: nothing is left behind, neither the temporary folder of `collect --format minari`
nor folders of `--out` / `--video` they created, nor a partial dataset."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from epochtrain.cli import main

RECORD = ["collect", "--env", "CartPole-v1", "--random"]
LONG = "5000000"  # env steps: seconds of recording, ended by the signal long before


def _wait_for(condition: Path, process: subprocess.Popen[str], pattern: str = "") -> None:
    """Poll until ``condition`` (a folder, or a folder holding ``pattern``) appears."""
    deadline = time.monotonic() + 120
    while not (list(condition.glob(pattern)) if pattern else condition.exists()):
        assert process.poll() is None, process.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the recording never started"
        time.sleep(0.02)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("fmt", ["minari", "buffer"])
def test_a_collect_interrupted_while_recording_leaves_nothing_behind(
    tmp_path: Path, sig: signal.Signals, fmt: str
) -> None:
    # before: --format minari left its epochtrain-collect-* folder in TMPDIR (2 of 2
    # interrupts), and the buffer format the folders of --out that recording had created
    if fmt == "minari":
        pytest.importorskip("minari", reason="the minari extra is not installed")
    scratch, datasets, out = tmp_path / "tmp", tmp_path / "minari", tmp_path / "new" / "dir"
    scratch.mkdir()
    target = ["--format", "minari", "--out", "cartpole/random-v0"]
    if fmt == "buffer":
        target = ["--out", os.fspath(out / "data.buf")]
    env = {**os.environ, "TMPDIR": os.fspath(scratch), "MINARI_DATASETS_PATH": os.fspath(datasets)}
    command = [sys.executable, "-X", "faulthandler", "-m", "epochtrain", *RECORD]
    process = subprocess.Popen(  # faulthandler: a stack dump if it must be aborted below
        [*command, "--steps", LONG, *target],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # CI ignores it
    )
    try:
        if fmt == "minari":  # its temporary folder is made just before the recording
            _wait_for(scratch, process, "epochtrain-collect-*")
        else:  # record_dataset makes --out's folders, then records
            _wait_for(out, process)
        process.send_signal(sig)
        try:
            _, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # still running (1 CI run of many): say where
            process.send_signal(signal.SIGABRT)
            _, err = process.communicate(timeout=30)
            pytest.fail(f"the {sig.name} did not stop the collect within 60 s:\n{err[-4000:]}")
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 128 + sig, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("epochtrain: ")
    assert list(scratch.iterdir()) == []
    assert not (tmp_path / "new").exists()
    assert not datasets.exists() or [p for p in datasets.rglob("*") if p.is_file()] == []


def test_a_minari_collect_whose_recording_fails_removes_its_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # before: the error was printed and the epochtrain-collect-* folder stayed
    minari = pytest.importorskip("minari", reason="the minari extra is not installed")
    monkeypatch.setenv("MINARI_DATASETS_PATH", os.fspath(tmp_path / "minari"))
    monkeypatch.setattr(tempfile, "tempdir", os.fspath(tmp_path))
    argv = [*RECORD, "--steps", "3", "--format", "minari", "--out", "cartpole/random-v0"]
    assert main(argv) == 2  # no CartPole episode ends within 3 steps
    assert "no episode of CartPole-v1 ended" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["minari"]
    assert "cartpole/random-v0" not in minari.list_local_datasets()


def test_a_buffer_collect_whose_recording_fails_removes_the_folders_it_created(
    tmp_path: Path,
) -> None:
    # before: record_dataset made new/dir, then the error left it there
    assert main([*RECORD, "--steps", "3", "--out", os.fspath(tmp_path / "new/dir/d.buf")]) == 2
    assert list(tmp_path.iterdir()) == []


def test_an_eval_video_interrupted_while_recording_removes_the_folders_it_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before: the partial mp4 went, but record_video's new/dir stayed
    pytest.importorskip("imageio_ffmpeg", reason="the video extra is not installed")
    from epochtrain.trainer import video

    argv = ["train", "--algo", "ppo", "--max-epoch", "1", "--step-per-epoch", "256"]
    assert main([*argv, "--logdir", os.fspath(tmp_path / "runs"), "--no-progress", "--quiet"]) == 0
    (checkpoint,) = (tmp_path / "runs").glob("*/checkpoints")

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(video, "_record_episode", interrupted)
    out = tmp_path / "new" / "dir" / "episode.mp4"
    assert (
        main(["eval", os.fspath(checkpoint), "--episodes", "1", "--video", os.fspath(out)]) == 130
    )
    assert not (tmp_path / "new").exists()
