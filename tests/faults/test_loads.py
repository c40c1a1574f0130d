"""Failed loads change nothing; broken, hand-edited and malicious files are refused with a
CheckpointError naming the file; buffer files follow the fill level."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from epochtrain import JSONLLogger, ReplayBuffer
from epochtrain.checkpoint import MANIFEST, CheckpointError, read_manifest
from epochtrain.data import Collector
from epochtrain.trainer import OffpolicyTrainer
from epochtrain.trainer.params import OffpolicyParams
from tests.faults.envs import cartpole, dqn_trainer


def snapshot(trainer: Any) -> tuple[Any, ...]:
    weights = {k: v.clone() for k, v in trainer.policy.state_dict().items() if torch.is_tensor(v)}
    return weights, repr(trainer.state), trainer.train_collector.buffer.state_dict()["cursor"]


def test_a_load_that_fails_half_way_leaves_trainer_logger_and_log_file_unchanged(
    tmp_path: Path,
) -> None:
    saved = dqn_trainer()
    next(saved)
    next(saved)
    ckpt = saved.save_checkpoint(tmp_path / "ckpt")
    log = tmp_path / "log.jsonl"
    other = dqn_trainer(logger=JSONLLogger(log))
    policy = other.policy  # same networks, but a buffer of another capacity
    other.train_collector.buffer = ReplayBuffer(500, 2)
    next(other)
    before, log_before = snapshot(other), log.read_text()
    assert policy is other.policy
    with pytest.raises(CheckpointError, match="capacity"):
        other.load_checkpoint(ckpt)
    after = snapshot(other)
    assert after[1:] == before[1:]
    assert all(torch.equal(after[0][k], v) for k, v in before[0].items())
    assert log.read_text() == log_before  # the log was not truncated
    assert other.state.epoch == 1
    next(other)  # and it trains on


def rewrite_manifest(ckpt: Path, edit: Any) -> None:
    manifest = json.loads((ckpt / MANIFEST).read_text())
    edit(manifest)
    (ckpt / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["files"].pop("trainer.pt"), "no entry for 'trainer.pt'"),
        (lambda m: m.update(format_version="1"), "'format_version' must be an int"),
        (lambda m: m["files"]["policy.pt"].pop("bytes"), "needs 'bytes'"),
        (lambda m: m.update(files=[]), "'files' must be an object"),
        (lambda m: m.update(epoch=None), "'epoch' must be an int"),
        (lambda m: m["files"].update({"evil.pt": {"bytes": 1, "sha256": "0" * 64}}), "evil.pt"),
    ],
)
def test_a_hand_edited_manifest_is_refused_with_a_checkpoint_error_naming_it(
    tmp_path: Path, edit: Any, message: str
) -> None:
    trainer = dqn_trainer()
    next(trainer)
    ckpt = trainer.save_checkpoint(tmp_path / "ckpt")
    rewrite_manifest(ckpt, edit)
    with pytest.raises(CheckpointError, match=message) as info:
        dqn_trainer().load_checkpoint(ckpt)
    assert str(ckpt / MANIFEST) in str(info.value)


class Evil:
    """Unpickling this runs code: it creates the file ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


def reseal(ckpt: Path, name: str) -> None:
    """Fix the manifest's size and hash of ``name``, as an attacker sharing a file would."""
    data = (ckpt / name).read_bytes()
    rewrite_manifest(
        ckpt,
        lambda m: m["files"][name].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest()),
    )


@pytest.mark.parametrize("name", ["trainer.pt", "policy.pt", "buffer.pt"])
def test_a_checkpoint_file_that_would_run_code_is_refused(tmp_path: Path, name: str) -> None:
    trainer = dqn_trainer()
    next(trainer)
    ckpt = trainer.save_checkpoint(tmp_path / "ckpt")
    marker = tmp_path / "pwned"
    torch.save({"payload": Evil(str(marker))}, ckpt / name)
    reseal(ckpt, name)
    with pytest.raises(CheckpointError, match="refused") as info:
        dqn_trainer().load_checkpoint(ckpt)
    assert name in str(info.value)
    assert not marker.exists()


def test_an_env_snapshot_that_would_run_code_is_refused(tmp_path: Path) -> None:
    trainer = dqn_trainer()
    next(trainer)
    ckpt = trainer.save_checkpoint(tmp_path / "ckpt")
    marker = tmp_path / "pwned"
    state = torch.load(ckpt / "trainer.pt", weights_only=False)
    state["train_collector"]["env"] = pickle.dumps(Evil(str(marker)))
    torch.save(state, ckpt / "trainer.pt")
    reseal(ckpt, "trainer.pt")
    fresh = dqn_trainer()
    with pytest.raises(CheckpointError, match="env snapshot is refused"):
        fresh.load_checkpoint(ckpt)
    assert not marker.exists() and fresh.state.epoch == 0


def test_a_buffer_or_dataset_file_that_would_run_code_is_refused(tmp_path: Path) -> None:
    marker, path = tmp_path / "pwned", tmp_path / "data.buf"
    torch.save({"format_version": 1, "payload": Evil(str(marker))}, path)
    with pytest.raises(CheckpointError, match="refused") as info:
        ReplayBuffer.load(path)
    assert str(path) in str(info.value) and not marker.exists()


def test_a_truncated_buffer_file_is_a_checkpoint_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "data.buf"
    path.write_bytes(b"PK\x03\x04torn")
    with pytest.raises(CheckpointError, match="cannot be read") as info:
        ReplayBuffer.load(path)
    assert str(path) in str(info.value)


def test_a_buffer_file_holds_the_filled_rows_not_the_capacity(tmp_path: Path) -> None:
    envs = cartpole(1)
    buffer = ReplayBuffer(1_000_000, 1)
    envs.action_space.seed(0)
    collector = Collector(_NoPolicy(), envs, buffer)
    collector.reset(seed=0)
    collector.collect(n_step=10_000, random=True)
    buffer.save(tmp_path / "big.buf")
    size = (tmp_path / "big.buf").stat().st_size
    per_row = 2 * 4 * 4 + 8 + 4 + 3  # obs, obs_next, act, rew, three flags
    assert size < 1.5 * 10_000 * per_row, size  # the full capacity would be ~47 MB
    loaded = ReplayBuffer.load(tmp_path / "big.buf")
    assert len(loaded) == 10_000 and loaded.capacity == 1_000_000
    assert torch.equal(loaded.rollout().obs, buffer.rollout().obs)


class _NoPolicy:
    def act(self, obs: Any, deterministic: bool = False) -> Any:
        raise AssertionError

    def to_tensor(self, obs: Any) -> Any:
        return obs


def test_weights_only_load_keeps_exact_resume(tmp_path: Path) -> None:
    """The allow-list covers everything a checkpoint holds (stats, numpy RNG states)."""
    trainer = dqn_trainer()
    next(trainer)
    ckpt = trainer.save_checkpoint(tmp_path / "ckpt")
    buf = io.BytesIO((ckpt / "trainer.pt").read_bytes())
    assert torch.serialization.get_unsafe_globals_in_checkpoint(buf)  # not plain tensors
    resumed = dqn_trainer(resume_from=str(ckpt))
    assert resumed.state == trainer.state
    assert read_manifest(ckpt)["epoch"] == 1
    assert isinstance(resumed, OffpolicyTrainer) and OffpolicyParams
