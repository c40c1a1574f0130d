"""Tests of epochtrain.data.env_snapshots: a vector env's state saved and put back."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from epochtrain.data.env_snapshots import env_levels, env_snapshot, restore_env


def cartpoles(n: int = 2) -> gym.vector.VectorEnv:
    return gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="sync")


def test_levels_list_the_wrappers_outermost_first() -> None:
    inner = cartpoles()
    outer = gym.wrappers.vector.RecordEpisodeStatistics(inner)
    assert env_levels(outer) == [outer, inner]
    assert env_levels(inner) == [inner]


def test_a_restored_env_continues_its_episodes_exactly_as_the_saved_one() -> None:
    actions = np.random.default_rng(0).integers(0, 2, size=(30, 2))
    env = gym.wrappers.vector.RecordEpisodeStatistics(cartpoles())
    env.reset(seed=3)
    for a in actions[:10]:
        env.step(a)
    snapshot = env_snapshot(env)
    assert snapshot is not None
    expected = [env.step(a)[0] for a in actions[10:]]

    other = gym.wrappers.vector.RecordEpisodeStatistics(cartpoles())
    other.reset(seed=99)  # another state entirely, then the snapshot's
    restore_env(other, snapshot)
    got = [other.step(a)[0] for a in actions[10:]]
    np.testing.assert_array_equal(np.stack(got), np.stack(expected))


def test_an_env_built_with_other_wrappers_is_refused_naming_the_fix() -> None:
    wrapped = gym.wrappers.vector.RecordEpisodeStatistics(cartpoles())
    wrapped.reset(seed=0)
    snapshot = env_snapshot(wrapped)
    assert snapshot is not None
    plain = cartpoles()
    with pytest.raises(ValueError, match="2 vector wrapper levels, this env has 1: build"):
        restore_env(plain, snapshot)


def test_an_async_env_has_no_snapshot() -> None:
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="async")
    try:
        env.reset(seed=0)
        assert env_snapshot(env) is None  # worker processes and pipes do not pickle
    finally:
        env.close()
