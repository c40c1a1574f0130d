"""ReplayBuffer: ring storage per env, valid-only sampling, dict observations, persistence."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from epochtrain.data import ReplayBuffer


def _row(t: int, num_envs: int, valid: np.ndarray | None = None) -> dict[str, Any]:
    """Row ``t``: obs ``[t, env]``, rew ``10 t + env``, act ``env``; ends every 3rd row."""
    env = np.arange(num_envs)
    obs = np.stack([np.full(num_envs, t), env], axis=1).astype(np.float64)
    return {
        "obs": obs,
        "act": env.copy(),
        "rew": 10.0 * t + env,
        "terminated": np.full(num_envs, t % 3 == 2),
        "truncated": np.zeros(num_envs, dtype=bool),
        "obs_next": obs + np.array([1, 0]),
        "extras": {"value": (t + 0.5) * np.ones(num_envs), "logp": -np.ones(num_envs)},
        "valid": valid,
    }


def _filled(capacity: int, num_envs: int, n_rows: int) -> ReplayBuffer:
    buf = ReplayBuffer(capacity, num_envs)
    for t in range(n_rows):
        buf.add(**_row(t, num_envs))
    return buf


def _assert_same_rollout(a: ReplayBuffer, b: ReplayBuffer) -> None:
    ra, rb = a.rollout(), b.rollout()
    for name in ["obs", "act", "rew", "terminated", "truncated", "obs_next", "value", "valid"]:
        assert torch.equal(getattr(ra, name), getattr(rb, name)), name


# ------------------------------------------------------------------- construction
@pytest.mark.parametrize(
    ("capacity", "num_envs", "match"),
    [(2, 3, "capacity"), (0, 1, "capacity"), (10.0, 2, "capacity"), (10, 0, "num_envs")],
)
def test_bad_constructor_args_raise_value_error(capacity: Any, num_envs: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ReplayBuffer(capacity, num_envs)


def test_storage_is_time_by_env_with_capacity_split_over_envs() -> None:
    buf = _filled(capacity=10, num_envs=3, n_rows=5)  # 10 // 3 = 3 rows per env
    assert buf.rows == 3
    assert len(buf) == 9 == buf.n_valid
    rollout = buf.rollout()
    assert rollout.shape == (3, 3)
    assert isinstance(rollout.obs, torch.Tensor) and rollout.obs.shape == (3, 3, 2)
    assert rollout.obs.dtype == torch.float32  # float64 observations are stored as float32
    assert rollout.act.dtype == torch.int64 and rollout.rew.dtype == torch.float32


# ---------------------------------------------------------------------- ring order
def test_rollout_before_wrap_holds_only_filled_rows() -> None:
    buf = _filled(capacity=8, num_envs=2, n_rows=3)
    assert buf.rollout().rew.tolist() == [[0, 1], [10, 11], [20, 21]]


def test_ring_overwrite_keeps_per_env_time_order() -> None:
    buf = _filled(capacity=8, num_envs=2, n_rows=7)  # 4 rows per env, wrapped once
    rollout = buf.rollout()
    assert rollout.rew[:, 0].tolist() == [30, 40, 50, 60]
    assert rollout.rew[:, 1].tolist() == [31, 41, 51, 61]
    assert isinstance(rollout.obs_next, torch.Tensor)
    assert rollout.obs_next[:, 1, 0].tolist() == [4, 5, 6, 7]
    assert rollout.terminated[:, 0].tolist() == [False, False, True, False]  # t = 5 ends


def test_invalid_count_stays_right_when_invalid_rows_are_overwritten() -> None:
    buf = ReplayBuffer(4, 2)  # 2 rows
    buf.add(**_row(0, 2, valid=np.array([False, True])))
    buf.add(**_row(1, 2, valid=np.array([False, False])))
    assert buf.n_valid == 1
    buf.add(**_row(2, 2))  # overwrites row 0 (one invalid)
    assert buf.n_valid == 2
    buf.add(**_row(3, 2, valid=np.array([True, False])))  # overwrites row 1 (two invalid)
    assert buf.n_valid == 3
    valid = buf.rollout().valid
    assert valid is not None and int(valid.sum()) == buf.n_valid


# ------------------------------------------------------------------------ reading
def test_sample_returns_batch_size_valid_transitions_only() -> None:
    buf = ReplayBuffer(12, 3)
    for t in range(4):
        valid = np.array([t % 2 == 0, True, False])
        buf.add(**_row(t, 3, valid=valid))
    assert buf.n_valid == 6
    torch.manual_seed(0)
    batch = buf.sample(500)
    assert len(batch) == 500 and batch.rew.shape == (500,)
    assert isinstance(batch.obs, torch.Tensor) and batch.obs.shape == (500, 2)
    assert batch.valid is not None and bool(batch.valid.all())
    allowed = {0.0, 20.0, 1.0, 11.0, 21.0, 31.0}
    seen = set(batch.rew.tolist())
    assert seen == allowed  # every valid row is reachable, no invalid row is drawn


def test_sample_with_bad_batch_size_raises() -> None:
    buf = _filled(capacity=4, num_envs=2, n_rows=1)
    for batch_size in [0, -3, 2.5]:
        with pytest.raises(ValueError, match="batch_size"):
            buf.sample(batch_size)


def test_sample_from_empty_buffer_raises() -> None:
    buf = ReplayBuffer(4, 2)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(2)
    buf.add(**_row(0, 2, valid=np.array([False, False])))
    with pytest.raises(ValueError, match="empty"):
        buf.sample(2)


def test_get_reads_flat_time_times_num_envs_plus_env_indices() -> None:
    buf = _filled(capacity=12, num_envs=3, n_rows=4)
    batch = buf.get(torch.tensor([0, 5, 7, 11]))
    assert batch.rew.tolist() == [0, 12, 21, 32]
    assert batch.act.tolist() == [0, 2, 1, 2]
    assert batch.value is not None and batch.value.tolist() == [0.5, 1.5, 2.5, 3.5]


def test_extras_are_stored_and_unknown_extras_rejected() -> None:
    buf = _filled(capacity=6, num_envs=2, n_rows=3)
    rollout = buf.rollout()
    assert rollout.value is not None and rollout.logp is not None
    assert rollout.value[:, 1].tolist() == [0.5, 1.5, 2.5]
    assert bool(rollout.logp.eq(-1).all())
    assert rollout.adv is None and rollout.ret is None
    bad = ReplayBuffer(6, 2)
    row = _row(0, 2)
    row["extras"] = {"q_values": np.zeros(2)}
    with pytest.raises(ValueError, match="q_values"):
        bad.add(**row)
    row["extras"] = {"valid": np.zeros(2, dtype=bool)}  # the buffer's own mask
    with pytest.raises(ValueError, match="valid"):
        bad.add(**row)


def test_clear_forgets_everything() -> None:
    buf = _filled(capacity=6, num_envs=2, n_rows=2)
    buf.add(**_row(2, 2, valid=np.array([False, True])))
    buf.clear()
    assert len(buf) == 0 and buf.n_valid == 0
    with pytest.raises(ValueError):
        buf.rollout()
    with pytest.raises(ValueError):
        buf.sample(1)
    buf.add(**_row(7, 2))
    assert buf.rollout().rew.tolist() == [[70, 71]]
    assert buf.n_valid == 2


def test_nested_dict_observations_are_stored_and_returned() -> None:
    buf = ReplayBuffer(6, 2)
    for t in range(4):
        obs = {
            "image": np.full((2, 3, 3), t, dtype=np.uint8),
            "state": {"pos": np.array([[t, 0.5], [t, 1.5]]), "step": np.array([t, t])},
        }
        obs_next = {
            "image": obs["image"] + 1,
            "state": {"pos": obs["state"]["pos"] + 1, "step": obs["state"]["step"] + 1},
        }
        buf.add(obs, np.zeros(2), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool), obs_next)
    rollout = buf.rollout()
    assert isinstance(rollout.obs, dict) and isinstance(rollout.obs_next, dict)
    image, state = rollout.obs["image"], rollout.obs["state"]
    assert isinstance(image, torch.Tensor) and isinstance(state, dict)
    assert image.dtype == torch.uint8 and image.shape == (3, 2, 3, 3)
    assert image[:, 0, 0, 0].tolist() == [1, 2, 3]
    assert state["step"].dtype == torch.int64
    assert state["pos"][:, 1].tolist() == [[1, 1.5], [2, 1.5], [3, 1.5]]
    assert rollout.obs_next["state"]["step"][:, 0].tolist() == [2, 3, 4]
    batch = buf.get(torch.tensor([1, 4]))
    assert isinstance(batch.obs, dict)
    assert batch.obs["state"]["pos"].tolist() == [[3, 1.5], [2, 0.5]]


# --------------------------------------------------------------------- persisting
def test_state_dict_round_trip_restores_contents_and_cursor() -> None:
    buf = _filled(capacity=8, num_envs=2, n_rows=6)
    buf.add(**_row(6, 2, valid=np.array([True, False])))
    copy = ReplayBuffer(8, 2)
    copy.load_state_dict(buf.state_dict())
    _assert_same_rollout(buf, copy)
    assert copy.n_valid == buf.n_valid == 7
    for b in (buf, copy):  # both continue writing at the same place
        b.add(**_row(7, 2))
    _assert_same_rollout(buf, copy)
    assert copy.n_valid == buf.n_valid == 7  # the overwritten row t = 3 was valid


def test_reloaded_buffer_ignores_stale_invalid_rows_left_by_clear() -> None:
    buf = ReplayBuffer(6, 2)  # 3 rows
    for t in range(3):
        buf.add(**_row(t, 2, valid=np.array([False, False])))
    buf.clear()
    buf.add(**_row(3, 2))  # row 0 rewritten; rows 1 and 2 still hold stale invalid flags
    copy = ReplayBuffer(6, 2)
    copy.load_state_dict(buf.state_dict())
    for b in (buf, copy):
        assert (len(b), b.n_valid) == (2, 2)
        b.add(**_row(4, 2))
        b.add(**_row(5, 2))
        b.add(**_row(6, 2))  # wraps onto row 0
        assert (len(b), b.n_valid) == (6, 6)


def test_state_dict_is_a_copy() -> None:
    buf = _filled(capacity=4, num_envs=2, n_rows=2)
    state = buf.state_dict()
    other = ReplayBuffer(4, 2)
    other.load_state_dict(state)
    buf.add(**_row(5, 2))
    other.add(**_row(9, 2))
    assert buf.rollout().rew[-1].tolist() == [50, 51]
    assert other.rollout().rew[-1].tolist() == [90, 91]
    third = ReplayBuffer(4, 2)
    third.load_state_dict(state)  # the state was not changed by the buffers loaded from it
    assert third.rollout().rew.tolist() == [[0, 1], [10, 11]]


def test_state_dict_of_empty_buffer_round_trips() -> None:
    copy = ReplayBuffer(4, 2)
    copy.load_state_dict(ReplayBuffer(4, 2).state_dict())
    assert len(copy) == 0
    copy.add(**_row(0, 2))
    assert copy.rollout().rew.tolist() == [[0, 1]]


def test_load_state_dict_of_other_shape_raises() -> None:
    state = _filled(capacity=8, num_envs=2, n_rows=1).state_dict()
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(6, 2).load_state_dict(state)
    state["storage"]["rew"] = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="rew"):
        ReplayBuffer(8, 2).load_state_dict(state)


def test_save_load_round_trip(tmp_path: Path) -> None:
    buf = _filled(capacity=8, num_envs=2, n_rows=5)
    path = tmp_path / "sub" / "buffer.pt"
    buf.save(path)
    loaded = ReplayBuffer.load(path)
    assert (loaded.capacity, loaded.num_envs, len(loaded)) == (8, 2, 8)
    _assert_same_rollout(buf, loaded)
    assert os.listdir(path.parent) == ["buffer.pt"]  # no temporary file left behind


def test_failing_save_leaves_previous_file_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "buffer.pt"
    _filled(capacity=4, num_envs=2, n_rows=1).save(path)
    before = path.read_bytes()

    def broken_save(obj: object, f: Any) -> None:
        f.write(b"half a buffer")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        _filled(capacity=4, num_envs=2, n_rows=3).save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["buffer.pt"]
    assert ReplayBuffer.load(path).rollout().rew.tolist() == [[0, 1]]


def test_loading_corrupt_or_foreign_file_raises_value_error_naming_path(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"\x00not a torch file")
    with pytest.raises(ValueError, match=r"corrupt\.pt"):
        ReplayBuffer.load(corrupt)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(ValueError, match=r"foreign\.pt"):
        ReplayBuffer.load(foreign)
    with pytest.raises(FileNotFoundError, match=r"missing\.pt"):
        ReplayBuffer.load(tmp_path / "missing.pt")
