"""A training process killed with SIGKILL while writing a checkpoint leaves the previous
checkpoint loadable and the run resumable (to the same result as an uninterrupted run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from epochtrain.checkpoint import find_checkpoints, read_manifest
from tests.trainer.test_base import comparable
from tests.trainer.tiny import build

ROOT = Path(__file__).resolve().parents[1]

# Trains with a checkpoint every epoch; while writing the second one (policy.pt is on
# disk, the rest is not) it signals the test through a file and waits to be killed.
WORKER = """
import sys, time
from pathlib import Path
import torch
import epochtrain.checkpoint_save as ck
from tests.trainer.tiny import build

torch.set_num_threads(1)
root, signal_file = Path(sys.argv[1]), Path(sys.argv[2])
write = ck._write_file

def write_then_hang(path, obj):
    info = write(path, obj)
    if path.name == "policy.pt" and ck.find_checkpoints(root):
        signal_file.write_text("writing")
        time.sleep(120)
    return info

ck._write_file = write_then_hang
build("off", max_epoch=3, checkpoint_dir=root).run()
"""


def test_sigkill_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path: Path) -> None:
    root, signal_file = tmp_path / "ckpts", tmp_path / "signal"
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(root), str(signal_file)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not signal_file.exists():
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the worker never reached the second checkpoint"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        if proc.stderr is not None:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert [p.name for p in find_checkpoints(root)] == ["epoch_000001"]
    assert list(root.glob(".tmp-epoch_000002-*"))  # the interrupted write, never read
    assert read_manifest(root / "epoch_000001")["epoch"] == 1

    full = [comparable(s) for s in build("off", max_epoch=3)]
    resumed = build("off", max_epoch=3, checkpoint_dir=root, resume_from=root)
    assert resumed.state.epoch == 1
    assert [comparable(s) for s in resumed] == full[1:]
    assert not list(root.glob(".tmp-*"))  # the next save removed the leftover
    assert [p.name for p in find_checkpoints(root)][-1] == "epoch_000003"
