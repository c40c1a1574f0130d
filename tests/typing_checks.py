"""Static checks run by ``make lint`` (mypy --strict), not by pytest.

A trainer built on a policy carries that policy's stats type to ``EpochStats``, so
algorithm-specific fields type-check without casts or ``type: ignore``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from typing_extensions import assert_type

from epochtrain import (
    BC,
    DQN,
    PPO,
    BCTrainingStats,
    Collector,
    DQNTrainingStats,
    EpochStats,
    OfflineTrainer,
    OffpolicyTrainer,
    OnpolicyTrainer,
    PPOTrainingStats,
    ReplayBuffer,
)


def ppo_stats_are_typed(envs: gym.vector.VectorEnv[Any, Any, Any]) -> float:
    policy = PPO(envs.single_observation_space, envs.single_action_space)
    trainer = OnpolicyTrainer(
        policy=policy,
        train_collector=Collector(policy, envs, ReplayBuffer(64, envs.num_envs)),
        max_epoch=1,
        step_per_epoch=64,
        step_per_collect=64,
    )
    stats = next(trainer)
    assert_type(stats, EpochStats[PPOTrainingStats])
    assert stats.training_stat is not None
    return stats.training_stat.clip_fraction.mean


def dqn_stats_are_typed(envs: gym.vector.VectorEnv[Any, Any, Any]) -> float:
    policy = DQN(envs.single_observation_space, envs.single_action_space)
    trainer = OffpolicyTrainer(
        policy=policy,
        train_collector=Collector(policy, envs, ReplayBuffer(64, envs.num_envs)),
        max_epoch=1,
        step_per_epoch=64,
        step_per_collect=8,
    )
    for stats in trainer:
        assert_type(stats.training_stat, DQNTrainingStats | None)
        if stats.training_stat is not None:
            return stats.training_stat.q_mean.mean
    return 0.0


def bc_stats_are_typed(envs: gym.vector.VectorEnv[Any, Any, Any], data: ReplayBuffer) -> None:
    policy = BC(envs.single_observation_space, envs.single_action_space)
    trainer = OfflineTrainer(policy=policy, buffer=data, max_epoch=1, step_per_epoch=10)
    assert_type(next(trainer).training_stat, BCTrainingStats | None)
