"""Every algorithm and the spaces it takes: refusals that name the space and the fix, raised
when the policy is built, and Discrete observations fed to the networks as the one-hot
encoding of their index, whatever their ``start``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from epochtrain.algorithms.base import Policy
from epochtrain.data import ReplayBuffer
from epochtrain.registry import ALGORITHMS
from tests.algorithms.checks import assert_same_state, two_updates

OBS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
BOX = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
BOX_ALGOS = [name for name in ALGORITHMS if name != "dqn"]
BOUNDED_ALGOS = ["ddpg", "td3", "td3bc", "sac", "cql", "bc"]
"""The algorithms that scale a tanh to the Box bounds."""


def build(algo: str, obs_space: gym.Space[Any], act_space: gym.Space[Any]) -> Policy[Any]:
    entry = ALGORITHMS[algo]
    return entry.policy_cls(obs_space, act_space, entry.config_cls())


def action_space_of(algo: str) -> gym.Space[Any]:
    """A space ``algo`` takes: Discrete(2) for DQN, a 1-d Box for the others."""
    return gym.spaces.Discrete(2) if algo == "dqn" else BOX


@pytest.mark.parametrize("algo", BOUNDED_ALGOS)
@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Box(-1e300, 1e300, (1,), np.float64),  # beyond float32: +-inf there
        gym.spaces.Box(-3e38, 3e38, (1,), np.float32),  # finite, but high - low is not
        gym.spaces.Box(-np.inf, np.inf, (1,), np.float32),
    ],
)
def test_action_bounds_not_finite_in_float32_are_refused_with_rescale_action(
    algo: str, space: gym.spaces.Box
) -> None:
    with pytest.raises(
        ValueError, match=r"action_space Box.* not finite in float32.*RescaleAction"
    ):
        build(algo, OBS, space)


@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_an_observation_space_with_no_elements_is_refused_naming_it(algo: str) -> None:
    empty = gym.spaces.Box(-1.0, 1.0, (0,), np.float32)
    with pytest.raises(ValueError, match=r"observation_space Box.* has no elements"):
        build(algo, empty, action_space_of(algo))


@pytest.mark.parametrize("algo", BOX_ALGOS)
@pytest.mark.parametrize("shape", [(0,), (2, 0)])
def test_an_action_space_with_no_elements_is_refused_naming_it(
    algo: str, shape: tuple[int, ...]
) -> None:
    empty = gym.spaces.Box(-1.0, 1.0, shape, np.float32)
    with pytest.raises(ValueError, match=r"action_space Box.* has no elements"):
        build(algo, OBS, empty)


@pytest.mark.parametrize("algo", ["ddpg", "td3"])
def test_discrete_actions_are_refused_naming_the_algorithm_and_the_alternatives(
    algo: str,
) -> None:
    name = ALGORITHMS[algo].policy_cls.__name__
    with pytest.raises(
        ValueError, match=rf"Box for {name}, got Discrete\(2\): for Discrete actions use dqn"
    ):
        build(algo, OBS, gym.spaces.Discrete(2))


@pytest.mark.parametrize("algo", BOX_ALGOS)
@pytest.mark.parametrize(("shape", "flat"), [((), "(1,)"), ((2, 2), "(4,)")])
def test_a_box_action_that_is_not_1d_is_refused_with_the_reshaping_wrapper(
    algo: str, shape: tuple[int, ...], flat: str
) -> None:
    space = gym.spaces.Box(-1.0, 1.0, shape, np.float32)
    name = ALGORITHMS[algo].policy_cls.__name__
    with pytest.raises(ValueError) as info:
        build(algo, OBS, space)
    message = str(info.value)
    assert f"has shape {shape}, and {name} needs a 1-d Box" in message
    assert f"actions of shape {flat}" in message
    assert f"TransformAction(env, lambda a: a.reshape({shape})" in message


def transitions(obs_space: gym.spaces.Discrete, act_space: gym.Space[Any]) -> ReplayBuffer:
    """Twelve transitions of one env visiting the observations in turn, rewards varying."""
    n, start = int(obs_space.n), int(obs_space.start)
    buffer = ReplayBuffer(12, 1)
    for t in range(12):
        if isinstance(act_space, gym.spaces.Discrete):
            act = np.array([t % 2], np.int64)
        else:
            act = np.array([[np.sin(t)]], np.float32)
        buffer.add(
            np.array([start + t % n], np.int64),
            act,
            np.array([0.1 * t], np.float32),
            np.array([t == 5]),
            np.array([False]),
            np.array([start + (t + 1) % n], np.int64),
        )
    return buffer


@pytest.mark.parametrize("algo", list(ALGORITHMS))
def test_discrete_observations_reach_the_networks_as_their_one_hot_index(algo: str) -> None:
    """A Discrete(5, start=10) observation acts and learns as Discrete(5)'s ``obs - 10``."""
    act_space = action_space_of(algo)
    policies = {}
    for start in (10, 0):
        obs_space = gym.spaces.Discrete(5, start=start)
        torch.manual_seed(0)
        policy = build(algo, obs_space, act_space)
        obs = torch.arange(start, start + 5)
        policies[start] = (policy, policy.act(obs, deterministic=True)[0])
        two_updates(policy, transitions(obs_space, act_space))
    (shifted, shifted_act), (plain, plain_act) = policies[10], policies[0]
    assert torch.equal(shifted_act, plain_act)
    assert_same_state(shifted, plain)
