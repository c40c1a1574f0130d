"""A buffer of nested dict observations (a dict of dicts, as a custom policy's Dict space
of Dict spaces gives them) reloads: through ``state_dict`` (what a checkpoint holds) and
through its file. The state checks looked one level deep and refused it ("field 'obs.a'
is a dict, not a torch.Tensor"), so such a run could not resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from epochtrain.data import ReplayBuffer
from epochtrain.data.buffer_storage import check_state
from epochtrain.errors import CheckpointError

NUM_ENVS = 2


def nested_obs(rng: np.random.Generator) -> dict[str, Any]:
    """One step's observations of ``NUM_ENVS`` envs: two levels of dicts."""
    return {
        "arm": {
            "joints": rng.normal(size=(NUM_ENVS, 3)).astype(np.float32),
            "gripper": rng.integers(0, 4, size=NUM_ENVS),
        },
        "camera": rng.integers(0, 256, size=(NUM_ENVS, 2, 2), dtype=np.uint8),
    }


def filled(capacity: int = 20, steps: int = 7) -> ReplayBuffer:
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(capacity, NUM_ENVS)
    obs = nested_obs(rng)
    for t in range(steps):
        obs_next = nested_obs(rng)
        ended = np.array([t == 3, False])
        buffer.add(
            obs,
            rng.integers(0, 2, size=NUM_ENVS),
            rng.normal(size=NUM_ENVS),
            ended,
            np.zeros(NUM_ENVS, dtype=bool),
            obs_next,
        )
        obs = obs_next
    return buffer


def assert_same(left: Any, right: Any, where: str = "batch") -> None:
    if isinstance(left, dict):
        assert isinstance(right, dict) and list(left) == list(right), where
        for key in left:
            assert_same(left[key], right[key], f"{where}.{key}")
    else:
        assert isinstance(left, torch.Tensor) and torch.equal(left, right), where


def assert_same_samples(saved: ReplayBuffer, loaded: ReplayBuffer) -> None:
    assert len(loaded) == len(saved) and loaded.n_valid == saved.n_valid
    assert_same(loaded.rollout().obs, saved.rollout().obs)
    for n_step in (1, 3):
        torch.manual_seed(5)
        expected = saved.sample(6, n_step=n_step)
        torch.manual_seed(5)
        got = loaded.sample(6, n_step=n_step)
        for field in ("obs", "obs_next", "act", "rew", "terminated", "truncated"):
            assert_same(getattr(got, field), getattr(expected, field), field)


def test_a_nested_dict_obs_buffer_reloads_from_its_state_dict() -> None:
    buffer = filled()
    loaded = ReplayBuffer(20, NUM_ENVS)
    loaded.load_state_dict(buffer.state_dict())
    assert_same_samples(buffer, loaded)
    loaded.load_state_dict(loaded.state_dict())  # allocated: the same fields, loaded again
    assert_same_samples(buffer, loaded)


def test_a_nested_dict_obs_buffer_reloads_from_its_file(tmp_path: Path) -> None:
    buffer = filled(capacity=8, steps=7)  # 4 rows: a ring that has wrapped
    buffer.save(tmp_path / "buffer.pt")
    assert_same_samples(buffer, ReplayBuffer.load(tmp_path / "buffer.pt"))


def test_a_nested_leaf_that_is_no_tensor_or_misshaped_is_named() -> None:
    """The checks reach every level: a bad leaf two levels down is named by its path."""
    state = filled().state_dict()
    storage = state["storage"]
    check_state(state, capacity=20, num_envs=NUM_ENVS, fields=None)

    def with_leaf(field: str, value: Any) -> dict[str, Any]:
        obs = {**storage[field], "arm": {**storage[field]["arm"], "joints": value}}
        return {**state, "storage": {**storage, field: obs}}

    joints = storage["obs"]["arm"]["joints"]
    cases = [
        (with_leaf("obs", joints.numpy()), r"field 'obs\.arm\.joints' is a ndarray"),
        (with_leaf("obs_next", joints[:, :1]), r"fields \['obs_next\.arm\.joints'\] are not"),
        (with_leaf("obs_next", joints[..., :2]), r"field 'obs_next\.arm\.joints' has entries"),
        (with_leaf("obs", {"x": joints}), r"'obs' and 'obs_next' are not alike"),
        (with_leaf("obs", {}), r"field 'obs\.arm\.joints' is a dict"),
    ]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            check_state(bad, capacity=20, num_envs=NUM_ENVS, fields=None)


def test_a_damaged_nested_buffer_file_is_refused_naming_the_leaf(tmp_path: Path) -> None:
    state = filled().state_dict()
    state["storage"]["obs_next"]["arm"]["gripper"] = [0, 1]
    torch.save(state, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=r"'obs_next\.arm\.gripper' is a list"):
        ReplayBuffer.load(tmp_path / "bad.pt")
