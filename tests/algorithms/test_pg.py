"""PG (REINFORCE): acting, Monte-Carlo returns with and without a baseline, the loss, saving."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor

from epochtrain.algorithms import PG, PGTrainingStats
from epochtrain.data import Batch
from tests.algorithms.checks import assert_same_state
from tests.algorithms.tables import Table, obs_ids

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(4,), dtype=np.float32)


def rollout() -> Batch:
    """Two envs, three steps. Env 0 terminates at t=1 and is cut by the rollout end at t=2;
    env 1 is truncated at t=0 (true final obs id 2) and cut at t=2 (obs_next id 3)."""
    return Batch(
        obs=obs_ids([[0, 0], [1, 0], [0, 1]]),
        act=torch.zeros(3, 2, dtype=torch.int64),
        rew=torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]]),
        terminated=torch.tensor([[False, False], [True, False], [False, False]]),
        truncated=torch.tensor([[False, True], [False, False], [False, False]]),
        obs_next=obs_ids([[1, 2], [4, 1], [1, 3]]),
    )


def test_act_discrete_and_continuous_shapes() -> None:
    policy = PG(OBS_SPACE, gym.spaces.Discrete(3))
    actions, extras = policy.act(torch.randn(5, 4))
    assert actions.shape == (5,) and extras == {}
    box = PG(OBS_SPACE, gym.spaces.Box(-1.0, 1.0, shape=(2,)))
    actions, extras = box.act(torch.randn(5, 4))
    assert actions.shape == (5, 2) and extras == {}
    mean, _ = box.act(torch.zeros(1, 4), deterministic=True)
    assert torch.equal(mean, box.actor(torch.zeros(1, 4)))


def test_returns_without_baseline_are_discounted_per_episode_and_never_bootstrap() -> None:
    policy = PG(OBS_SPACE, gym.spaces.Discrete(2), gamma=0.5, baseline=False)
    assert policy.critic is None
    out = policy.process_rollout(rollout())
    # env 0: [1 + .5 * 2, 2 (terminated), 3 (cut)]; env 1: [1 (truncated), 1 + .5 * 1, 1]
    expected = torch.tensor([[2.0, 1.0], [2.0, 1.5], [3.0, 1.0]])
    torch.testing.assert_close(out.ret, expected)
    torch.testing.assert_close(out.adv, expected)
    torch.testing.assert_close(out.value, torch.zeros(3, 2))


def test_returns_with_baseline_bootstrap_truncation_and_rollout_end_from_the_critic() -> None:
    policy = PG(OBS_SPACE, gym.spaces.Discrete(2), gamma=0.5, baseline=True)
    # V by observation id; id 4 is the obs after a termination and must be ignored
    policy.critic = Table([[1.0], [2.0], [4.0], [3.0], [100.0]])
    out = policy.process_rollout(rollout())
    # env 0: ret = [1 + .5 * 2, 2, 3 + .5 * V(1)=4]; env 1: ret[2] = 1 + .5 * V(3) = 2.5,
    # ret[1] = 1 + .5 * 2.5 = 2.25, ret[0] = 1 + .5 * V(2) = 3
    expected_ret = torch.tensor([[2.0, 3.0], [2.0, 2.25], [4.0, 2.5]])
    expected_value = torch.tensor([[1.0, 1.0], [2.0, 1.0], [1.0, 2.0]])
    torch.testing.assert_close(out.ret, expected_ret)
    torch.testing.assert_close(out.value, expected_value)
    torch.testing.assert_close(out.adv, expected_ret - expected_value)


def two_step_batch(adv: list[float], ret: list[float]) -> Batch:
    """Actions 0 and 1 in the observation with id 0."""
    obs = torch.zeros(2, 4)
    return Batch(
        obs=obs,
        act=torch.tensor([0, 1]),
        rew=torch.zeros(2),
        terminated=torch.zeros(2, dtype=torch.bool),
        truncated=torch.zeros(2, dtype=torch.bool),
        obs_next=obs,
        adv=torch.tensor(adv),
        ret=torch.tensor(ret),
    )


@pytest.mark.parametrize("baseline", [True, False])
def test_loss_on_a_hand_computed_example(baseline: bool) -> None:
    policy = PG(
        OBS_SPACE, gym.spaces.Discrete(2), baseline=baseline, normalize_advantage=False, vf_coef=0.5
    )
    policy.actor = Table([[0.0, math.log(3.0)]])  # pi(.|0) = [1/4, 3/4]
    if baseline:
        policy.critic = Table([[1.0]])
    stats = policy.learn(two_step_batch(adv=[2.0, -1.0], ret=[3.0, 0.0]))
    assert isinstance(stats, PGTrainingStats)
    loss_actor = -(2.0 * math.log(0.25) - 1.0 * math.log(0.75)) / 2
    loss_critic = ((1.0 - 3.0) ** 2 + (1.0 - 0.0) ** 2) / 2 if baseline else 0.0
    assert stats.loss_actor.mean == pytest.approx(loss_actor, rel=1e-5)
    assert stats.loss_critic.mean == pytest.approx(loss_critic, rel=1e-5)
    assert stats.loss.mean == pytest.approx(loss_actor + 0.5 * loss_critic, rel=1e-5)
    entropy = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert stats.entropy.mean == pytest.approx(entropy, rel=1e-5)


def test_normalized_advantages_have_zero_mean_and_unit_std() -> None:
    policy = PG(OBS_SPACE, gym.spaces.Discrete(2), normalize_advantage=True)
    adv = policy.advantages(two_step_batch(adv=[5.0, 1.0], ret=[0.0, 0.0]))
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0]) / math.sqrt(2.0), atol=1e-6, rtol=0)


def test_positive_advantage_makes_the_action_more_likely() -> None:
    policy = PG(OBS_SPACE, gym.spaces.Discrete(2), lr=1e-2, normalize_advantage=False)
    obs = torch.zeros(1, 4)
    before = policy.actor(obs).softmax(-1)[0, 0].item()
    policy.learn(two_step_batch(adv=[1.0, 0.0], ret=[0.0, 0.0]))
    assert policy.actor(obs).softmax(-1)[0, 0].item() > before


@pytest.mark.parametrize("baseline", [True, False])
@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (2,))])
def test_state_dict_round_trip_includes_optimizer(
    baseline: bool, action_space: gym.Space[Any]
) -> None:
    torch.manual_seed(0)
    policy = PG(OBS_SPACE, action_space, baseline=baseline)
    batch = rollout()
    assert isinstance(batch.obs, Tensor)
    with torch.no_grad():
        act, _ = policy.act(batch.obs.reshape(6, 4))
    batch.act = act.reshape(3, 2, *act.shape[1:])
    flat = policy.process_rollout(batch).flatten()
    for _ in range(3):
        policy.learn(flat)
    clone = PG(OBS_SPACE, action_space, baseline=baseline)
    clone.load_state_dict(policy.state_dict())
    assert ("critic.net.0.weight" in clone.state_dict()) == baseline
    assert_same_state(policy, clone)
    assert policy.learn(flat).loss.mean == clone.learn(flat).loss.mean


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gamma": 1.5}, "gamma"),
        ({"lr": 0.0}, "lr"),
        ({"vf_coef": -1.0}, "vf_coef"),
        ({"max_grad_norm": 0.0}, "max_grad_norm"),
        ({"lr_anneal_steps": 0}, "lr_anneal_steps"),
    ],
)
def test_constructor_rejects_bad_hyper_parameters(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PG(OBS_SPACE, gym.spaces.Discrete(2), **kwargs)


def test_constructor_rejects_unsupported_spaces() -> None:
    with pytest.raises(ValueError, match=r"action_space .*PG"):
        PG(OBS_SPACE, gym.spaces.MultiBinary(3))
    with pytest.raises(ValueError, match="observation_space"):
        PG(gym.spaces.Dict({"a": OBS_SPACE}), gym.spaces.Discrete(2))
