"""buffer_storage: a buffer state is refused, naming what is wrong, before any of it loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from epochtrain import make_trainer
from epochtrain.data import ReplayBuffer, buffer_storage
from epochtrain.data.buffer_storage import (
    BUFFER_FORMAT_VERSION,
    check_state,
    read_state_file,
    write_state_file,
)
from epochtrain.errors import CheckpointError


def _state(rows_filled: int = 2) -> dict[str, Any]:
    """The state of a buffer of capacity 8 over 2 envs (4 rows) with ``rows_filled`` rows."""
    buf = ReplayBuffer(8, 2)
    for t in range(rows_filled):
        obs = np.full((2, 3), float(t))
        buf.add(
            obs,
            np.zeros(2, dtype=np.int64),
            np.ones(2),
            np.zeros(2, bool),
            np.zeros(2, bool),
            obs + 1,
        )
    return buf.state_dict()


FIELDS = {"obs", "obs_next", "act", "rew", "terminated", "truncated", "valid"}


def test_a_buffer_state_fits_its_own_buffer() -> None:
    check_state(_state(), capacity=8, num_envs=2, fields=FIELDS)
    check_state(_state(), capacity=8, num_envs=2, fields=None)
    check_state(_state(0), capacity=8, num_envs=2, fields=FIELDS)  # never filled: no storage


def _broken(change: str) -> Any:
    state = _state()
    if change == "not a dict":
        return [state]
    if change == "missing size":
        del state["size"]
    elif change == "cursor past the rows":
        state["cursor"] = 5
    elif change == "cursor a bool":
        state["cursor"] = True
    elif change == "storage without rew":
        del state["storage"]["rew"]
    elif change == "act of 3 envs":
        state["storage"]["act"] = torch.zeros(2, 3, dtype=torch.int64)
    elif change == "an extra field":
        state["storage"]["logp"] = torch.zeros(2, 2)
    elif change == "no storage but a size":
        state["storage"] = None
    return state


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("not a dict", "is a list, not a dict"),
        ("missing size", r"lacks the entries \['size'\]"),
        ("cursor past the rows", r"cursor=5 is not in \[0, 4\]"),
        ("cursor a bool", r"cursor=True is not in \[0, 4\]"),
        ("storage without rew", r"storage lacks the fields \['rew'\]"),
        ("act of 3 envs", r"fields \['act'\] are not shaped \(2 or 4, 2, ...\)"),
        ("an extra field", "filled by another algorithm"),
        ("no storage but a size", r"has no storage but size=2, cursor=2: an empty buffer"),
    ],
)
def test_a_broken_state_is_refused_naming_the_entry(change: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_state(_broken(change), capacity=8, num_envs=2, fields=FIELDS)


def test_a_state_of_another_capacity_names_both_and_the_fix() -> None:
    with pytest.raises(
        ValueError,
        match=r"capacity=8, num_envs=2; this buffer has capacity=6.*"
        r"build the buffer as the saved one was",
    ):
        check_state(_state(), capacity=6, num_envs=2, fields=FIELDS)


def test_a_state_file_round_trips_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    state = _state()
    write_state_file(state, tmp_path / "deep" / "buf.pt")
    assert [p.name for p in (tmp_path / "deep").iterdir()] == ["buf.pt"]
    read = read_state_file(tmp_path / "deep" / "buf.pt")
    assert read["format_version"] == BUFFER_FORMAT_VERSION
    assert torch.equal(read["storage"]["obs"], state["storage"]["obs"])


def test_a_state_file_of_another_format_version_is_refused(tmp_path: Path) -> None:
    state = {**_state(), "format_version": BUFFER_FORMAT_VERSION + 1}
    torch.save(state, tmp_path / "new.pt")
    with pytest.raises(CheckpointError, match=r"new\.pt.*format version 1"):
        read_state_file(tmp_path / "new.pt")


def test_a_buffer_larger_than_the_memory_available_is_refused_naming_buffer_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 1,000 transitions of (8, 8, 3) uint8 observations: 2 * 192 + 8 + 7 = 399 bytes each
    monkeypatch.setattr(buffer_storage, "available_memory", lambda: 400_000)
    buf = ReplayBuffer(1_000, 2)
    obs = np.zeros((2, 8, 8, 3), np.uint8)
    with pytest.raises(
        ValueError, match=r"buffer_size=1,000 transitions of \(8, 8, 3\) uint8"
    ) as e:
        buf.add(obs, np.zeros(2, np.int64), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool), obs)
    assert "need 0.4 MB" in str(e.value) and "80% of the 0.4 MB" in str(e.value)
    assert "at most 802 here" in str(e.value)  # 320,000 bytes / 399, rounded down to even
    small = ReplayBuffer(802, 2)
    small.add(obs, np.zeros(2, np.int64), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool), obs)
    assert len(small) == 2


def test_a_buffer_of_more_rows_than_memory_holds_is_built_and_refused_at_its_first_add() -> None:
    # its per-row bookkeeping is made with the storage, after the memory check (a list of
    # 10**11 rows would raise a bare MemoryError when the buffer is built)
    buf = ReplayBuffer(10**11, 1)
    obs = np.zeros((1, 4), np.float32)
    with pytest.raises(ValueError, match=r"buffer_size=100,000,000,000 transitions"):
        buf.add(obs, np.zeros(1, np.int64), np.zeros(1), np.zeros(1, bool), np.zeros(1, bool), obs)
    buf.clear()  # and stays usable
    assert len(buf) == 0


def test_make_trainer_refuses_a_buffer_too_large_before_any_work_and_closes_its_envs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(buffer_storage, "available_memory", lambda: 10_000_000)
    closed: list[str] = []
    real_close = gym.vector.SyncVectorEnv.close
    monkeypatch.setattr(
        gym.vector.SyncVectorEnv,
        "close",
        lambda self, **kw: closed.append("env") or real_close(self, **kw),
    )
    with pytest.raises(ValueError, match=r"buffer_size=1,000,000 transitions of \(4,\) float32"):
        make_trainer("dqn", "CartPole-v1", buffer_size=1_000_000)
    assert closed == ["env", "env"]  # the test envs and the training envs


def test_the_memory_available_is_read_from_the_system() -> None:
    available = buffer_storage.available_memory()
    assert available is None or 0 < available < 1 << 50


def _foreign(change: str) -> dict[str, Any]:
    state = _state()
    storage = state["storage"]
    if change == "no obs_next":
        del storage["obs_next"]
    elif change == "no obs":
        del storage["obs"]
    elif change == "numpy arrays":
        state["storage"] = {k: v.numpy() for k, v in storage.items()}
    elif change == "obs_next of another shape":
        storage["obs_next"] = storage["obs_next"][..., :2].clone()
    elif change == "rew per env and more":
        storage["rew"] = storage["rew"][..., None].expand(-1, -1, 3).clone()
    elif change == "terminated of 0.5":
        storage["terminated"] = torch.full(storage["terminated"].shape, 0.5)
    elif change == "valid of 2":
        storage["valid"] = torch.full(storage["valid"].shape, 2, dtype=torch.int64)
    return state


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("no obs_next", r"lacks the fields \['obs_next'\].*ReplayBuffer\.save"),
        ("no obs", r"lacks the fields \['obs'\]"),
        ("numpy arrays", r"field 'obs' is a ndarray, not a torch\.Tensor.*torch\.from_numpy"),
        ("obs_next of another shape", r"field 'obs_next' has entries of shape \(2,\), the "),
        ("rew per env and more", r"field 'rew' has shape \(2, 2, 3\), not \(rows, num_envs\)"),
        ("terminated of 0.5", r"field 'terminated' has dtype torch\.float32 and values other"),
        ("valid of 2", r"field 'valid' has dtype torch\.int64 and values other than 0 and 1"),
    ],
)
def test_a_foreign_buffer_file_is_refused_at_load_naming_the_file_and_field(
    tmp_path: Path, change: str, message: str
) -> None:
    path = tmp_path / "foreign.buf"
    torch.save(_foreign(change), path)
    with pytest.raises(CheckpointError, match=rf"foreign\.buf' is malformed: .*{message}"):
        ReplayBuffer.load(path)


def test_flags_stored_as_0_1_numbers_load_as_bool(tmp_path: Path) -> None:
    state = _state()
    state["storage"]["terminated"][1, 0] = True
    state["storage"]["terminated"] = state["storage"]["terminated"].float()  # D4RL's terminals
    state["storage"]["valid"] = state["storage"]["valid"].to(torch.uint8)
    torch.save(state, tmp_path / "floats.buf")
    loaded = ReplayBuffer.load(tmp_path / "floats.buf")
    rollout = loaded.rollout()
    assert rollout.terminated.dtype == torch.bool and rollout.terminated.tolist() == [
        [False, False],
        [True, False],
    ]
    assert loaded.n_valid == 4


def test_a_state_with_number_flags_is_refused_by_load_state_dict() -> None:
    state = _state()
    state["storage"]["truncated"] = state["storage"]["truncated"].float()
    with pytest.raises(ValueError, match=r"field 'truncated' has dtype torch\.float32, not torch"):
        ReplayBuffer(8, 2).load_state_dict(state)
