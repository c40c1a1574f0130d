"""DDPG: acting and exploration noise, TD targets, Polyak updates, save/load, learning a bandit.

Also home of :class:`MatchEnv`, the tiny continuous env the TD3 and TD3+BC tests share.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from epochtrain.algorithms import DDPG, DDPGTrainingStats
from epochtrain.algorithms.base import Policy
from epochtrain.data import Batch, Collector, ReplayBuffer
from epochtrain.nets import q_value
from epochtrain.stats import TrainingStats
from epochtrain.trainer import OffpolicyParams, OffpolicyTrainer
from tests.algorithms.checks import assert_same_state

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32)
ACT_SPACE = gym.spaces.Box(
    np.array([-1.0, 0.0], dtype=np.float32), np.array([3.0, 1.0], dtype=np.float32)
)
"""Action bounds with centre ``[1, 0.5]`` and half-range ``[2, 0.5]``."""


class MatchEnv(gym.Env[np.ndarray, np.ndarray]):
    """One-step episodes: observe a target ``x`` in ``{-1, 1}``, reward ``-(a - x / 2)^2``.

    The optimal deterministic policy plays ``a = x / 2`` and earns 0; acting at random in
    ``[-1, 1]`` earns about -0.58 per episode.
    """

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.x = 1.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.x = float(self.np_random.choice([-1.0, 1.0]))
        return np.array([self.x], dtype=np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward = -float((float(action[0]) - self.x / 2) ** 2)
        return np.array([self.x], dtype=np.float32), reward, True, False, {}


def match_envs(n: int) -> gym.vector.VectorEnv[Any, Any, Any]:
    """``n`` :class:`MatchEnv` in a SyncVectorEnv with SAME_STEP autoreset."""
    return gym.vector.SyncVectorEnv(
        [MatchEnv] * n, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


class ConstActor(nn.Module):
    """Actor stub whose pre-tanh output is ``value`` for every observation."""

    def __init__(self, value: list[float]) -> None:
        super().__init__()
        self.value = nn.Parameter(torch.tensor(value))

    def forward(self, obs: Tensor) -> Tensor:
        return self.value.expand(obs.shape[0], -1)


class LinearQ(nn.Module):
    """Critic stub ``Q(s, a) = bias + s[:, 0] + scale * a.sum(-1)``."""

    def __init__(self, bias: float, scale: float) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.tensor(bias))
        self.scale = scale

    def forward(self, obs: Tensor, act: Tensor) -> Tensor:
        return self.bias + obs[:, 0] + self.scale * act.sum(-1)


def make_batch(n: int = 8, seed: int = 0, act_dim: int = 2) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    return Batch(
        obs=torch.randn(n, 3, generator=gen),
        act=torch.rand(n, act_dim, generator=gen) * 0.5,
        rew=torch.randn(n, generator=gen),
        terminated=torch.zeros(n, dtype=torch.bool),
        truncated=torch.zeros(n, dtype=torch.bool),
        obs_next=torch.randn(n, 3, generator=gen),
    )


def params(module: nn.Module) -> list[Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def test_act_shapes_bounds_and_no_noise_when_deterministic() -> None:
    policy = DDPG(OBS_SPACE, ACT_SPACE, hidden=(16,))
    obs = torch.randn(5, 3) * 5
    actions, extras = policy.act(obs, deterministic=True)
    assert actions.shape == (5, 2) and actions.dtype == torch.float32 and extras == {}
    assert torch.equal(actions, policy.act(obs, deterministic=True)[0])
    low, high = torch.tensor(ACT_SPACE.low), torch.tensor(ACT_SPACE.high)
    assert bool(((actions >= low) & (actions <= high)).all())
    expected = torch.tensor([1.0, 0.5]) + torch.tensor([2.0, 0.5]) * torch.tanh(policy.actor(obs))
    assert torch.allclose(actions, expected)


def test_exploration_noise_is_a_fraction_of_the_half_range_and_clipped() -> None:
    policy = DDPG(OBS_SPACE, ACT_SPACE, exploration_noise=0.1)
    policy.actor = ConstActor([0.0, 0.0])  # normalised action 0: the centre [1, 0.5]
    torch.manual_seed(0)
    actions, _ = policy.act(torch.zeros(20_000, 3))
    std = actions.std(dim=0)
    assert std.tolist() == pytest.approx([0.2, 0.05], rel=0.03)
    assert actions.mean(dim=0).tolist() == pytest.approx([1.0, 0.5], abs=0.01)
    policy.actor = ConstActor([5.0, -5.0])  # tanh near +-1: noise pushes past the bounds
    actions, _ = policy.act(torch.zeros(1000, 3))
    assert actions[:, 0].max().item() == pytest.approx(3.0)
    assert actions[:, 1].min().item() == pytest.approx(0.0)


def test_target_is_hand_computed_and_only_termination_cuts_it() -> None:
    policy = DDPG(OBS_SPACE, ACT_SPACE, gamma=0.5)
    policy.actor_target = ConstActor([0.0, 0.0])  # normalised target action [0, 0]
    policy.critic_targets = nn.ModuleList([LinearQ(bias=2.0, scale=1.0)])
    batch = Batch(
        obs=torch.zeros(3, 3),
        act=torch.zeros(3, 2),
        rew=torch.tensor([1.0, 1.0, 1.0]),
        terminated=torch.tensor([False, True, False]),
        truncated=torch.tensor([False, False, True]),
        obs_next=torch.tensor([[4.0, 0, 0], [4.0, 0, 0], [6.0, 0, 0]]),
    )
    target = policy.compute_target(batch, policy.preprocess_obs(batch.obs_next))
    # Q'(s', a') = 2 + s'_0 + 0: 6 and 8; the terminated row keeps the reward alone
    assert target.tolist() == pytest.approx([1.0 + 0.5 * 6.0, 1.0, 1.0 + 0.5 * 8.0])


def test_critic_sees_actions_normalised_to_the_half_range() -> None:
    policy = DDPG(OBS_SPACE, ACT_SPACE)
    batch = make_batch()
    batch.act = torch.tensor([[3.0, 0.0], [1.0, 0.5]]).repeat(4, 1)
    _, _, act, _ = policy.prepare(batch)
    assert act[:2].tolist() == [[1.0, -1.0], [0.0, 0.0]]


def test_one_learn_step_updates_critic_actor_and_polyak_targets() -> None:
    torch.manual_seed(0)
    policy = DDPG(OBS_SPACE, ACT_SPACE, tau=0.25, hidden=(16, 16))
    actor0, critic0 = params(policy.actor), params(policy.critics)
    assert all(torch.equal(a, b) for a, b in zip(actor0, params(policy.actor_target), strict=True))
    stats = policy.learn(make_batch())
    assert isinstance(stats, DDPGTrainingStats) and policy.n_updates == 1
    assert set(stats.loss_stats()) == {"loss/actor", "loss/critic", "q_mean"}
    assert all(np.isfinite(v) for v in stats.loss_stats().values())
    for online, target, before in (
        (policy.actor, policy.actor_target, actor0),
        (policy.critics, policy.critic_targets, critic0),
    ):
        for new, tgt, old in zip(params(online), params(target), before, strict=True):
            assert not torch.equal(new, old)
            assert torch.allclose(tgt, 0.75 * old + 0.25 * new)


def test_actor_step_follows_the_critic_gradient() -> None:
    torch.manual_seed(0)
    policy = DDPG(OBS_SPACE, ACT_SPACE, actor_lr=0.1)
    policy.actor = ConstActor([0.0, 0.0])
    policy.critics = nn.ModuleList([LinearQ(bias=0.0, scale=1.0)])
    policy.optimizers["actor"] = torch.optim.SGD(policy.actor.parameters(), lr=0.1)
    policy.optimizers["critic"] = torch.optim.SGD(policy.critics.parameters(), lr=0.0)
    policy.actor_target = ConstActor([0.0, 0.0])
    policy.critic_targets = nn.ModuleList([LinearQ(bias=0.0, scale=1.0)])
    stats = policy.learn(make_batch())
    # loss = -mean(Q) = -(mean s_0 + tanh(v).sum()); d/dv = -1 at v = 0, so v += 0.1
    assert policy.actor.value.tolist() == pytest.approx([0.1, 0.1])
    assert stats.loss_actor.mean == pytest.approx(-make_batch().obs[:, 0].mean().item(), abs=1e-6)


def test_state_dict_round_trip_includes_optimizers_and_counter() -> None:
    torch.manual_seed(0)
    policy = DDPG(OBS_SPACE, ACT_SPACE, hidden=(16,))
    for seed in range(3):
        policy.learn(make_batch(seed=seed))
    clone = DDPG(OBS_SPACE, ACT_SPACE, hidden=(16,))
    clone.load_state_dict(policy.state_dict())
    assert clone.n_updates == 3
    assert_same_state(policy, clone)
    assert policy.learn(make_batch(seed=7)) == clone.learn(make_batch(seed=7))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gamma": 1.5}, "gamma"),
        ({"actor_lr": 0.0}, "actor_lr"),
        ({"critic_lr": -1.0}, "critic_lr"),
        ({"tau": 0.0}, "tau"),
        ({"exploration_noise": -0.1}, "exploration_noise"),
        ({"max_grad_norm": 0.0}, "max_grad_norm"),
    ],
)
def test_constructor_rejects_bad_hyper_parameters(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DDPG(OBS_SPACE, ACT_SPACE, **kwargs)


@pytest.mark.parametrize(
    ("space", "match"),
    [
        (gym.spaces.Discrete(2), r"1-d gymnasium\.spaces\.Box for DDPG.*use dqn, sac"),
        (gym.spaces.Box(-np.inf, np.inf, (1,), np.float32), r"not finite in float32"),
    ],
)
def test_constructor_rejects_discrete_or_unbounded_actions(
    space: gym.Space[Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        DDPG(OBS_SPACE, space)


def train_on_match_env(
    policy_cls: Callable[..., Policy[Any]],
) -> tuple[OffpolicyTrainer[Any], TrainingStats]:
    """3 epochs of 100 env steps on the match env; returns the trainer and the last stats."""
    torch.manual_seed(0)
    envs = match_envs(1)
    policy = policy_cls(
        envs.single_observation_space,
        envs.single_action_space,
        hidden=(32, 32),
        actor_lr=3e-3,
        critic_lr=3e-3,
    )
    trainer: OffpolicyTrainer[Any] = OffpolicyTrainer(
        policy=policy,
        train_collector=Collector(policy, envs, ReplayBuffer(1000, 1)),
        test_collector=Collector(policy, match_envs(2), exploration=False),
        params=OffpolicyParams(
            max_epoch=3,
            step_per_epoch=100,
            step_per_collect=10,
            batch_size=64,
            warmup_steps=100,
            show_progress=False,
            seed=0,
        ),
    )
    stats = list(trainer)[-1].training_stat
    assert stats is not None
    last = trainer.last_test_stat
    assert last is not None and last.returns_stat is not None
    assert last.returns_stat.mean > -0.02  # the action matches the target within ~0.14
    return trainer, stats


def test_learns_the_one_step_match_env_through_the_trainer() -> None:
    _, stats = train_on_match_env(DDPG)
    assert isinstance(stats, DDPGTrainingStats) and stats.n_gradient_steps == 100
    assert stats.loss_critic.min <= stats.loss_critic.mean <= stats.loss_critic.max


def test_an_optimizer_step_differentiates_only_its_own_unfrozen_parameters() -> None:
    policy = DDPG(OBS_SPACE, ACT_SPACE, hidden=(16,))
    obs = policy.prepare(make_batch())[1]
    policy.update_actor(-policy.actor_q(obs).mean())
    assert all(p.grad is not None for p in policy.actor.parameters())
    assert all(p.grad is None for p in policy.critics.parameters())  # no critic gradient
    policy.actor.requires_grad_(False)  # a frozen actor: the step is a no-op, not an error
    before = params(policy.actor)
    policy.update_actor(-policy.actor_q(obs).mean())
    assert all(torch.equal(a, b) for a, b in zip(before, params(policy.actor), strict=True))


def test_a_critic_step_with_every_critic_frozen_changes_nothing() -> None:
    # the critic loss takes the isolated path (a plain backward): frozen is still no error
    policy = DDPG(OBS_SPACE, ACT_SPACE, hidden=(16,))
    batch, obs, act, obs_next = policy.prepare(make_batch())
    policy.critics.requires_grad_(False)
    before = params(policy.critics)
    loss, _ = policy.update_critics(batch, obs, act, obs_next)
    assert math.isfinite(loss)
    assert all(torch.equal(a, b) for a, b in zip(before, params(policy.critics), strict=True))


@pytest.mark.parametrize("isolated", [False, True])
def test_optimize_returns_the_loss_and_isolated_steps_match(isolated: bool) -> None:
    torch.manual_seed(0)
    policy = DDPG(OBS_SPACE, ACT_SPACE, hidden=(16,))
    twin = copy.deepcopy(policy)
    batch, obs, act, obs_next = policy.prepare(make_batch())

    def critic_loss(p: DDPG) -> torch.Tensor:
        target = p.compute_target(batch, obs_next)
        return F.mse_loss(q_value(p.critics, 0, obs, act), target)

    loss = critic_loss(policy)
    expected = loss.item()
    assert policy.optimize("critic", loss, isolated=isolated) == expected
    twin.optimize("critic", critic_loss(twin), isolated=not isolated)
    for a, b in zip(params(policy.critics), params(twin.critics), strict=True):
        assert torch.equal(a, b)  # a plain backward and backward(inputs=own): the same bits
