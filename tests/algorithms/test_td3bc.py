"""TD3+BC: the actor loss and lambda by hand, dataset state normalisation, save/load, factory."""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor, nn

from epochtrain.algorithms import TD3BC, TD3BCTrainingStats
from epochtrain.data import Collector, ReplayBuffer
from epochtrain.factory import make_envs, make_trainer
from epochtrain.trainer import OfflineTrainer
from tests.algorithms.checks import assert_same_state
from tests.algorithms.test_ddpg import ConstActor, LinearQ, make_batch

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32)
ACT_SPACE = gym.spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32)
"""Centre 0, half-range 2: normalised actions are the env's divided by 2."""


def dataset(rows: list[list[list[float]]], valid: list[list[bool]] | None = None) -> ReplayBuffer:
    """A buffer of ``len(rows)`` time rows, each holding one 3-d observation per env."""
    n_envs = len(rows[0])
    buf = ReplayBuffer(len(rows) * n_envs, n_envs)
    zeros = np.zeros(n_envs, dtype=np.float32)
    for t, row in enumerate(rows):
        obs = np.asarray(row, dtype=np.float32)
        buf.add(
            obs,
            np.zeros((n_envs, 1), dtype=np.float32),
            zeros,
            zeros.astype(bool),
            zeros.astype(bool),
            obs,
            valid=None if valid is None else np.asarray(valid[t]),
        )
    return buf


def test_obs_stats_come_from_the_valid_dataset_rows() -> None:
    rows = [[[1.0, 0.0, 5.0], [3.0, 0.0, 5.0]], [[99.0, 99.0, 99.0], [5.0, 0.0, 5.0]]]
    buf = dataset(rows, valid=[[True, True], [False, True]])
    policy = TD3BC(OBS_SPACE, ACT_SPACE)
    policy.compute_obs_stats(buf)
    # valid observations: x = 1, 3, 5 (mean 3, population std sqrt(8/3)); 0; 5
    std0 = math.sqrt(8 / 3)
    assert policy.obs_mean.tolist() == pytest.approx([3.0, 0.0, 5.0])
    assert policy.obs_std.tolist() == pytest.approx([std0 + 1e-3, 1e-3, 1e-3])
    obs = torch.tensor([[3.0 + std0 + 1e-3, 0.0, 5.0]])
    assert policy.preprocess_obs(obs)[0].tolist() == pytest.approx([1.0, 0.0, 0.0], abs=1e-5)


def test_first_sample_computes_the_stats_once_and_acting_uses_them() -> None:
    buf = dataset([[[2.0, -4.0, 0.0]], [[4.0, -2.0, 0.0]]])
    policy = TD3BC(OBS_SPACE, ACT_SPACE)
    assert not policy.obs_stats_ready
    batch = policy.process_sample(buf.sample(4), buf)
    assert policy.obs_stats_ready and policy.obs_mean.tolist() == [3.0, -3.0, 0.0]
    other = dataset([[[100.0, 100.0, 100.0]]])
    policy.process_sample(batch, other)
    assert policy.obs_mean.tolist() == [3.0, -3.0, 0.0]
    obs = torch.tensor([[4.0, -2.0, 0.0]])
    scaled = (obs - policy.obs_mean) / policy.obs_std
    expected = 2.0 * torch.tanh(policy.actor(scaled))
    assert torch.allclose(policy.act(obs)[0], expected)
    assert torch.equal(policy.act(obs)[0], policy.act(obs, deterministic=True)[0])


def test_without_normalize_obs_the_observations_pass_unchanged() -> None:
    buf = dataset([[[2.0, -4.0, 0.0]], [[4.0, -2.0, 0.0]]])
    policy = TD3BC(OBS_SPACE, ACT_SPACE, normalize_obs=False)
    policy.process_sample(buf.sample(4), buf)
    assert not policy.obs_stats_ready
    obs = torch.tensor([[4.0, -2.0, 0.0]])
    assert torch.equal(policy.preprocess_obs(obs), obs)


def test_actor_loss_lambda_and_gradient_by_hand() -> None:
    alpha, v, scale = 2.5, 0.3, 2.0
    policy = TD3BC(OBS_SPACE, ACT_SPACE, alpha=alpha, normalize_obs=False, policy_delay=1)
    policy.actor = ConstActor([v])
    policy.critics = nn.ModuleList([LinearQ(1.0, scale), LinearQ(1.0, scale)])
    policy.actor_target = ConstActor([v])
    policy.critic_targets = copy.deepcopy(policy.critics)
    policy.optimizers["actor"] = torch.optim.SGD(policy.actor.parameters(), lr=0.1)
    policy.optimizers["critic"] = torch.optim.SGD(policy.critics.parameters(), lr=0.0)
    batch = make_batch(n=16, act_dim=1)
    stats = policy.learn(batch)

    pi = math.tanh(v)
    q = 1.0 + batch.obs[:, 0] + scale * pi  # Q_1(s, pi(s))
    lmbda = alpha / q.abs().mean().item()
    act = batch.act[:, 0] / 2.0  # dataset actions in half-range units
    loss_bc = ((pi - act) ** 2).mean().item()
    assert isinstance(stats, TD3BCTrainingStats)
    assert stats.lmbda.mean == pytest.approx(lmbda, rel=1e-5)
    assert stats.loss_bc.mean == pytest.approx(loss_bc, rel=1e-5)
    assert stats.loss_actor.mean == pytest.approx(-lmbda * q.mean().item() + loss_bc, rel=1e-5)
    # lambda is not differentiated: dL/dv = (1 - pi^2) * (-lambda * scale + 2 mean(pi - a))
    grad = (1 - pi**2) * (-lmbda * scale + 2 * (pi - act).mean().item())
    assert policy.actor.value.item() == pytest.approx(v - 0.1 * grad, rel=1e-5)


def test_alpha_zero_is_behaviour_cloning() -> None:
    torch.manual_seed(0)
    policy = TD3BC(OBS_SPACE, ACT_SPACE, alpha=0.0, policy_delay=1, hidden=(16,))
    stats = policy.learn(make_batch(act_dim=1))
    assert stats.loss_actor.mean == pytest.approx(stats.loss_bc.mean)


def test_state_dict_carries_obs_stats_optimizers_and_counter() -> None:
    torch.manual_seed(0)
    buf = dataset([[[2.0, -4.0, 1.0]], [[4.0, -2.0, 3.0]]])
    policy = TD3BC(OBS_SPACE, ACT_SPACE, hidden=(16,))
    for _ in range(3):
        policy.learn(policy.process_sample(buf.sample(8), buf))
    state = policy.state_dict()
    assert {"obs_mean", "obs_std"} <= set(state)
    clone = TD3BC(OBS_SPACE, ACT_SPACE, hidden=(16,))
    clone.load_state_dict(state)
    assert clone.obs_stats_ready and clone.n_updates == 3
    assert torch.equal(clone.obs_mean, policy.obs_mean)
    assert torch.equal(clone.obs_std, policy.obs_std)
    assert_same_state(policy, clone)
    other = dataset([[[100.0, 100.0, 100.0]]])
    batch = clone.process_sample(buf.sample(8), other)  # loaded stats are kept
    assert torch.equal(clone.obs_mean, policy.obs_mean)
    torch.manual_seed(1)
    a_stats = policy.learn(batch)
    torch.manual_seed(1)
    assert clone.learn(batch) == a_stats
    assert_same_state(policy, clone)


def test_constructor_rejects_negative_alpha() -> None:
    with pytest.raises(ValueError, match="alpha"):
        TD3BC(OBS_SPACE, ACT_SPACE, alpha=-1.0)


def test_make_trainer_builds_an_offline_td3bc_on_a_pendulum_dataset() -> None:
    envs = make_envs("Pendulum-v1", 2)
    buf = ReplayBuffer(400, 2)
    recorder = Collector(TD3BC(envs.single_observation_space, envs.single_action_space), envs, buf)
    recorder.reset(seed=0)
    recorder.collect(n_step=400, random=True)
    trainer = make_trainer(
        "td3bc",
        "Pendulum-v1",
        buffer=buf,
        max_epoch=1,
        step_per_epoch=4,
        num_test_envs=2,
        episode_per_test=2,
        show_progress=False,
    )
    assert isinstance(trainer, OfflineTrainer)
    stats = next(trainer)
    assert isinstance(stats.training_stat, TD3BCTrainingStats)
    assert stats.training_stat.n_gradient_steps == 4
    assert stats.training_stat.actor_updated.mean == 0.5
    policy = trainer.policy
    assert isinstance(policy, TD3BC) and policy.obs_stats_ready
    data = buf.rollout().obs
    assert isinstance(data, Tensor)
    assert torch.allclose(policy.obs_mean, data.reshape(-1, 3).mean(0))
    assert stats.test_collect_stat is not None and stats.test_collect_stat.n_collected_episodes == 2
