"""TD3: target policy smoothing and clipped double-Q by hand, delayed updates, save/load."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from epochtrain.algorithms import TD3, TD3TrainingStats
from epochtrain.data import Batch
from tests.algorithms.checks import assert_same_state
from tests.algorithms.test_ddpg import ConstActor, LinearQ, make_batch, params, train_on_match_env

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32)
ACT_SPACE = gym.spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32)
"""Centre 0, half-range 2: normalised actions are the env's divided by 2."""


def smoothing_policy(policy_noise: float, n: int) -> tuple[TD3, Batch]:
    """TD3 whose target actor plays normalised 0.8 and whose target critics are linear.

    ``Q'_1(s, a) = 1 + s_0 + a`` and ``Q'_2(s, a) = s_0 + 3 a`` (``a`` normalised), so
    the minimum is ``Q'_2`` for ``a < 0.5`` and ``Q'_1`` above.
    """
    policy = TD3(OBS_SPACE, ACT_SPACE, gamma=0.5, policy_noise=policy_noise, noise_clip=0.5)
    policy.actor_target = ConstActor([math.atanh(0.8)])
    policy.critic_targets = nn.ModuleList([LinearQ(1.0, 1.0), LinearQ(0.0, 3.0)])
    batch = Batch(
        obs=torch.zeros(n, 3),
        act=torch.zeros(n, 1),
        rew=torch.ones(n),
        terminated=torch.arange(n) % 4 == 3,
        truncated=torch.arange(n) % 4 == 2,
        obs_next=torch.zeros(n, 3),
    )
    return policy, batch


def test_target_smoothing_noise_is_clipped_then_the_action_is_clipped() -> None:
    # std 1e6: the noise is +-noise_clip, so a' = clip(0.8 + 0.5) = 1 or 0.8 - 0.5 = 0.3
    policy, batch = smoothing_policy(policy_noise=1e6, n=200)
    torch.manual_seed(0)
    target = policy.compute_target(batch, batch.obs_next)
    # a' = 1: min(1 + 1, 3) = 2, target 1 + 0.5 * 2 = 2; a' = 0.3: min(1.3, 0.9), 1.45
    live = ~batch.terminated
    values = {round(v, 5) for v in target[live].tolist()}
    assert values == {2.0, 1.45}
    assert target[batch.terminated].tolist() == [1.0] * 50


def test_target_smoothing_matches_the_paper_formula() -> None:
    policy, batch = smoothing_policy(policy_noise=0.2, n=64)
    torch.manual_seed(3)
    eps = torch.randn(64, 1)
    a_next = (0.8 + (0.2 * eps).clamp(-0.5, 0.5)).clamp(-1.0, 1.0).squeeze(-1)
    q_min = torch.minimum(1.0 + a_next, 3.0 * a_next)
    expected = 1.0 + 0.5 * (~batch.terminated).float() * q_min
    torch.manual_seed(3)
    target = policy.compute_target(batch, batch.obs_next)
    assert torch.allclose(target, expected)
    assert not torch.allclose(target, 1.0 + 0.5 * (~batch.terminated).float() * 1.8)


def test_actor_and_targets_update_every_policy_delay_steps() -> None:
    torch.manual_seed(0)
    policy = TD3(OBS_SPACE, ACT_SPACE, hidden=(16,), policy_delay=2, tau=0.5)
    actor0, critic0 = params(policy.actor), params(policy.critics)
    critic_target0 = params(policy.critic_targets)

    first = policy.learn(make_batch(act_dim=1))
    # no actor step: its loss was not computed, and says so
    assert first.actor_updated.mean == 0.0 and not first.loss_actor.measured
    assert "loss/actor" not in first.loss_stats()
    assert all(torch.equal(a, b) for a, b in zip(params(policy.actor), actor0, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(params(policy.actor_target), actor0, strict=True))
    assert all(
        torch.equal(a, b)
        for a, b in zip(params(policy.critic_targets), critic_target0, strict=True)
    )
    assert not any(torch.equal(a, b) for a, b in zip(params(policy.critics), critic0, strict=True))

    critic1 = params(policy.critics)
    second = policy.learn(make_batch(seed=1, act_dim=1))
    assert second.actor_updated.mean == 1.0 and policy.n_updates == 2
    assert second.loss_actor.measured and np.isfinite(second.loss_actor.mean)
    actor2, critic2 = params(policy.actor), params(policy.critics)
    assert not any(torch.equal(a, b) for a, b in zip(actor2, actor0, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(critic2, critic1, strict=True))
    for target, old, new in (
        (policy.actor_target, actor0, actor2),
        (policy.critic_targets, critic_target0, critic2),
    ):
        for t, o, n in zip(params(target), old, new, strict=True):
            assert torch.allclose(t, 0.5 * o + 0.5 * n)


def test_twin_critics_both_learn_and_start_different() -> None:
    torch.manual_seed(0)
    policy = TD3(OBS_SPACE, ACT_SPACE, hidden=(16,))
    first = policy.critics.net.weight_0  # the twins' first layers, stacked
    assert first.shape[0] == 2 and not torch.equal(first[0], first[1])
    before = params(policy.critics)
    stats = policy.learn(make_batch(act_dim=1))
    assert isinstance(stats, TD3TrainingStats)
    # the first step is a critic step only: the actor loss is not measured there
    assert set(stats.loss_stats()) == {"loss/critic", "q_mean", "actor_updated"}
    assert not any(torch.equal(a, b) for a, b in zip(params(policy.critics), before, strict=True))


def test_state_dict_round_trip_resumes_mid_delay() -> None:
    torch.manual_seed(0)
    policy = TD3(OBS_SPACE, ACT_SPACE, hidden=(16,), policy_delay=3)
    for seed in range(4):
        policy.learn(make_batch(seed=seed, act_dim=1))
    clone = TD3(OBS_SPACE, ACT_SPACE, hidden=(16,), policy_delay=3)
    clone.load_state_dict(policy.state_dict())
    assert clone.n_updates == 4
    assert_same_state(policy, clone)
    for _ in range(3):  # steps 5, 6 (actor due) and 7, with the same smoothing noise
        torch.manual_seed(1)
        a_stats = policy.learn(make_batch(seed=9, act_dim=1))
        torch.manual_seed(1)
        b_stats = clone.learn(make_batch(seed=9, act_dim=1))
        assert a_stats == b_stats
    assert_same_state(policy, clone)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"policy_delay": 0}, "policy_delay"),
        ({"policy_delay": 1.5}, "policy_delay"),
        ({"policy_noise": -0.2}, "policy_noise"),
        ({"noise_clip": -1.0}, "noise_clip"),
        ({"tau": 1.5}, "tau"),
    ],
)
def test_constructor_rejects_bad_hyper_parameters(kwargs: dict[str, Any], match: str) -> None:
    # a value out of range is a ValueError, a value of the wrong type (1.5) a TypeError
    with pytest.raises((ValueError, TypeError), match=match):
        TD3(OBS_SPACE, ACT_SPACE, **kwargs)


def test_learns_the_one_step_match_env_through_the_trainer() -> None:
    _, stats = train_on_match_env(TD3)
    assert isinstance(stats, TD3TrainingStats) and stats.n_gradient_steps == 100
    assert stats.actor_updated.mean == pytest.approx(0.5)
