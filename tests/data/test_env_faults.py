"""Tests of epochtrain.data.env_faults: naming the sub-env behind a NaN or an exception."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control import CartPoleEnv

from epochtrain.data.env_faults import check_finite, env_label, failed_sub_env
from epochtrain.errors import NonFiniteError


def cartpoles(n: int = 3) -> gym.vector.VectorEnv:
    return gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="sync")


def test_the_first_non_finite_sub_env_is_named_with_the_env_id_and_the_step() -> None:
    obs = np.zeros((3, 4), dtype=np.float32)
    obs[2, 1] = np.inf
    rew = np.array([0.0, np.nan, 0.0])
    with pytest.raises(NonFiniteError) as info:
        check_finite(cartpoles(), obs, rew, steps=17)
    assert "the reward of sub-env 1 of 'CartPole-v1' is not finite" in str(info.value)
    assert "(reward np.float64(nan); a reward of None reads as nan too)" in str(info.value)
    assert info.value.where == "reward of sub-env 1 of 'CartPole-v1'"
    assert info.value.env_step == 17


def test_non_finite_leaves_of_dict_observations_are_found() -> None:
    obs = {"a": np.zeros((2, 2)), "b": {"c": np.array([[0.0], [np.nan]])}}
    with pytest.raises(NonFiniteError, match="observation of sub-env 1"):
        check_finite(cartpoles(2), obs, None, steps=0)


def test_large_finite_values_whose_sum_overflowed_pass() -> None:
    obs = np.full((3, 4), np.finfo(np.float32).max, dtype=np.float32)
    check_finite(cartpoles(), obs, np.zeros(3), steps=0)


def test_the_label_is_the_gymnasium_id_or_the_class_of_a_sub_env_without_one() -> None:
    assert env_label(cartpoles(), 0) == "CartPole-v1"
    unnamed = gym.vector.SyncVectorEnv([CartPoleEnv] * 2)  # built without gymnasium.make
    assert env_label(unnamed, 1) == "CartPoleEnv"


class _Breaks(gym.Wrapper[np.ndarray, int, np.ndarray, int]):
    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, object]]:
        raise RuntimeError("boom")


def test_the_sub_env_whose_step_raised_is_found_from_the_traceback() -> None:
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1"), lambda: _Breaks(gym.make("CartPole-v1"))]
    )
    envs.reset(seed=0)
    with pytest.raises(RuntimeError) as info:
        envs.step(np.array([0, 0]))
    assert failed_sub_env(envs, info.value) == 1
    assert failed_sub_env(envs, RuntimeError("raised elsewhere")) is None


class _Shrinks(gym.Wrapper[np.ndarray, int, np.ndarray, int]):
    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, object]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs[:2], float(reward), terminated, truncated, info


def test_an_error_of_the_vector_env_itself_after_its_loop_blames_no_sub_env() -> None:
    # sub-env 0's observation has the wrong shape; joining them fails after the loop,
    # where SyncVectorEnv's loop variable names the last sub-env
    envs = gym.vector.SyncVectorEnv(
        [lambda: _Shrinks(gym.make("CartPole-v1"))] + [lambda: gym.make("CartPole-v1")] * 3
    )
    envs.reset(seed=0)
    with pytest.raises(ValueError) as info:
        envs.step(np.array([0, 0, 0, 0]))
    assert failed_sub_env(envs, info.value) is None
