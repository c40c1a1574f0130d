"""What a writer killed with SIGKILL leaves in a checkpoint directory is removed by the next
process that takes the directory's lock (a resume of a finished run included), a live
process's files are never touched, and a run killed before its first checkpoint is told
how to start again."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from epochtrain.checkpoint import find_checkpoints, read_manifest
from epochtrain.checkpoint_files import LOCK_FILE, CheckpointLock
from epochtrain.cli import main
from tests.faults.envs import dqn_trainer

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ["train", "--algo", "ppo", "--step-per-epoch", "256", "--no-progress", "--quiet"]

# Runs a 2-epoch DQN with keep_last=1 into argv[1] and SIGKILLs itself at the second file
# deletion inside the `.trash-*` directory that the last epoch's rotation moved epoch 1 to.
KILLED_IN_LAST_ROTATION = """
import os, signal, sys
import torch
from tests.faults.envs import dqn_trainer

torch.set_num_threads(1)
real_replace, real_unlink, deletions = os.replace, os.unlink, []
def replace(src, dst, **kwargs):
    real_replace(src, dst, **kwargs)
    if os.path.basename(os.fspath(dst)).startswith(".trash-"):
        deletions.append(0)  # armed: the rotation's deletion starts
def unlink(path, *args, **kwargs):
    if deletions:
        deletions.append(path)
        if len(deletions) == 3:
            os.kill(os.getpid(), signal.SIGKILL)
    return real_unlink(path, *args, **kwargs)
os.replace, os.unlink = replace, unlink
trainer = dqn_trainer(max_epoch=2, checkpoint_dir=sys.argv[1], keep_last=1, keep_best=False)
for _ in trainer:
    pass
"""

# `epochtrain train ARGS` that SIGKILLs itself while writing its first checkpoint's buffer.
KILLED_IN_FIRST_SAVE = """
import os, signal, sys
import torch
import epochtrain.checkpoint_save as save
from epochtrain.cli import main

torch.set_num_threads(1)
real = save._write_file
def write(path, obj):
    if path.name == "buffer.pt":
        os.kill(os.getpid(), signal.SIGKILL)
    return real(path, obj)
save._write_file = write
sys.exit(main(sys.argv[1:]))
"""


def run_python(code: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, timeout=300
    )


def hidden(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def test_a_kill_while_the_last_epoch_rotates_leaves_trash_that_resuming_the_finished_run_removes(
    tmp_path: Path,
) -> None:
    """Reproduced with `epochtrain train --max-epoch 2 --keep-last 1 --no-keep-best` killed
    in the rotation, then `train --resume`: the finished run saved nothing, so nothing
    removed the `.trash-epoch_000001-PID` directory (half of a checkpoint: buffer.pt)."""
    root = tmp_path / "ckpts"
    proc = run_python(KILLED_IN_LAST_ROTATION, str(root))
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    trash = [name for name in hidden(root) if name.startswith(".trash-epoch_000001-")]
    assert trash and (root / trash[0]).is_dir()  # the kill left it, half deleted
    assert [p.name for p in find_checkpoints(root)] == ["epoch_000002"]

    resumed = dqn_trainer(max_epoch=2, checkpoint_dir=str(root), keep_last=1, keep_best=False,
                          resume_from=str(root))  # fmt: skip
    assert list(resumed) == []  # the run had finished: no epoch, no save
    assert hidden(root) == [LOCK_FILE]  # the trash is gone; the lock is this trainer's
    assert read_manifest(root / "epoch_000002")["epoch"] == 2  # and the checkpoint intact
    resumed.close()


def test_taking_the_lock_removes_what_dead_writers_left_and_keeps_a_live_processs_files(
    tmp_path: Path, dead_pid: int, live_pid: int
) -> None:
    trainer = dqn_trainer(max_epoch=1, checkpoint_dir=str(tmp_path))
    trainer.run()
    trainer.close()
    del trainer
    complete = tmp_path / "epoch_000001"
    host = socket.gethostname()
    for pid in (dead_pid, live_pid):
        shutil.copytree(complete, tmp_path / f".trash-epoch_000000-{pid}")
        (tmp_path / f".tmp-epoch_000009-{pid}").mkdir()  # a save cut before its manifest
        (tmp_path / f".lock.stale-{host}-{pid}").write_text("{}")
    shutil.copytree(complete, tmp_path / f".tmp-epoch_000002-{dead_pid}")  # cut mid-swap
    (tmp_path / f".lock.stale-{dead_pid}").write_text("{}")  # as older versions named it
    (tmp_path / f".lock.stale-elsewhere-{dead_pid}").write_text("{}")  # another host's

    lock = CheckpointLock(tmp_path)
    lock.acquire()
    live = [f".lock.stale-{host}-{live_pid}", f".tmp-epoch_000009-{live_pid}"]
    live.append(f".trash-epoch_000000-{live_pid}")
    assert hidden(tmp_path) == sorted([LOCK_FILE, f".lock.stale-elsewhere-{dead_pid}", *live])
    # the complete copy of the dead writer's swap was put back, not removed
    assert [p.name for p in find_checkpoints(tmp_path)] == ["epoch_000001", "epoch_000002"]
    lock.release()


def test_resuming_a_run_killed_before_its_first_checkpoint_names_the_command_that_starts_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reproduced: `train --resume RUN_DIR` exited 2 with "holds no complete checkpoint",
    without saying that the run must start again, nor how."""
    monkeypatch.chdir(tmp_path)
    started = [*TRAIN, "--max-epoch", "1", "--logdir", "runs", "--stop-at", "none"]
    proc = run_python(KILLED_IN_FIRST_SAVE, *started, cwd=tmp_path)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert not find_checkpoints(run_dir / "checkpoints")
    relative = Path("runs") / run_dir.name

    for given in (relative, relative / "checkpoints"):
        assert main(["train", "--resume", str(given)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "nothing to resume" in err
        assert "Start it again without --resume" in err
        command = err.rpartition("without --resume")[2].partition(": ")[2]
        assert shlex.split(command) == [
            "epochtrain", "train", "--config", str(relative / "spec.toml"),
            "--logdir", "runs",
        ]  # fmt: skip

    # the command named starts the run again, in a run directory of its own
    assert main(shlex.split(command)[1:]) == 0
    (new_run,) = set((tmp_path / "runs").iterdir()) - {run_dir}
    assert [p.name for p in find_checkpoints(new_run / "checkpoints")] == ["epoch_000001"]
