"""check_spaces_memory counts the copies a full ring keeps for a Ctrl-C roll-back.

While an epoch runs, a full ring copies each row of older data before the epoch overwrites
it (``SavedRows``): up to ``step_per_epoch`` transitions more, never more than the ring.
Each transition of (8, 8, 3) uint8 observations and int64 actions takes 2 * 192 + 8 + 7 =
399 bytes.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from epochtrain import ReplayBuffer
from epochtrain.data import buffer_storage
from epochtrain.data.buffer_storage import check_spaces_memory, spaces_transition_bytes

OBS = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
ACT = gym.spaces.Discrete(2)
PER_TRANSITION = 399


@pytest.fixture
def memory_of_1000_transitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """80% of the memory available holds 1,000 transitions (399,000 bytes)."""
    monkeypatch.setattr(buffer_storage, "available_memory", lambda: 498_750)


def test_the_check_counts_399_bytes_per_transition() -> None:
    assert spaces_transition_bytes(OBS, ACT) == PER_TRANSITION


@pytest.mark.usefixtures("memory_of_1000_transitions")
def test_a_buffer_that_fits_alone_is_refused_when_its_epochs_copies_do_not_fit() -> None:
    check_spaces_memory(OBS, ACT, 400, 2)  # 800 transitions: fits without the copies
    with pytest.raises(ValueError) as e:
        check_spaces_memory(OBS, ACT, 400, 2, step_per_epoch=300)  # 800 + 300 > 1,000
    message = str(e.value)
    assert "buffer_size=800 transitions" in message
    assert "step_per_epoch=300" in message and "Ctrl-C roll-back" in message
    # at most 700 + 300 copied = 1,000 transitions
    assert "lower buffer_size (at most 700 here) or step_per_epoch" in message
    check_spaces_memory(OBS, ACT, 350, 2, step_per_epoch=300)
    check_spaces_memory(OBS, ACT, 400, 2, step_per_epoch=200)


@pytest.mark.usefixtures("memory_of_1000_transitions")
def test_the_copies_are_counted_up_to_the_whole_ring_only() -> None:
    check_spaces_memory(OBS, ACT, 250, 2, step_per_epoch=10_000)  # 500 + 500 copied
    with pytest.raises(ValueError, match=r"at most 500 here"):
        check_spaces_memory(OBS, ACT, 251, 2, step_per_epoch=10_000)


@pytest.mark.parametrize(("capacity", "step_per_epoch"), [(400, 300), (400, 1_000), (400, 64)])
def test_the_copies_one_epoch_makes_in_a_full_ring_are_what_the_check_counts(
    capacity: int, step_per_epoch: int
) -> None:
    """What the check adds is what a ring holds in copies after an epoch, within a block."""
    num_envs = 2
    buffer = ReplayBuffer(capacity, num_envs)
    obs = np.zeros((num_envs, 8, 8, 3), np.uint8)
    act, rew, flag = np.zeros(num_envs, np.int64), np.zeros(num_envs), np.zeros(num_envs, bool)
    for _ in range(capacity // num_envs):  # full
        buffer.add(obs, act, rew, flag, flag, obs)
    mark = buffer.mark()
    for _ in range(-(-step_per_epoch // num_envs)):  # one epoch of step_per_epoch env steps
        buffer.add(obs, act, rew, flag, flag, obs)
    assert mark.saved is not None
    copied_rows = sum(stop - start for start, stop, _ in mark.saved.blocks)
    copied_transitions = copied_rows * num_envs
    counted = min(capacity, step_per_epoch)
    assert counted <= copied_transitions < counted + 64 * num_envs  # a block of 64 rows
