"""Raising envs (Sync and Async) and two writers of one checkpoint_dir."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys
from itertools import islice
from pathlib import Path

import pytest

from epochtrain.checkpoint import CheckpointError, find_checkpoints, read_manifest
from epochtrain.checkpoint_files import LOCK_FILE
from epochtrain.errors import EnvError
from epochtrain.logger import JSONLLogger
from tests.faults.envs import dqn_trainer, faulty_vec


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_raising_env_names_sub_env_env_and_step_closes_the_envs_and_keeps_the_checkpoint(
    tmp_path: Path, mode: str
) -> None:
    envs = faulty_vec(3, bad=2, fault="raise", fault_at=30, mode=mode)
    trainer = dqn_trainer(
        envs, checkpoint_dir=str(tmp_path), step_per_epoch=60, step_per_collect=30
    )
    next(trainer)
    with pytest.raises(EnvError) as info:
        next(trainer)
    message = str(info.value)
    env_id = info.value.env_id  # a worker's env is not visible from the main process
    assert env_id == ("FaultyEnv" if mode == "sync" else "AsyncVectorEnv")
    assert (
        f"sub-env 2 of {env_id!r} raised RuntimeError: the simulator crashed in step()" in message
    )
    assert "env step 87" in message and "epoch 2" in message and "epoch_000001" in message
    assert isinstance(info.value.__cause__, RuntimeError)
    assert info.value.sub_env == 2
    assert envs.closed
    assert not multiprocessing.active_children()  # no worker left, not even a zombie
    assert read_manifest(find_checkpoints(tmp_path)[-1])["epoch"] == 1


def test_a_second_trainer_on_the_same_checkpoint_dir_is_refused(tmp_path: Path) -> None:
    first = dqn_trainer(checkpoint_dir=str(tmp_path))
    next(first)
    second = dqn_trainer(checkpoint_dir=str(tmp_path))
    with pytest.raises(CheckpointError, match="in use by another trainer of this process"):
        next(second)
    assert second.state.epoch == 0
    list(first)  # the first run finishes and releases the directory
    assert not (tmp_path / LOCK_FILE).exists()
    assert [p.name for p in find_checkpoints(tmp_path)] == [
        "epoch_000001", "epoch_000002", "epoch_000003",
    ]  # fmt: skip


def test_loading_the_checkpoint_of_a_run_another_trainer_writes_is_refused_and_keeps_its_log(
    tmp_path: Path,
) -> None:
    # A second trainer opening a live run (a sweep started twice, a Tune actor set up for a
    # trial that runs elsewhere) would rewind the run's log to its checkpoint.
    log = tmp_path / "log.jsonl"
    first = dqn_trainer(
        checkpoint_dir=str(tmp_path / "ckpt"),
        checkpoint_every=2,
        max_epoch=4,
        logger=JSONLLogger(log),
    )
    list(islice(first, 3))  # checkpoint at epoch 2, epoch 3 logged after it
    written = log.read_text()
    assert '"scope": "info", "step": 3' in written
    second = dqn_trainer(
        checkpoint_dir=str(tmp_path / "ckpt"), max_epoch=4, logger=JSONLLogger(log)
    )
    with pytest.raises(CheckpointError, match="in use by another trainer of this process"):
        second.load_checkpoint(tmp_path / "ckpt")
    assert log.read_text() == written
    assert second.state.epoch == 0
    del first
    second.load_checkpoint(tmp_path / "ckpt")  # the writer has gone: the run resumes
    assert second.state.epoch == 2
    assert '"scope": "info", "step": 3' not in log.read_text()  # the resumed run writes it


def test_a_live_writer_process_is_named_and_a_dead_ones_lock_is_taken_over(
    tmp_path: Path,
) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = {"pid": other.pid, "host": socket.gethostname(), "token": "x", "created": "then"}
        (tmp_path / LOCK_FILE).write_text(json.dumps(lock))
        trainer = dqn_trainer(checkpoint_dir=str(tmp_path))
        with pytest.raises(CheckpointError, match=f"process {other.pid} on host") as info:
            next(trainer)
        assert str(tmp_path / LOCK_FILE) in str(info.value)
    finally:
        other.kill()
        other.wait()
    # the process is gone: its lock is stale and taken over
    next(trainer)
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert [p.name for p in find_checkpoints(tmp_path)] == ["epoch_000001"]


def test_a_fresh_run_into_another_runs_checkpoint_dir_is_refused_before_any_work(
    tmp_path: Path,
) -> None:
    """Reproduced with a spec file that fixes checkpoint_dir, run twice: the second run's
    epoch_000002 replaced the first run's and rotation kept a mix of the two runs."""
    first = dqn_trainer(checkpoint_dir=str(tmp_path), max_epoch=3, keep_last=2, keep_best=False)
    first.run()
    first.close()
    del first
    kept = {p.name: read_manifest(p)["env_step"] for p in find_checkpoints(tmp_path)}
    assert list(kept) == ["epoch_000002", "epoch_000003"]
    second = dqn_trainer(checkpoint_dir=str(tmp_path), max_epoch=2, keep_last=2, keep_best=False)
    with pytest.raises(CheckpointError, match="holds the checkpoints of another run") as info:
        next(second)
    assert "epoch_000002, epoch_000003" in str(info.value) and "resume_from" in str(info.value)
    assert second.state.env_step == 0  # refused before any work
    assert {p.name: read_manifest(p)["env_step"] for p in find_checkpoints(tmp_path)} == kept
    second.close()
    del second
    # continuing that run is what the message offers, and it works
    resumed = dqn_trainer(checkpoint_dir=str(tmp_path), resume_from=str(tmp_path), max_epoch=4)
    assert resumed.run().epoch == 4
    resumed.close()
