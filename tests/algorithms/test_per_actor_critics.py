"""Prioritized replay in SAC, DDPG and TD3: weighted critic losses and priority updates."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor

from epochtrain.algorithms import DDPG, SAC, TD3
from epochtrain.data import Batch, PrioritizedReplayBuffer, ReplayBuffer
from epochtrain.factory import make_trainer
from epochtrain.nets import q_values
from epochtrain.trainer import OffpolicyTrainer
from tests.algorithms.checks import transition_batch

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32)
BOX = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
DISCRETE = gym.spaces.Discrete(3)
TARGET = torch.tensor([1.0, -2.0, 0.5, 3.0])
WEIGHT = torch.tensor([1.0, 0.25, 0.0, 0.5])

PERPolicy = SAC | DDPG | TD3
CASES: dict[str, Callable[[], PERPolicy]] = {
    "sac-box": lambda: SAC(OBS_SPACE, BOX, hidden=(8,)),
    "sac-discrete": lambda: SAC(OBS_SPACE, DISCRETE, hidden=(8,)),
    "ddpg": lambda: DDPG(OBS_SPACE, BOX, hidden=(8,)),
    "td3": lambda: TD3(OBS_SPACE, BOX, hidden=(8,)),
}


def make_batch(space: gym.Space[Any], weight: Tensor | None, n: int = 4) -> Batch:
    return transition_batch(n, space, weight=weight)


def critic_q(policy: PERPolicy, batch: Batch) -> Tensor:
    """Every critic's ``Q(s, a)`` of ``batch``, ``[n_critics, batch]``, as ``learn`` sees it."""
    with torch.no_grad():
        if isinstance(policy, SAC):
            act = batch.act if policy.discrete else policy.unscale(batch.act)
            return policy.q_values(policy.obs_input(batch.obs), act)
        _, obs, act, _ = policy.prepare(batch)
        return q_values(policy.critics, obs, act)


@pytest.fixture(params=list(CASES))
def fixed_target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> PERPolicy:
    """Each policy, its TD target replaced by :data:`TARGET` (no sampled next action)."""
    policy = CASES[request.param]()
    monkeypatch.setattr(policy, "compute_target", lambda *args: TARGET)
    return policy


def test_importance_weights_scale_each_samples_critic_loss(fixed_target: PERPolicy) -> None:
    uniform = copy.deepcopy(fixed_target)
    half = 0.5 if isinstance(fixed_target, SAC) else 1.0  # SAC halves the sum over its twins
    q = critic_q(fixed_target, make_batch(fixed_target.action_space, None))
    # each critic: mean_i w_i (Q_i - y_i)^2, summed over the critics
    weighted = fixed_target.learn(make_batch(fixed_target.action_space, WEIGHT))
    expected = (WEIGHT * (q - TARGET).pow(2)).mean(dim=-1).sum() * half
    assert weighted.loss_critic.mean == pytest.approx(expected.item(), rel=1e-5)
    # uniform replay (no weight): the plain MSE, which the weights changed
    plain = uniform.learn(make_batch(uniform.action_space, None))
    expected = (q - TARGET).pow(2).mean(dim=-1).sum() * half
    assert plain.loss_critic.mean == pytest.approx(expected.item(), rel=1e-5)
    assert abs(weighted.loss_critic.mean - plain.loss_critic.mean) > 1e-3


def test_td_abs_is_the_error_of_the_critics_mean_q(fixed_target: PERPolicy) -> None:
    policy = fixed_target
    batch = make_batch(policy.action_space, WEIGHT)
    q = critic_q(policy, batch)
    policy.learn(batch)
    assert policy.td_abs is not None
    # as Tianshou's (td1 + td2) / 2 for twin critics
    expected = (q.mean(dim=0) - TARGET).abs()
    assert policy.td_abs.tolist() == pytest.approx(expected.tolist(), rel=1e-5)


TBuffer = TypeVar("TBuffer", bound=ReplayBuffer)


def filled(buf: TBuffer, space: gym.Space[Any]) -> TBuffer:
    rng = np.random.default_rng(0)
    for t in range(12):
        obs = rng.normal(size=(1, 3)).astype(np.float32)
        act = np.array([space.sample()])
        buf.add(obs, act, np.array([t / 4.0]), np.array([False]), np.array([False]), obs + 1)
    return buf


@pytest.mark.parametrize("case", list(CASES))
def test_post_learn_sets_priorities_to_td_abs_on_a_prioritized_buffer_only(case: str) -> None:
    torch.manual_seed(0)
    policy = CASES[case]()
    per = filled(PrioritizedReplayBuffer(16, 1, alpha=1.0), policy.action_space)
    plain = filled(ReplayBuffer(16, 1), policy.action_space)
    batch = policy.sample_batch(per, 8)
    assert batch.weight is not None and batch.index is not None
    policy.learn(batch)
    policy.post_learn(batch, per)
    td_abs = policy.td_abs
    assert td_abs is not None
    for i, p in zip(batch.index.tolist(), td_abs.numpy() + per.eps, strict=True):
        assert per.priorities(torch.tensor([i]))[0] == pytest.approx(p, rel=1e-5)
    assert len(np.unique(per.priorities(np.arange(len(per))))) > 1
    policy.post_learn(policy.sample_batch(plain, 8), plain)  # uniform: nothing to update


@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg"])
def test_prioritized_replay_through_the_trainer_moves_the_priorities(algo: str) -> None:
    trainer = make_trainer(
        algo,
        "Pendulum-v1",
        seed=0,
        hidden=(16, 16),
        max_epoch=1,
        step_per_epoch=60,
        step_per_collect=10,
        warmup_steps=30,
        batch_size=16,
        buffer_size=200,
        prioritized_replay=True,
        test_in_train=False,
        episode_per_test=1,
    )
    assert isinstance(trainer, OffpolicyTrainer)
    buf = trainer.train_collector.buffer
    assert isinstance(buf, PrioritizedReplayBuffer)
    trainer.run()
    leaves = buf.priorities(np.arange(len(buf)))
    assert len(np.unique(leaves)) > 1
    assert buf.max_priority != 1.0  # new transitions' priority follows the TD errors seen
