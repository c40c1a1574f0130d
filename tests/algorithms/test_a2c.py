"""A2C: n-step returns, GAE, the loss on a hand-computed example, one step per rollout, saving."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from torch import Tensor

from epochtrain.algorithms import A2C, A2CTrainingStats, PGTrainingStats
from epochtrain.algorithms.actor_critic import explained_variance
from epochtrain.data import Batch, Collector, ReplayBuffer
from epochtrain.trainer import OnpolicyParams, OnpolicyTrainer
from tests.algorithms.checks import assert_same_state
from tests.algorithms.tables import Table
from tests.fakes import make_vec

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(4,), dtype=np.float32)


def chain(ids: list[int], next_ids: list[int], rew: list[float]) -> Batch:
    """A one-env ``[time, 1]`` rollout without episode ends."""
    n = len(ids)
    obs = torch.zeros(n, 1, 4)
    obs[:, 0, 0] = torch.tensor(ids, dtype=torch.float32)
    obs_next = torch.zeros(n, 1, 4)
    obs_next[:, 0, 0] = torch.tensor(next_ids, dtype=torch.float32)
    return Batch(
        obs=obs,
        act=torch.zeros(n, 1, dtype=torch.int64),
        rew=torch.tensor(rew).unsqueeze(-1),
        terminated=torch.zeros(n, 1, dtype=torch.bool),
        truncated=torch.zeros(n, 1, dtype=torch.bool),
        obs_next=obs_next,
    )


def test_n_step_returns_bootstrap_from_the_value_after_the_rollout() -> None:
    policy = A2C(OBS_SPACE, gym.spaces.Discrete(2), gamma=0.5)
    policy.critic = Table([[0.0], [0.0], [0.0], [8.0]])
    out = policy.process_rollout(chain([0, 1, 2], [1, 2, 3], [1.0, 1.0, 1.0]))
    # ret_t = sum_k .5^k r_{t+k} + .5^(3-t) V(3)
    expected = torch.tensor([[1 + 0.5 + 0.25 + 0.125 * 8], [1 + 0.5 + 0.25 * 8], [1 + 0.5 * 8]])
    torch.testing.assert_close(out.ret, expected)
    torch.testing.assert_close(out.adv, expected)


def test_gae_lambda_mixes_one_step_and_longer_returns() -> None:
    policy = A2C(OBS_SPACE, gym.spaces.Discrete(2), gamma=1.0, gae_lambda=0.5)
    policy.critic = Table([[1.0], [2.0], [4.0]])
    out = policy.process_rollout(chain([0, 1], [1, 2], [0.0, 0.0]))
    # delta = [0 + 2 - 1, 0 + 4 - 2] = [1, 2]; adv = [1 + .5 * 2, 2]
    torch.testing.assert_close(out.adv, torch.tensor([[2.0], [2.0]]))
    torch.testing.assert_close(out.ret, torch.tensor([[3.0], [4.0]]))


def test_loss_on_a_hand_computed_example() -> None:
    policy = A2C(OBS_SPACE, gym.spaces.Discrete(2), vf_coef=0.5, ent_coef=0.1)
    policy.actor = Table([[0.0, math.log(3.0)], [0.0, 0.0]])  # pi(.|0) = [1/4, 3/4]
    policy.critic = Table([[1.0], [2.0]])
    obs = torch.zeros(2, 4)
    obs[1, 0] = 1.0
    batch = Batch(
        obs=obs,
        act=torch.tensor([0, 1]),
        rew=torch.zeros(2),
        terminated=torch.zeros(2, dtype=torch.bool),
        truncated=torch.zeros(2, dtype=torch.bool),
        obs_next=obs,
        adv=torch.tensor([2.0, -1.0]),
        ret=torch.tensor([3.0, 0.0]),
    )
    stats = policy.learn(batch)
    assert isinstance(stats, A2CTrainingStats) and isinstance(stats, PGTrainingStats)
    loss_actor = -(2.0 * math.log(0.25) - 1.0 * math.log(0.5)) / 2
    loss_critic = ((1.0 - 3.0) ** 2 + (2.0 - 0.0) ** 2) / 2
    entropy = (-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)) + math.log(2.0)) / 2
    assert stats.loss_actor.mean == pytest.approx(loss_actor, rel=1e-5)
    assert stats.loss_critic.mean == pytest.approx(loss_critic, rel=1e-5)
    assert stats.entropy.mean == pytest.approx(entropy, rel=1e-5)
    assert stats.loss_entropy.mean == pytest.approx(-entropy, rel=1e-5)
    total = loss_actor + 0.5 * loss_critic - 0.1 * entropy
    assert stats.loss.mean == pytest.approx(total, rel=1e-5)
    # Var(ret) = 2.25, Var(ret - value) = Var([2, -2]) = 4
    assert stats.explained_variance.mean == pytest.approx(1 - 4 / 2.25, rel=1e-5)


def test_uses_rmsprop_as_sb3() -> None:
    policy = A2C(OBS_SPACE, gym.spaces.Discrete(2), lr=7e-4)
    opt = policy.optimizers["a2c"]
    assert isinstance(opt, torch.optim.RMSprop)
    group = opt.param_groups[0]
    assert (group["lr"], group["alpha"], group["eps"]) == (7e-4, 0.99, 1e-5)


def test_one_gradient_step_per_rollout_in_the_onpolicy_trainer() -> None:
    envs = make_vec([3, 4], mode=AutoresetMode.SAME_STEP)
    policy = A2C(envs.single_observation_space, envs.single_action_space)
    trainer = OnpolicyTrainer(
        policy=policy,
        train_collector=Collector(policy, envs, ReplayBuffer(10, 2)),
        # one pass over each whole rollout, as A2C learns (the params' defaults are PPO's)
        params=OnpolicyParams(
            max_epoch=1,
            step_per_epoch=50,
            step_per_collect=10,
            repeat_per_collect=1,
            batch_size=None,
            show_progress=False,
        ),
    )
    stats = next(trainer)
    assert isinstance(stats.training_stat, A2CTrainingStats)
    assert stats.training_stat.n_gradient_steps == 5
    assert trainer.info_stat().gradient_step == 5
    assert all(math.isfinite(v) for v in stats.training_stat.loss_stats().values())


def test_lr_anneals_linearly_to_zero() -> None:
    policy = A2C(OBS_SPACE, gym.spaces.Discrete(2), lr=1e-3, lr_anneal_steps=1000)
    policy.set_progress(250)
    assert policy.optimizers["a2c"].param_groups[0]["lr"] == pytest.approx(7.5e-4)
    policy.set_progress(2000)
    assert policy.optimizers["a2c"].param_groups[0]["lr"] == 0.0


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (2,))])
def test_state_dict_round_trip_includes_optimizer(action_space: gym.Space[Any]) -> None:
    torch.manual_seed(0)
    policy = A2C(OBS_SPACE, action_space)
    batch = chain([0, 1, 2], [1, 2, 3], [1.0, 0.0, 2.0])
    assert isinstance(batch.obs, Tensor)
    with torch.no_grad():
        act, _ = policy.act(batch.obs.reshape(3, 4))
    batch.act = act.reshape(3, 1, *act.shape[1:])
    flat = policy.process_rollout(batch).flatten()
    for _ in range(3):
        policy.learn(flat)
    clone = A2C(OBS_SPACE, action_space)
    clone.load_state_dict(policy.state_dict())
    assert_same_state(policy, clone)
    assert policy.learn(flat).loss.mean == clone.learn(flat).loss.mean


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gae_lambda": -0.5}, "gae_lambda"),
        ({"rms_alpha": 1.0}, "rms_alpha"),
        ({"rms_eps": 0.0}, "rms_eps"),
        ({"lr": -1.0}, "lr"),
    ],
)
def test_constructor_rejects_bad_hyper_parameters(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        A2C(OBS_SPACE, gym.spaces.Discrete(2), **kwargs)


def test_explained_variance_is_zero_not_nan_for_constant_returns() -> None:
    assert explained_variance(torch.ones(3), torch.tensor([0.0, 1.0, 2.0])) == 0.0
    assert explained_variance(torch.tensor([1.0, 3.0]), torch.tensor([1.0, 3.0])) == 1.0
