"""OfflineTrainer refuses, when it is built, what would otherwise fail or mislead mid-run:
Discrete observations out of the space, complex rewards, a prioritized dataset whose
priorities the policy never updates, and ``test_in_train`` (it has no training episodes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from epochtrain import make_trainer
from epochtrain.data import PrioritizedReplayBuffer, ReplayBuffer
from epochtrain.trainer.params import OfflineParams
from tests.trainer.tiny import build

TINY: dict[str, Any] = dict(max_epoch=1, step_per_epoch=5, episode_per_test=1, show_progress=False)


def frozenlake_dataset(obs: list[int], obs_next: list[int]) -> ReplayBuffer:
    """One FrozenLake transition per ``obs``/``obs_next`` pair; each ends its episode."""
    buffer = ReplayBuffer(len(obs), 1)
    for o, n in zip(obs, obs_next, strict=True):
        buffer.add(
            obs=np.array([o]),
            act=np.array([0]),
            rew=np.zeros(1, np.float32),
            terminated=np.ones(1, bool),
            truncated=np.zeros(1, bool),
            obs_next=np.array([n]),
        )
    return buffer


@pytest.mark.parametrize(
    ("obs", "obs_next", "words"),
    [
        ([0, 16, 1, 2], [1, 2, 3, 4], r"1 obs values .* \(e\.g\. 16; first at transition 1\)"),
        ([0, 1, 2, 3], [1, 2, 3, -1], r"1 obs_next values .* \(e\.g\. -1; first at transition 3\)"),
    ],
    ids=["obs", "obs_next"],
)
@pytest.mark.parametrize("algo", ["bc", "cql"])
def test_discrete_observations_out_of_the_space_are_refused_at_build_naming_the_transition(
    algo: str, obs: list[int], obs_next: list[int], words: str
) -> None:
    with pytest.raises(ValueError, match=rf"^the dataset holds {words}.*Discrete\(16\)"):
        make_trainer(algo, "FrozenLake-v1", buffer=frozenlake_dataset(obs, obs_next), **TINY)


def test_a_dataset_of_complex_rewards_is_refused_at_build_naming_the_field() -> None:
    buffer = build("offline").buffer
    state = buffer.state_dict()
    state["storage"]["rew"] = state["storage"]["rew"].to(torch.complex64)
    buffer.load_state_dict(state)
    with pytest.raises(ValueError, match=r"field 'rew' holds complex numbers \(torch\.complex64\)"):
        make_trainer("cql", "CartPole-v1", buffer=buffer, **TINY)


def prioritized_cartpole() -> PrioritizedReplayBuffer:
    buffer = build("offline").buffer
    prioritized = PrioritizedReplayBuffer(buffer.capacity, buffer.num_envs)
    prioritized.load_state_dict(buffer.state_dict())
    return prioritized


def test_a_prioritized_dataset_with_a_policy_that_never_updates_priorities_is_refused() -> None:
    with pytest.raises(ValueError, match=r"PrioritizedReplayBuffer, but BC never updates its prio"):
        make_trainer("bc", "CartPole-v1", buffer=prioritized_cartpole(), **TINY)
    trainer = make_trainer("cql", "CartPole-v1", buffer=prioritized_cartpole(), **TINY)
    trainer.close()  # CQL updates them: accepted


def test_test_in_train_is_refused_in_code_as_the_spec_refuses_it() -> None:
    with pytest.raises(
        ValueError, match=r"OfflineParams\.test_in_train=True has no effect: .*drop"
    ):
        OfflineParams(test_in_train=True)
