"""Collector(policy, env, buffer): a policy built for other spaces than the envs' is refused.

Before, a CartPole policy given Pendulum envs failed in the middle of ``collect`` with a
shape error from torch, and a policy for ``Discrete(3)`` actions on ``Discrete(2)`` envs
stepped the env with action 2, blamed on the env. Now the constructor names the space,
both shapes and the fix, before any env is stepped; spaces that differ only in what the
collector adapts (bounds, dtypes, a ``Discrete`` action space's start) are accepted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor

from epochtrain.algorithms import PPO
from epochtrain.data import Collector, ReplayBuffer
from epochtrain.data.batch import ActResult, Obs


class Stepped(gym.vector.VectorWrapper):
    """Counts the steps of a vector env."""

    def __init__(self, env: gym.vector.VectorEnv[Any, Any, Any]) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, actions: Any) -> Any:
        self.steps += 1
        return super().step(actions)


def vec(env_id: str, n: int = 2) -> Stepped:
    return Stepped(gym.make_vec(env_id, num_envs=n, vectorization_mode="sync"))


class SpacesActor(torch.nn.Module):
    """A policy built for the given spaces; acts with action 0."""

    def __init__(self, obs_space: gym.Space[Any], act_space: gym.Space[Any]) -> None:
        super().__init__()
        self.observation_space = obs_space
        self.action_space = act_space

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        n = next(iter(obs.values())).shape[0] if isinstance(obs, dict) else obs.shape[0]
        return torch.zeros(n, dtype=torch.int64), {}

    def to_tensor(self, obs: Obs) -> Obs:
        return obs


def test_a_cartpole_policy_on_pendulum_envs_is_refused_before_any_step() -> None:
    cartpole, pendulum = vec("CartPole-v1"), vec("Pendulum-v1")
    policy = PPO(cartpole.single_observation_space, cartpole.single_action_space)
    with pytest.raises(ValueError) as exc:
        Collector(policy, pendulum, ReplayBuffer(100, 2))
    message = str(exc.value)
    assert "the policy (PPO) was built for the observation space Box(shape=(4,)" in message
    assert "env's is Box(shape=(3,)" in message
    assert "PPO(env.single_observation_space, env.single_action_space, ...)" in message
    assert pendulum.steps == 0


def test_a_policy_for_more_discrete_actions_than_the_env_has_is_refused() -> None:
    cartpole = vec("CartPole-v1")
    policy = PPO(cartpole.single_observation_space, gym.spaces.Discrete(3))
    with pytest.raises(ValueError, match=r"action space Discrete\(3\), but env's is Discrete\(2\)"):
        Collector(policy, cartpole)
    # a Discrete action space's start is the collector's to shift: that one acts
    shifted = PPO(cartpole.single_observation_space, gym.spaces.Discrete(2, start=5))
    Collector(shifted, cartpole).collect(n_step=4)
    assert cartpole.steps == 2


def test_dict_observations_must_have_the_envs_keys_and_shapes() -> None:
    envs = gym.vector.SyncVectorEnv(
        [
            lambda: gym.wrappers.TransformObservation(  # a dict observation of CartPole
                gym.make("CartPole-v1"),
                lambda o: {"pos": o[:2], "vel": o[2:]},
                gym.spaces.Dict(
                    {
                        "pos": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                        "vel": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                    }
                ),
            )
        ]
    )
    act = envs.single_action_space
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float64)  # other bounds and dtype: accepted
    fits = SpacesActor(gym.spaces.Dict({"pos": box, "vel": box}), act)
    Collector(fits, envs).collect(n_step=3)
    wrong_key = SpacesActor(gym.spaces.Dict({"pos": box, "speed": box}), act)
    with pytest.raises(ValueError, match=r"keys \['pos', 'speed'\] vs \['pos', 'vel'\]"):
        Collector(wrong_key, envs)
    wide = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    wrong_shape = SpacesActor(gym.spaces.Dict({"pos": box, "vel": wide}), act)
    with pytest.raises(ValueError, match=r"key 'vel': shape \(3,\) vs \(2,\)"):
        Collector(wrong_shape, envs)
    envs.close()


def test_a_buffer_for_another_number_of_envs_is_refused_naming_the_fix() -> None:
    cartpole = vec("CartPole-v1")
    policy = PPO(cartpole.single_observation_space, cartpole.single_action_space)
    with pytest.raises(ValueError, match=r"buffer.num_envs \(3\) must equal env.num_envs \(2\)"):
        Collector(policy, cartpole, ReplayBuffer(99, 3))
    with pytest.raises(ValueError, match=r"ReplayBuffer\(capacity, 2\)"):
        Collector(policy, cartpole, ReplayBuffer(99, 3))


def test_a_discrete_observation_of_another_start_is_refused() -> None:
    """Discrete observations are shifted by the policy's own start: they must agree. A
    policy without spaces (any Actor) is not checked."""
    lake = vec("FrozenLake-v1")
    act = lake.single_action_space
    with pytest.raises(ValueError, match=r"start 1 vs 0"):
        Collector(SpacesActor(gym.spaces.Discrete(16, start=1), act), lake)

    class NoSpaces:
        def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
            assert isinstance(obs, Tensor)
            return torch.zeros(obs.shape[0], dtype=torch.int64), {}

        def to_tensor(self, obs: Obs) -> Obs:
            return obs

    Collector(NoSpaces(), lake).collect(n_step=2)


def test_record_dataset_with_a_policy_for_other_spaces_closes_its_envs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import epochtrain.factory
    from epochtrain.dataset import record_dataset

    made: list[gym.vector.VectorEnv[Any, Any, Any]] = []
    make_envs = epochtrain.factory.make_envs

    def recording(*args: Any, **kwargs: Any) -> gym.vector.VectorEnv[Any, Any, Any]:
        made.append(make_envs(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(epochtrain.factory, "make_envs", recording)
    pendulum = gym.make("Pendulum-v1")
    policy = PPO(pendulum.observation_space, pendulum.action_space)
    with pytest.raises(ValueError, match="was built for the observation space"):
        record_dataset(policy, "CartPole-v1", 10, tmp_path / "d.pt")
    assert len(made) == 1 and made[0].closed
    assert not (tmp_path / "d.pt").exists()


def test_a_policy_that_scales_its_actions_to_its_bounds_needs_the_envs_bounds() -> None:
    from epochtrain.algorithms.sac import SAC

    envs = gym.make_vec("Pendulum-v1", num_envs=1, vectorization_mode="sync")  # [-2, 2]
    obs = envs.single_observation_space
    narrow = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    with pytest.raises(ValueError, match=r"bounds \[\[-1.0\], \[1.0\]\] vs \[\[-2.0\], \[2.0\]\]"):
        Collector(SAC(obs, narrow), envs)  # its actions would reach only half the range
    Collector(SAC(obs, envs.single_action_space), envs).collect(n_step=2)
    Collector(PPO(obs, narrow), envs).collect(n_step=2)  # sampled, then clipped to the env's
    envs.close()
