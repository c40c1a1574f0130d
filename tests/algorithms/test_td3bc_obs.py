"""TD3+BC's state statistics on Discrete observations: one mean and std per one-hot input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from epochtrain.algorithms import TD3BC
from epochtrain.algorithms.td3bc import OBS_STD_EPS
from epochtrain.data import ReplayBuffer

DISCRETE_OBS = gym.spaces.Discrete(4, start=1)
ACT_SPACE = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
OBS = [1, 1, 1, 2, 2, 4, 1, 2]
"""Observations 1 (4 times), 2 (3 times), 3 (never) and 4 (once) of Discrete(4, start=1)."""


def discrete_dataset(observations: list[int]) -> ReplayBuffer:
    buf = ReplayBuffer(len(observations), 1)
    zeros = np.zeros(1, dtype=np.float32)
    for value in observations:
        obs = np.array([value], dtype=np.int64)
        act = np.zeros((1, 1), dtype=np.float32)
        buf.add(obs, act, zeros, zeros.astype(bool), zeros.astype(bool), obs)
    return buf


def test_discrete_obs_stats_are_per_one_hot_input() -> None:
    policy = TD3BC(DISCRETE_OBS, ACT_SPACE, hidden=(8,))
    assert policy.obs_mean.shape == policy.obs_std.shape == (4,)
    policy.compute_obs_stats(discrete_dataset(OBS))
    freq = np.array([4, 3, 0, 1]) / 8  # each input is a 0/1 column: mean p, std sqrt(p(1-p))
    assert policy.obs_mean.tolist() == pytest.approx(freq.tolist())
    expected_std = np.sqrt(freq * (1 - freq)) + OBS_STD_EPS
    assert policy.obs_std.tolist() == pytest.approx(expected_std.tolist())
    normalised = policy.preprocess_obs(torch.tensor([2]))
    hot = np.array([0.0, 1.0, 0.0, 0.0])
    assert normalised[0].tolist() == pytest.approx(((hot - freq) / expected_std).tolist())
    box = gym.spaces.Box(-1.0, 1.0, shape=(2, 3), dtype=np.float32)
    assert TD3BC(box, ACT_SPACE, hidden=(8,)).obs_mean.shape == (2, 3)  # a Box: per dim
