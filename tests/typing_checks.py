"""Static checks run by ``make lint`` (mypy --strict), not by pytest.

A trainer built on a policy carries that policy's stats type to ``EpochStats``, so
algorithm-specific fields type-check without casts or ``type: ignore``; so does one that
``make_trainer`` builds from an algorithm's name.
"""

from __future__ import annotations

from typing import Any, assert_type

import gymnasium as gym

from epochtrain import (
    A2C,
    BC,
    CQL,
    DQN,
    PG,
    PPO,
    SAC,
    TD3,
    TD3BC,
    A2CTrainingStats,
    BaseTrainer,
    BCTrainingStats,
    Collector,
    CQLTrainingStats,
    DDPGTrainingStats,
    DQNTrainingStats,
    EpochStats,
    OfflineParams,
    OfflineTrainer,
    OffpolicyParams,
    OffpolicyTrainer,
    OnpolicyParams,
    OnpolicyTrainer,
    PGTrainingStats,
    PPOTrainingStats,
    ReplayBuffer,
    RunSpec,
    SACTrainingStats,
    TD3BCTrainingStats,
    TD3TrainingStats,
    make_trainer,
)


def ppo_stats_are_typed(envs: gym.vector.VectorEnv[Any, Any, Any]) -> float:
    policy = PPO(envs.single_observation_space, envs.single_action_space)
    trainer = OnpolicyTrainer(
        policy=policy,
        train_collector=Collector(policy, envs, ReplayBuffer(64, envs.num_envs)),
        params=OnpolicyParams(max_epoch=1, step_per_epoch=64, step_per_collect=64),
    )
    stats = next(trainer)
    assert_type(stats, EpochStats[PPOTrainingStats])
    assert stats.training_stat is not None
    return stats.training_stat.clip_fraction.mean


def a2c_stats_are_typed(envs: gym.vector.VectorEnv[Any, Any, Any]) -> float:
    policy = A2C(envs.single_observation_space, envs.single_action_space)
    trainer = OnpolicyTrainer(
        policy=policy,
        train_collector=Collector(policy, envs, ReplayBuffer(64, envs.num_envs)),
        params=OnpolicyParams(max_epoch=1, step_per_epoch=64, step_per_collect=64),
    )
    stats = next(trainer)
    assert_type(stats, EpochStats[A2CTrainingStats])
    assert stats.training_stat is not None
    return stats.training_stat.explained_variance.mean


def pg_stats_are_typed(envs: gym.vector.VectorEnv[Any, Any, Any]) -> float:
    policy = PG(envs.single_observation_space, envs.single_action_space, baseline=False)
    trainer = OnpolicyTrainer(
        policy=policy,
        train_collector=Collector(policy, envs, ReplayBuffer(64, envs.num_envs)),
        params=OnpolicyParams(max_epoch=1, step_per_epoch=64, step_per_collect=64),
    )
    assert_type(next(trainer).training_stat, PGTrainingStats | None)
    for stats in trainer:
        if stats.training_stat is not None:
            return stats.training_stat.loss_actor.mean
    return 0.0


def dqn_stats_are_typed(envs: gym.vector.VectorEnv[Any, Any, Any]) -> float:
    policy = DQN(envs.single_observation_space, envs.single_action_space)
    trainer = OffpolicyTrainer(
        policy=policy,
        train_collector=Collector(policy, envs, ReplayBuffer(64, envs.num_envs)),
        params=OffpolicyParams(max_epoch=1, step_per_epoch=64, step_per_collect=8),
    )
    for stats in trainer:
        assert_type(stats.training_stat, DQNTrainingStats | None)
        if stats.training_stat is not None:
            return stats.training_stat.q_mean.mean
    return 0.0


def bc_stats_are_typed(envs: gym.vector.VectorEnv[Any, Any, Any], data: ReplayBuffer) -> None:
    policy = BC(envs.single_observation_space, envs.single_action_space)
    trainer = OfflineTrainer(
        policy=policy, buffer=data, params=OfflineParams(max_epoch=1, step_per_epoch=10)
    )
    assert_type(next(trainer).training_stat, BCTrainingStats | None)


def td3_stats_are_typed(envs: gym.vector.VectorEnv[Any, Any, Any], data: ReplayBuffer) -> float:
    policy = TD3(envs.single_observation_space, envs.single_action_space)
    trainer = OffpolicyTrainer(
        policy=policy,
        train_collector=Collector(policy, envs, ReplayBuffer(64, envs.num_envs)),
        params=OffpolicyParams(max_epoch=1, step_per_epoch=64, step_per_collect=8),
    )
    assert_type(next(trainer), EpochStats[TD3TrainingStats])
    offline = TD3BC(envs.single_observation_space, envs.single_action_space)
    offline_trainer = OfflineTrainer(
        policy=offline, buffer=data, params=OfflineParams(max_epoch=1, step_per_epoch=10)
    )
    stats = next(offline_trainer).training_stat
    assert_type(stats, TD3BCTrainingStats | None)
    return 0.0 if stats is None else stats.lmbda.mean + stats.loss_actor.mean


def sac_and_cql_stats_are_typed(
    envs: gym.vector.VectorEnv[Any, Any, Any], data: ReplayBuffer
) -> float:
    policy = SAC(envs.single_observation_space, envs.single_action_space)
    trainer = OffpolicyTrainer(
        policy=policy,
        train_collector=Collector(policy, envs, ReplayBuffer(64, envs.num_envs)),
        params=OffpolicyParams(max_epoch=1, step_per_epoch=64, step_per_collect=8),
    )
    sac_stats = next(trainer).training_stat
    assert_type(sac_stats, SACTrainingStats | None)
    cql = CQL(envs.single_observation_space, envs.single_action_space)
    offline = OfflineTrainer(
        policy=cql, buffer=data, params=OfflineParams(max_epoch=1, step_per_epoch=10)
    )
    cql_stats = next(offline).training_stat
    assert_type(cql_stats, CQLTrainingStats | None)
    assert sac_stats is not None and cql_stats is not None
    return sac_stats.entropy.mean + cql_stats.cql_penalty.mean


def make_trainer_types_the_trainer_of_each_algorithm_name(algo: str, spec: RunSpec) -> None:
    assert_type(make_trainer("ppo", "CartPole-v1"), OnpolicyTrainer[PPOTrainingStats])
    assert_type(make_trainer("a2c", "CartPole-v1"), OnpolicyTrainer[A2CTrainingStats])
    assert_type(make_trainer("pg", "CartPole-v1"), OnpolicyTrainer[PGTrainingStats])
    assert_type(make_trainer("dqn", "CartPole-v1"), OffpolicyTrainer[DQNTrainingStats])
    assert_type(make_trainer("sac", "Pendulum-v1"), OffpolicyTrainer[SACTrainingStats])
    assert_type(make_trainer("td3", "Pendulum-v1"), OffpolicyTrainer[TD3TrainingStats])
    assert_type(make_trainer("ddpg", "Pendulum-v1"), OffpolicyTrainer[DDPGTrainingStats])
    assert_type(make_trainer("td3bc", "Pendulum-v1"), OfflineTrainer[TD3BCTrainingStats])
    assert_type(make_trainer("cql", "Pendulum-v1"), OfflineTrainer[CQLTrainingStats])
    assert_type(make_trainer("bc", "CartPole-v1"), OfflineTrainer[BCTrainingStats])
    # a name known only at run time, or a spec: any algorithm's trainer
    assert_type(make_trainer(algo, "CartPole-v1"), BaseTrainer[Any])
    assert_type(make_trainer(spec), BaseTrainer[Any])


def make_trainer_keeps_the_types_with_settings_and_objects(data: ReplayBuffer) -> float:
    trainer = make_trainer(
        "td3bc", "Pendulum-v1", seed=1, buffer=data, stop_fn=None, max_epoch=2, lr=3e-4
    )
    stats = next(trainer)
    assert_type(stats, EpochStats[TD3BCTrainingStats])
    assert stats.training_stat is not None
    return stats.training_stat.lmbda.mean
