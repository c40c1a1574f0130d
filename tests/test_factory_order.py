"""make_trainer: every check that needs no data runs before an offline dataset is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochtrain.data import ReplayBuffer
from epochtrain.factory import make_trainer
from epochtrain.spec import RunSpec
from epochtrain.trainer import OfflineTrainer

_ORIGINAL_LOAD = ReplayBuffer.load


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The dataset paths ``ReplayBuffer.load`` was asked to read (it still reads them)."""
    seen: list[str] = []

    def load(cls: type[ReplayBuffer], path: Any, **kwargs: Any) -> ReplayBuffer:
        seen.append(str(path))
        return _ORIGINAL_LOAD(path, **kwargs)

    monkeypatch.setattr(ReplayBuffer, "load", classmethod(load))
    return seen


def _cartpole_dataset(path: Path) -> str:
    buffer = ReplayBuffer(10, 1)
    obs = np.zeros((1, 4), dtype=np.float32)
    for _ in range(5):
        no = np.zeros(1, dtype=bool)
        buffer.add(obs, np.zeros(1, dtype=np.int64), np.ones(1), no, no, obs)
    buffer.save(path)
    return str(path)


def test_a_policy_that_cannot_act_on_the_env_is_refused_before_the_dataset_is_read(
    loads: list[str],
) -> None:
    spec = RunSpec.tuned("td3bc", "Pendulum-v1").replace(  # RunSpec.tuned refuses CartPole
        env_id="CartPole-v1", dataset="/missing/data.pt"
    )
    with pytest.raises(ValueError, match="td3bc is for continuous actions"):
        make_trainer(spec)
    assert loads == []


def test_a_device_the_policy_cannot_use_is_refused_before_the_dataset_is_read(
    loads: list[str], tmp_path: Path
) -> None:
    dataset = _cartpole_dataset(tmp_path / "data.pt")
    spec = RunSpec.tuned("bc", "CartPole-v1").with_overrides({"dataset": dataset, "device": "meta"})
    with pytest.raises(ValueError, match="device='meta'"):
        make_trainer(spec)
    assert loads == []


def test_a_bad_hook_or_callback_is_refused_before_the_dataset_is_read_a_good_one_reads_it(
    loads: list[str], tmp_path: Path
) -> None:
    dataset = _cartpole_dataset(tmp_path / "data.pt")
    spec = RunSpec.tuned("bc", "CartPole-v1").with_overrides({"dataset": dataset})
    not_a_hook: Any = object()
    with pytest.raises(TypeError, match=r"hooks\[0\] must be a TrainerHook"):
        make_trainer(spec, hooks=[not_a_hook])
    not_callable: Any = 3
    with pytest.raises(ValueError, match="train_fn must be callable"):
        make_trainer(spec, train_fn=not_callable)
    assert loads == []
    with make_trainer(spec) as trainer:
        assert isinstance(trainer, OfflineTrainer)
        assert trainer.buffer.n_valid == 5
    assert loads == [dataset]


def test_a_checkpoint_dir_that_is_a_file_is_refused_before_the_dataset_is_read(
    loads: list[str], tmp_path: Path
) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    spec = RunSpec.tuned("bc", "CartPole-v1").with_overrides(
        {"dataset": _cartpole_dataset(tmp_path / "data.pt"), "checkpoint_dir": str(not_a_dir)}
    )
    with pytest.raises(ValueError, match="checkpoint_dir must be a directory"):
        make_trainer(spec)
    assert loads == []
