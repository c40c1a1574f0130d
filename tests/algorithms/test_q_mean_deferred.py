"""The ``q_mean`` statistic of the deterministic actor-critics (DDPG, TD3, TD3+BC) is read
back with the update step's other statistics, not on each gradient step: each step's
value is still the mean ``Q_1(s, a)`` of its own minibatch before its critic step, however
many steps pass before it is read."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from epochtrain.algorithms import DDPG, TD3, TD3BC
from epochtrain.algorithms.deterministic_ac import DeterministicActorCritic
from epochtrain.nets import q_value
from tests.algorithms.checks import transition_batch

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT_SPACE = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


@pytest.mark.parametrize("cls", [DDPG, TD3, TD3BC])
def test_each_steps_q_mean_is_its_own_minibatchs_mean_q1_read_late(
    cls: type[DeterministicActorCritic[Any]],
) -> None:
    torch.manual_seed(0)
    policy = cls(OBS_SPACE, ACT_SPACE, hidden=(16,))
    expected, stats = [], []
    for seed in range(5):
        batch = transition_batch(32, ACT_SPACE, seed=seed)
        _, obs, act, _ = policy.prepare(batch)
        with torch.no_grad():
            expected.append(float(q_value(policy.critics, 0, obs, act).mean()))
        stats.append(policy.learn(batch))  # nothing read yet: five steps wait
    got = [s.q_mean.mean for s in stats]
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-7)
    assert len(set(got)) == 5  # each step's own value, not one repeated
