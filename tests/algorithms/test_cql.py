"""CQL: the conservative penalty by hand, its effect on Q, the Lagrange weight, saving."""

from __future__ import annotations

import io
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor, nn

from epochtrain.algorithms import CQL, CQLTrainingStats, SACTrainingStats
from epochtrain.data import Batch, ReplayBuffer
from epochtrain.factory import make_trainer
from tests.algorithms.checks import assert_same_state
from tests.algorithms.tables import Table

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, shape=(2,), dtype=np.float32)


class ConstantQ(nn.Module):
    """``Q(s, a) = value`` for every state and action."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def forward(self, obs: Tensor, act: Tensor) -> Tensor:
        return torch.full((obs.shape[0],), self.value)


def make_batch(n: int, space: gym.Space[Any], seed: int = 0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    if isinstance(space, gym.spaces.Discrete):
        act = torch.randint(int(space.n), (n,), generator=gen)
    else:
        act = torch.rand(n, 2, generator=gen) * 4.0 - 2.0
    zeros = torch.zeros(n, dtype=torch.bool)
    return Batch(
        obs=torch.randn(n, 3, generator=gen),
        act=act,
        rew=torch.randn(n, generator=gen),
        terminated=zeros,
        truncated=zeros,
        obs_next=torch.randn(n, 3, generator=gen),
    )


def test_discrete_penalty_is_logsumexp_minus_the_dataset_q() -> None:
    policy = CQL(OBS_SPACE, gym.spaces.Discrete(2), hidden=(8,))
    policy.critics = nn.ModuleList([Table([[1.0, 3.0]]), Table([[0.0, 0.0]])])
    batch = make_batch(2, gym.spaces.Discrete(2))
    batch.obs = torch.zeros(2, 3)
    batch.act = torch.tensor([1, 0])
    q_data = policy.q_values(torch.zeros(2, 3), batch.act)
    penalty = policy.cql_penalty(batch, q_data)
    lse = math.log(math.exp(1.0) + math.exp(3.0))
    # critic 1: (lse - 3 + lse - 1) / 2; critic 2: log 2 - 0
    assert penalty.tolist() == pytest.approx([lse - 2.0, math.log(2.0)])
    assert (penalty > 0).all()  # logsumexp exceeds every single Q-value


def test_box_penalty_importance_weights_random_and_policy_actions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Q = c everywhere; the policy's samples have log-probability L."""
    policy = CQL(OBS_SPACE, BOX, hidden=(8,), n_action_samples=4)
    c, logp = 2.0, -0.5
    policy.critics = nn.ModuleList([ConstantQ(c), ConstantQ(c)])
    monkeypatch.setattr(
        policy,
        "sample",
        lambda obs: (torch.zeros(obs.shape[0], 2), torch.full((obs.shape[0],), logp)),
    )
    batch = make_batch(3, BOX)
    penalty = policy.cql_penalty(batch, torch.full((2, 3), c))
    # uniform actions on (-1, 1)^2 have density 1/4: 4 terms c + log 4; 8 policy terms c - L
    expected = math.log(4 * math.exp(c + math.log(4.0)) + 8 * math.exp(c - logp)) - c
    assert penalty.tolist() == pytest.approx([expected, expected])


def test_penalty_pushes_dataset_actions_above_other_actions() -> None:
    """Rewards are zero everywhere, so only the penalty separates the actions."""
    torch.manual_seed(0)
    policy = CQL(OBS_SPACE, BOX, hidden=(32, 32), critic_lr=3e-3, cql_alpha=1.0)
    data_act = torch.tensor([[1.0, -1.0]])
    for i in range(200):
        batch = make_batch(64, BOX, seed=i)
        batch.act = data_act.expand(64, 2)
        batch.rew = torch.zeros(64)
        stats = policy.learn(batch)
    obs = torch.randn(256, 3)
    q_data = policy.q_values(obs, policy.unscale(data_act.expand(256, 2)))
    q_random = policy.q_values(obs, torch.rand(256, 2) * 2.0 - 1.0)
    assert (q_data.mean(dim=1) > q_random.mean(dim=1) + 0.5).all()
    assert stats.cql_penalty.mean < 5.0


@pytest.mark.parametrize(("threshold", "grows"), [(-5.0, True), (50.0, False)])
def test_lagrange_multiplier_grows_while_the_penalty_exceeds_the_threshold(
    threshold: float, grows: bool
) -> None:
    torch.manual_seed(0)
    policy = CQL(OBS_SPACE, BOX, hidden=(16,), lagrange_threshold=threshold, cql_weight_lr=0.05)
    assert "cql_weight" in policy.optimizers
    weights = [policy.learn(make_batch(32, BOX, seed=i)).cql_weight.mean for i in range(4)]
    assert weights[0] == pytest.approx(policy.cql_alpha)
    assert (float(policy.log_cql_weight.detach()) > 0) == grows
    assert (np.diff(weights) > 0).all() == grows


def test_fixed_weight_has_no_lagrange_optimizer() -> None:
    policy = CQL(OBS_SPACE, BOX, hidden=(8,), cql_alpha=2.0)
    assert set(policy.optimizers) == {"actor", "critic", "alpha"}
    stats = policy.learn(make_batch(16, BOX))
    assert stats.cql_weight.mean == 2.0
    assert stats.loss_cql.mean == pytest.approx(2.0 * 2.0 * stats.cql_penalty.mean, rel=1e-5)


@pytest.mark.parametrize("space", [BOX, gym.spaces.Discrete(3)], ids=["box", "discrete"])
def test_learn_returns_cql_stats_extending_sac_stats(space: gym.Space[Any]) -> None:
    policy = CQL(OBS_SPACE, space, hidden=(16,))
    stats = policy.learn(make_batch(16, space))
    assert isinstance(stats, CQLTrainingStats) and isinstance(stats, SACTrainingStats)
    assert {"loss/cql", "cql_penalty", "cql_weight", "loss/critic"} <= set(stats.loss_stats())
    assert all(np.isfinite(v) for v in stats.loss_stats().values())


def test_state_dict_round_trip_includes_all_optimizers() -> None:
    torch.manual_seed(0)
    kwargs: dict[str, Any] = {"hidden": (16,), "lagrange_threshold": 1.0}
    policy = CQL(OBS_SPACE, BOX, **kwargs)
    for i in range(3):
        policy.learn(make_batch(16, BOX, seed=i))
    buf = io.BytesIO()
    torch.save(policy.state_dict(), buf)
    buf.seek(0)
    clone = CQL(OBS_SPACE, BOX, **kwargs)
    clone.load_state_dict(torch.load(buf, weights_only=False))
    assert float(clone.log_cql_weight.detach()) == float(policy.log_cql_weight.detach()) != 0.0
    assert_same_state(policy, clone)
    torch.manual_seed(1)
    first = policy.learn(make_batch(16, BOX, seed=7))
    torch.manual_seed(1)
    assert clone.learn(make_batch(16, BOX, seed=7)) == first


def test_make_trainer_builds_cql_on_a_dataset() -> None:
    buffer = ReplayBuffer(64)
    obs, no = np.zeros((1, 3), np.float32), np.zeros(1, bool)
    for _ in range(8):
        buffer.add(obs, np.zeros((1, 1), np.float32), np.zeros(1), no, no, obs)
    trainer = make_trainer("cql", "Pendulum-v1", buffer=buffer, max_epoch=1, step_per_epoch=2)
    assert isinstance(trainer.policy, CQL)
    trainer.run()
    assert trainer.state.gradient_step == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cql_alpha": -1.0}, "cql_alpha"),
        ({"n_action_samples": 0}, "n_action_samples"),
        ({"cql_weight_lr": 0.0}, "cql_weight_lr"),
        ({"critic_lr": 0.0}, "critic_lr"),
    ],
)
def test_invalid_settings_are_rejected(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CQL(OBS_SPACE, BOX, **kwargs)


def test_the_penalty_is_added_to_each_critics_full_mse(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sum_i [MSE(Q_i, y) + cql_alpha * penalty_i]`` as the authors' code and d3rlpy; the
    penalty had twice its weight (SAC's TD loss is half the sum of the critics' MSE)."""
    torch.manual_seed(0)
    policy = CQL(OBS_SPACE, BOX, hidden=(16, 16))
    seen: dict[str, Any] = {}
    compute_target, cql_penalty, optimize = (
        policy.compute_target,
        policy.cql_penalty,
        policy.optimize,
    )

    def target(batch: Batch) -> Tensor:
        seen["y"] = compute_target(batch)
        return seen["y"]

    def penalty(batch: Batch, q: Tensor) -> Tensor:
        seen["q"], seen["penalty"] = q, cql_penalty(batch, q)
        return seen["penalty"]

    def spy(name: str, loss: Tensor, **kwargs: Any) -> float:
        seen.setdefault(name, loss.item())
        return optimize(name, loss, **kwargs)

    monkeypatch.setattr(policy, "compute_target", target)
    monkeypatch.setattr(policy, "cql_penalty", penalty)
    monkeypatch.setattr(policy, "optimize", spy)
    policy.learn(make_batch(16, BOX))
    q, y = seen["q"].detach(), seen["y"].detach()
    mse = sum(torch.mean((q[i] - y) ** 2).item() for i in range(len(q)))
    expected = mse + policy.cql_alpha * seen["penalty"].detach().sum().item()
    assert seen["critic"] == pytest.approx(expected, rel=1e-5)
