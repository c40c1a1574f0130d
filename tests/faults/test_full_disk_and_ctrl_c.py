"""A full disk fails a save with a CheckpointError and keeps the previous checkpoint;
Ctrl-C leaves the trainer at its last complete epoch (Python) or exits 130 (CLI)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochtrain.checkpoint import CheckpointError, find_checkpoints, read_manifest
from tests.faults.envs import dqn_trainer
from tests.trainer.test_base import comparable

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs when this process may mount one (root), else a plain directory; the
    test fills it up to the last few kilobytes either way."""
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield mount
    finally:
        if mounted:
            subprocess.run(["umount", str(mount)], check=False)


def fill(disk: Path, leave: int) -> None:
    stat = os.statvfs(disk)
    free = stat.f_bavail * stat.f_frsize
    with (disk / "filler").open("wb") as f:
        f.truncate(0)
        f.write(b"\0" * max(0, free - leave))


def wait_for(proc: subprocess.Popen[bytes], root: Path, pattern: str) -> None:
    """Until ``root`` holds a path matching ``pattern``; fails if ``proc`` ends first."""
    deadline = time.monotonic() + 300
    while not _found(root, pattern):
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, f"no {pattern} in {root} within 300 s"
        time.sleep(0.01)


def _found(root: Path, pattern: str) -> bool:
    try:
        return any(root.glob(pattern))
    except FileNotFoundError:  # a directory the glob entered was renamed meanwhile (a save)
        return False


def test_a_full_disk_fails_the_save_naming_the_file_and_keeps_the_previous_checkpoint(
    small_disk: Path,
) -> None:
    if os.statvfs(small_disk).f_blocks * os.statvfs(small_disk).f_frsize > 1 << 30:
        pytest.fail("no small tmpfs here: test_a_file_size_limit_... covers this machine")
    trainer = dqn_trainer(checkpoint_dir=str(small_disk / "ckpts"))
    next(trainer)
    fill(small_disk, leave=8 * 1024)
    with pytest.raises(CheckpointError, match="No space left on device") as info:
        next(trainer)
    assert str(small_disk / "ckpts") in str(info.value)
    assert [p.name for p in find_checkpoints(small_disk / "ckpts")] == ["epoch_000001"]
    assert read_manifest(small_disk / "ckpts" / "epoch_000001")["epoch"] == 1
    assert not [p for p in (small_disk / "ckpts").iterdir() if p.name.startswith(".tmp-")]


def test_a_full_disk_while_a_video_is_encoded_is_enospc_and_keeps_the_earlier_video(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.statvfs(small_disk).f_blocks * os.statvfs(small_disk).f_frsize > 1 << 30:
        pytest.fail("no small tmpfs here: tests/trainer/test_video.py's FullDisk covers this")
    pytest.importorskip("imageio_ffmpeg", reason="the video extra is not installed")
    from epochtrain.trainer.video import record_video, whole_mp4

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    trainer = dqn_trainer()
    path = record_video(trainer.policy, "CartPole-v1", small_disk / "v.mp4", max_steps=100)
    before = path.read_bytes()
    assert whole_mp4(path)
    for leave in (0, len(before) // 2):  # ffmpeg dies mid-stream / cannot write the index
        (small_disk / "filler").unlink(missing_ok=True)
        fill(small_disk, leave=leave)
        with pytest.raises(OSError, match="No space left on device for the video"):
            record_video(trainer.policy, "CartPole-v1", path, max_steps=100)
        assert path.read_bytes() == before
        assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "v.mp4"]


# Saves once, then lowers RLIMIT_FSIZE below a checkpoint's size and saves over it.
LIMITED = """
import resource, signal, sys
import torch
from epochtrain.checkpoint import CheckpointError
from tests.faults.envs import dqn_trainer

torch.set_num_threads(1)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
trainer = dqn_trainer()
next(trainer)
trainer.save_checkpoint(sys.argv[1])
next(trainer)
resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
try:
    trainer.save_checkpoint(sys.argv[1])
except CheckpointError as exc:
    print(exc)
    sys.exit(3)
"""


def test_a_file_size_limit_fails_the_save_with_a_checkpoint_error_and_keeps_the_old_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ckpt"
    proc = subprocess.run(
        [sys.executable, "-c", LIMITED, str(path)], cwd=ROOT, capture_output=True, timeout=120
    )
    assert proc.returncode == 3, proc.stderr.decode()[-2000:]
    out = proc.stdout.decode()
    assert "cannot write checkpoint file" in out and str(path.parent) in out
    assert "File too large" in out
    assert read_manifest(path)["epoch"] == 1


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_ctrl_c_inside_an_epoch_leaves_the_last_complete_epoch_and_save_works(
    tmp_path: Path, prioritized: bool
) -> None:
    # prioritized: the epoch's priority updates of older rows are undone as well
    full = [comparable(s) for s in dqn_trainer(prioritized=prioritized)]
    trainer = dqn_trainer(prioritized=prioritized)
    next(trainer)
    collect, calls = trainer.train_collector.collect, [0]

    def interrupted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        if calls[0] == 3:  # in the middle of epoch 2
            raise KeyboardInterrupt
        return collect(*args, **kwargs)

    setattr(trainer.train_collector, "collect", interrupted)  # noqa: B010
    with pytest.raises(KeyboardInterrupt):
        next(trainer)
    assert trainer.state.epoch == 1 and calls[0] == 3
    path = trainer.save_checkpoint(tmp_path / "after-ctrl-c")
    assert read_manifest(path)["epoch"] == 1
    setattr(trainer.train_collector, "collect", collect)  # noqa: B010
    # the rolled-back trainer continues exactly as the uninterrupted run
    assert [comparable(s) for s in trainer] == full[1:]
    resumed = dqn_trainer(prioritized=prioritized, resume_from=str(path))
    assert [comparable(s) for s in resumed] == full[1:]


def test_ctrl_c_between_epochs_names_the_last_checkpoint(tmp_path: Path) -> None:
    # outside an epoch's guarded part (here: while its stats are logged, before its
    # checkpoint) the interrupt still carries the last checkpoint written, for the CLI
    trainer = dqn_trainer(checkpoint_dir=str(tmp_path / "ckpts"))
    log_info, calls = trainer.logger.log_info_data, [0]

    def interrupted(*args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt
        log_info(*args, **kwargs)

    setattr(trainer.logger, "log_info_data", interrupted)  # noqa: B010
    with pytest.raises(KeyboardInterrupt) as info:
        trainer.run()
    (epoch_1,) = find_checkpoints(tmp_path / "ckpts")
    notes = [n for n in getattr(info.value, "__notes__", []) if "last checkpoint" in n]
    assert notes == [f"epochtrain: last checkpoint: {epoch_1}"]


@pytest.mark.parametrize("own_dir", [False, True])
def test_ctrl_c_before_a_resumed_run_writes_names_the_checkpoint_it_resumed_from(
    tmp_path: Path, own_dir: bool
) -> None:
    # a run resumed from another run's checkpoint and stopped before writing one of its own:
    # the note says "resumed from" (the CLI then must not continue the other run's directory,
    # which `--resume <its dir>` would do); resumed in its own directory it is the last one
    first = dqn_trainer(max_epoch=1, checkpoint_dir=str(tmp_path / "a"))
    first.run()
    (source,) = find_checkpoints(tmp_path / "a")
    ckpt_dir = tmp_path / ("a" if own_dir else "b")
    trainer = dqn_trainer(max_epoch=3, checkpoint_dir=str(ckpt_dir), resume_from=str(source))

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    setattr(trainer.logger, "log_info_data", interrupted)  # noqa: B010
    with pytest.raises(KeyboardInterrupt) as info:
        trainer.run()
    assert find_checkpoints(tmp_path / "a") == [source]  # nothing new written
    prefix = "epochtrain: last checkpoint: " if own_dir else "epochtrain: resumed from: "
    notes = [n for n in getattr(info.value, "__notes__", []) if n.startswith("epochtrain:")]
    assert notes == [f"{prefix}{source}"]


@pytest.mark.parametrize(
    ("sig", "status", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_ctrl_c_or_sigterm_in_epochtrain_train_exits_128_plus_the_signal_with_one_line(
    tmp_path: Path, sig: signal.Signals, status: int, word: str
) -> None:
    # SIGTERM (kill PID, a scheduler's stop) ends the run as Ctrl-C does
    proc = subprocess.Popen(
        [sys.executable, "-m", "epochtrain", "train", "--algo", "dqn", "--env", "CartPole-v1",
         "--seed", "0", "--max-epoch", "50", "--stop-at", "1e9", "--logdir", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        # as from a terminal: a job started in the background by a non-interactive shell
        # (CI, nohup ... &) inherits SIGINT as ignored, and then Ctrl-C never arrives
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        wait_for(proc, tmp_path, "**/epoch_*/manifest.json")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)  # generous: CI machines may be loaded
    finally:
        if proc.poll() is None:
            proc.kill()
    text = err.decode()
    lines = [line for line in text.replace("\r", "\n").splitlines() if "epochtrain" in line]
    assert proc.returncode == status
    assert len(lines) == 1 and "Traceback" not in text, text  # progress bars aside
    # the progress bars closed first: the line is not glued to the last bar's
    assert lines[0].startswith(f"epochtrain: {word}; last checkpoint "), lines[0]
    assert "epoch_" in lines[0] and "--resume" in lines[0]


def test_a_full_disk_ends_epochtrain_train_with_one_line_and_its_resume_command_works(
    small_disk: Path,
) -> None:
    if os.statvfs(small_disk).f_blocks * os.statvfs(small_disk).f_frsize > 1 << 30:
        pytest.skip("needs a small tmpfs to fill (mounting one needs root)")
    logdir = small_disk / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "epochtrain", "train", "--algo", "dqn", "--env", "CartPole-v1",
         "--max-epoch", "50", "--stop-at", "1e9", "--logdir", str(logdir), "--no-progress",
         "--set", "step_per_epoch=200", "--set", "episode_per_test=1", "--set", "num_test_envs=1"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for(proc, logdir, "*/checkpoints/epoch_000001")
        fill(small_disk, leave=8 * 1024)  # the next save (or log write) cannot fit
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = err.decode()
    assert proc.returncode == 1, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    last = text.strip().splitlines()[-1]
    assert last.startswith("epochtrain: error: ") and "No space left on device" in last, last
    kept, command = last.split("; last checkpoint ")[1].split("; resume with: ")
    kept_epoch = read_manifest(kept)["epoch"]
    assert kept_epoch >= 1
    assert not list(logdir.glob("*/checkpoints/.tmp-*"))  # the failed save cleaned up

    (small_disk / "filler").unlink()  # the user frees space and runs the printed command
    args = shlex.split(command)[1:]
    args[args.index("--max-epoch") + 1] = str(kept_epoch + 2)
    resumed = subprocess.run(
        [sys.executable, "-m", "epochtrain", *args], cwd=ROOT, capture_output=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr.decode()[-3000:]
    epochs = [read_manifest(p)["epoch"] for p in find_checkpoints(Path(kept).parent)]
    assert max(epochs) == kept_epoch + 2


def test_a_full_disk_ends_epochtrain_collect_with_one_line_keeping_the_other_files(
    small_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch's writer reports a full disk as ``RuntimeError: ... unexpected pos``: the line
    says what it means, the exit status is 1 (not 2: the input was fine)."""
    from epochtrain.cli import main

    if os.statvfs(small_disk).f_blocks * os.statvfs(small_disk).f_frsize > 1 << 30:
        pytest.fail("no small tmpfs here: test_io's statvfs test covers the message")
    (small_disk / "kept.txt").write_text("a file of the user's")
    fill(small_disk, leave=64 * 1024)
    out = small_disk / "pendulum.buf"
    argv = ["collect", "--env", "Pendulum-v1", "--random", "--steps", "20000", "--out", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"cannot write buffer file {str(out)!r}: No space left on device" in err
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "kept.txt"]
    assert (small_disk / "kept.txt").read_text() == "a file of the user's"
