"""Saves and rotations interrupted at every step (Ctrl-C, SIGINT, SIGKILL) never lose a
complete checkpoint, and their leftovers are cleaned by the next save."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from epochtrain.checkpoint import find_checkpoints, read_manifest, resolve_checkpoint
from epochtrain.checkpoint_files import deferred_signals
from tests.faults.envs import dqn_trainer
from tests.faults.interrupts import interrupt_at_call

ROOT = Path(__file__).resolve().parents[2]
FS_CALLS = ((os, "replace"), (os, "fsync"), (os, "mkdir"), (shutil, "rmtree"))


def leftovers(root: Path) -> list[str]:
    return sorted(
        p.name for p in root.iterdir() if p.name.startswith((".tmp-", ".old-", ".trash-"))
    )


@pytest.mark.parametrize("when", ["before", "after"])
def test_ctrl_c_at_every_filesystem_call_of_a_save_over_a_checkpoint_keeps_one(
    tmp_path: Path, when: str
) -> None:
    trainer = dqn_trainer()
    next(trainer)
    path = trainer.save_checkpoint(tmp_path / "ckpt")
    next(trainer)
    n, interrupted = 1, 0
    while True:
        with interrupt_at_call(n, when, FS_CALLS) as count:
            try:
                trainer.save_checkpoint(path)
                done = True
            except KeyboardInterrupt:
                done, interrupted = False, interrupted + 1
        # at every moment the path holds a complete checkpoint, old (1) or new (2)
        assert read_manifest(resolve_checkpoint(path))["epoch"] in (1, 2), f"call {n}"
        # and an interrupted save leaves no temp dir of its own (an .old-* copy of a
        # complete checkpoint, mid-swap, is put back by the next save or load)
        assert not [name for name in leftovers(tmp_path) if name.startswith(".tmp-")], n
        if done:
            break
        n += 1
    assert interrupted >= 5 and count[0] < n  # every call of the save was interrupted once
    assert read_manifest(path)["epoch"] == 2
    assert not leftovers(tmp_path)  # the last save cleaned what the interrupted ones left


@pytest.mark.parametrize("when", ["before", "after"])
def test_ctrl_c_at_every_filesystem_call_of_a_rotation_leaves_only_complete_epochs(
    tmp_path: Path, when: str
) -> None:
    root = tmp_path / "ckpts"
    n = 1
    while True:
        trainer = dqn_trainer(max_epoch=3, checkpoint_dir=str(root), keep_last=1, keep_best=False)
        next(trainer)
        next(trainer)  # epoch 2 replaced epoch 1
        with interrupt_at_call(n, when, FS_CALLS):
            try:
                next(trainer)
                done = True
            except KeyboardInterrupt:
                done = False
        for entry in root.iterdir():
            if entry.name.startswith("epoch_"):
                read_manifest(entry)  # never a torn epoch_* directory
        assert [p.name for p in find_checkpoints(root)][-1] in ("epoch_000002", "epoch_000003")
        trainer._checkpoint_lock.release()
        if done:
            break
        # the next save (a resumed run) cleans what the interrupted one left
        resumed = dqn_trainer(max_epoch=4, checkpoint_dir=str(root), resume_from=str(root))
        next(resumed)
        assert not leftovers(root)
        resumed._checkpoint_lock.release()
        shutil.rmtree(root)
        n += 1
    assert n > 5


# Saves over ``path`` in a loop; the os.replace call number argv[3] sends the main thread
# argv[2] (SIGKILL or SIGINT) from inside the swap.
WORKER = """
import os, signal, sys
import torch
from tests.faults.envs import dqn_trainer

torch.set_num_threads(1)
# Ctrl-C as an interactive Python has it: a shell without job control starts background
# commands with SIGINT ignored, which a held signal rightly leaves ignored
signal.signal(signal.SIGINT, signal.default_int_handler)
path, sig, at = sys.argv[1], getattr(signal, sys.argv[2]), int(sys.argv[3])
trainer = dqn_trainer()
next(trainer)
trainer.save_checkpoint(path)
next(trainer)
real, calls = os.replace, [0]
def replace(src, dst):
    calls[0] += 1
    if calls[0] == at:
        # to this thread: os.kill(getpid()) may land on another thread, whose handler can
        # run after the swap under load (CI once saw the save finish with exit code 0)
        signal.raise_signal(sig)
    return real(src, dst)
os.replace = replace
trainer.last_checkpoint = None  # forget the first save: what is printed is the second's
try:
    trainer.save_checkpoint(path)
except KeyboardInterrupt:
    print(trainer.last_checkpoint)  # the new checkpoint is in place: it is the last one
    sys.exit(130)
"""


@pytest.mark.parametrize(("sig", "at"), [("SIGKILL", 1), ("SIGKILL", 2), ("SIGINT", 1)])
def test_a_signal_inside_the_swap_of_a_save_never_leaves_the_path_empty(
    tmp_path: Path, sig: str, at: int
) -> None:
    path = tmp_path / "ckpt"
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, str(path), sig, str(at)],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode in (-signal.SIGKILL, 130, 0), proc.stderr.decode()[-2000:]
    # the checkpoint is there, or put back from the leftovers by the next load
    manifest = read_manifest(resolve_checkpoint(path))
    assert manifest["epoch"] in (1, 2)
    if sig == "SIGINT":  # held during the swap: delivered after it, the new one is in place
        assert manifest["epoch"] == 2 and not leftovers(tmp_path)
        assert proc.returncode == 130
        assert proc.stdout.decode().strip() == str(path)  # what the CLI names for --resume


def test_a_sigint_held_during_a_swap_stays_ignored_where_sigint_was_ignored() -> None:
    # a background job of a shell without job control starts with SIGINT ignored
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with deferred_signals():
            assert signal.getsignal(signal.SIGINT) != signal.SIG_IGN  # held meanwhile
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # no KeyboardInterrupt
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with pytest.raises(KeyboardInterrupt), deferred_signals():
            signal.raise_signal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
