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
    return state


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("not a dict", "is a list, not a dict"),
        ("missing size", r"lacks the entries \['size'\]"),
        ("cursor past the rows", r"cursor=5 is not in \[0, 4\]"),
        ("cursor a bool", r"cursor=True is not in \[0, 4\]"),
        ("storage without rew", "storage lacks fields of"),
        ("act of 3 envs", r"fields \['act'\] are not shaped \(2 or 4, 2, ...\)"),
        ("an extra field", "filled by another algorithm"),
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
