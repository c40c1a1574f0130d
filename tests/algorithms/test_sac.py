"""SAC: acting in bounds, squashed log-probs, soft targets, temperature, targets, saving."""

from __future__ import annotations

import io
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor, nn

from epochtrain.algorithms import SAC, SACTrainingStats
from epochtrain.data import Batch
from epochtrain.factory import make_trainer
from tests.algorithms.checks import assert_same_state, transition_batch
from tests.algorithms.tables import Table

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32)
BOX = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


class ConstantActor(nn.Module):
    """Outputs the same logits (or mean and log-std) for every observation."""

    def __init__(self, out: list[float]) -> None:
        super().__init__()
        self.out = nn.Parameter(torch.tensor(out))

    def forward(self, obs: Tensor) -> Tensor:
        return self.out.expand(obs.shape[0], -1)


def make_batch(n: int, action_space: gym.Space[Any], seed: int = 0) -> Batch:
    return transition_batch(n, action_space, seed)


def saved_and_loaded(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` through ``torch.save`` and ``torch.load``, as a checkpoint carries it.

    (Loading the live dict would share the Adam moment tensors between the two policies.)
    """
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    loaded: dict[str, Any] = torch.load(buf, weights_only=False)
    return loaded


def test_box_actions_have_shape_and_stay_in_bounds() -> None:
    torch.manual_seed(0)
    policy = SAC(OBS_SPACE, BOX, hidden=(16,))
    obs = torch.randn(500, 3) * 10
    for deterministic in (False, True):
        actions, extras = policy.act(obs, deterministic)
        assert extras == {} and actions.shape == (500, 2)
        assert (actions[:, 0].abs() <= 2.0).all()
        assert ((actions[:, 1] >= 0.0) & (actions[:, 1] <= 1.0)).all()
    mean = policy.actor(obs)[:, :2]
    expected = torch.tensor([0.0, 0.5]) + torch.tensor([2.0, 0.5]) * torch.tanh(mean)
    assert torch.allclose(policy.act(obs, deterministic=True)[0], expected)


def test_discrete_actions_sample_the_softmax_and_argmax_when_deterministic() -> None:
    torch.manual_seed(0)
    policy = SAC(OBS_SPACE, gym.spaces.Discrete(3), hidden=(16,))
    policy.actor = ConstantActor([0.0, math.log(3.0), 0.0])  # probabilities 0.2, 0.6, 0.2
    actions, _ = policy.act(torch.zeros(5000, 3))
    assert actions.shape == (5000,) and actions.dtype == torch.int64
    freq = torch.bincount(actions, minlength=3).float() / 5000
    assert torch.allclose(freq, torch.tensor([0.2, 0.6, 0.2]), atol=0.03)
    assert (policy.act(torch.zeros(4, 3), deterministic=True)[0] == 1).all()


def test_squashed_log_prob_matches_torch_distributions() -> None:
    policy = SAC(OBS_SPACE, BOX, hidden=(16,))
    out = torch.tensor([[0.3, -1.0, math.log(0.5), math.log(2.0)]] * 4)
    torch.manual_seed(3)
    act, logp = policy._squashed_sample(out)
    base = torch.distributions.Normal(out[:, :2], out[:, 2:].exp())
    dist = torch.distributions.TransformedDistribution(
        base, [torch.distributions.TanhTransform(cache_size=1)]
    )
    assert torch.allclose(logp, dist.log_prob(act).sum(-1), atol=1e-4)


def test_discrete_target_is_the_expected_soft_value_cut_by_termination() -> None:
    policy = SAC(OBS_SPACE, gym.spaces.Discrete(2), gamma=0.5, alpha=0.5, hidden=(16,))
    policy.actor = ConstantActor([0.0, math.log(3.0)])  # pi(s') = (0.25, 0.75)
    policy.critics_target = nn.ModuleList([Table([[1.0, 4.0]]), Table([[2.0, 3.0]])])
    batch = Batch(
        obs=torch.zeros(3, 3),
        act=torch.zeros(3, dtype=torch.int64),
        rew=torch.tensor([1.0, 1.0, 1.0]),
        terminated=torch.tensor([False, True, False]),
        truncated=torch.tensor([False, False, True]),
        obs_next=torch.zeros(3, 3),
    )
    # min Q = (1, 3); V = 0.25 * (1 - 0.5 log 0.25) + 0.75 * (3 - 0.5 log 0.75)
    v = 0.25 * (1.0 - 0.5 * math.log(0.25)) + 0.75 * (3.0 - 0.5 * math.log(0.75))
    expected = [1.0 + 0.5 * v, 1.0, 1.0 + 0.5 * v]
    assert policy.compute_target(batch).tolist() == pytest.approx(expected)


def test_box_target_uses_min_target_q_of_the_sampled_action_minus_alpha_logp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = SAC(OBS_SPACE, BOX, gamma=0.9, alpha=0.2, hidden=(16,))
    act_next = torch.tensor([[0.5, -0.5], [0.0, 0.0]])
    logp_next = torch.tensor([1.5, -2.0])
    monkeypatch.setattr(policy, "sample", lambda obs: (act_next, logp_next))

    class SumQ(nn.Module):
        def __init__(self, scale: float) -> None:
            super().__init__()
            self.scale = scale

        def forward(self, obs: Tensor, act: Tensor) -> Tensor:
            return self.scale * (act.sum(-1) + 1.0)

    policy.critics_target = nn.ModuleList([SumQ(1.0), SumQ(2.0)])
    batch = make_batch(2, BOX)
    batch.rew = torch.tensor([1.0, -1.0])
    # Q1 = (1, 1), Q2 = (2, 2): min is Q1
    expected = batch.rew + 0.9 * (torch.tensor([1.0, 1.0]) - 0.2 * logp_next)
    assert torch.allclose(policy.compute_target(batch), expected)


def test_critics_see_box_actions_rescaled_to_unit_range() -> None:
    policy = SAC(OBS_SPACE, BOX, hidden=(16,))
    act = torch.tensor([[-2.0, 0.0], [2.0, 1.0], [0.0, 0.5]])
    expected = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]])
    assert torch.allclose(policy.unscale(act), expected)
    assert torch.allclose(policy.scale(expected), act)


@pytest.mark.parametrize(("log_std", "grows"), [(math.log(0.1), True), (0.0, False)])
def test_temperature_grows_below_the_target_entropy_and_shrinks_above(
    log_std: float, grows: bool
) -> None:
    """Target entropy 0: std 0.1 has entropy about -1.8 per dimension, std 1 about +0.5."""
    torch.manual_seed(0)
    policy = SAC(OBS_SPACE, BOX, hidden=(16,), target_entropy=0.0, alpha=0.5)
    policy.actor = ConstantActor([0.0, 0.0, log_std, log_std])
    policy.optimizers["actor"] = torch.optim.SGD(policy.actor.parameters(), lr=0.0)
    alphas = [policy.learn(make_batch(32, BOX, seed=i)).alpha.mean for i in range(5)]
    assert alphas[0] == pytest.approx(0.5)
    assert (policy.alpha > 0.5) == grows
    assert (np.diff([*alphas, policy.alpha]) > 0).all() == grows


def test_default_target_entropies() -> None:
    assert SAC(OBS_SPACE, BOX, hidden=(8,)).target_entropy == -2.0
    discrete = SAC(OBS_SPACE, gym.spaces.Discrete(4), hidden=(8,), target_entropy_ratio=0.5)
    assert discrete.target_entropy == pytest.approx(0.5 * math.log(4))


def test_fixed_alpha_has_no_temperature_optimizer_and_stays() -> None:
    policy = SAC(OBS_SPACE, BOX, hidden=(16,), auto_alpha=False, alpha=0.1)
    assert set(policy.optimizers) == {"actor", "critic"}
    stats = policy.learn(make_batch(16, BOX))
    assert policy.alpha == pytest.approx(0.1) and stats.loss_alpha.mean == 0.0


@pytest.mark.parametrize("space", [BOX, gym.spaces.Discrete(3)], ids=["box", "discrete"])
def test_targets_follow_the_critics_by_polyak_averaging(space: gym.Space[Any]) -> None:
    torch.manual_seed(0)
    policy = SAC(OBS_SPACE, space, hidden=(16,), tau=0.1, critic_lr=1e-2)
    before = [p.clone() for p in policy.critics_target.parameters()]
    assert all(
        torch.equal(a, b)
        for a, b in zip(before, policy.critics.parameters(), strict=True)  # start as copies
    )
    policy.learn(make_batch(16, space))
    for old, target, online in zip(
        before, policy.critics_target.parameters(), policy.critics.parameters(), strict=True
    ):
        assert torch.allclose(target, 0.9 * old + 0.1 * online.detach(), atol=1e-6)
    assert policy.target_pairs() == [(policy.critics, policy.critics_target)]


@pytest.mark.parametrize("space", [BOX, gym.spaces.Discrete(3)], ids=["box", "discrete"])
def test_learn_returns_typed_finite_stats(space: gym.Space[Any]) -> None:
    policy = SAC(OBS_SPACE, space, hidden=(16,))
    stats = policy.learn(make_batch(16, space))
    assert isinstance(stats, SACTrainingStats)
    keys = {"loss/critic", "loss/actor", "loss/alpha", "alpha", "entropy", "q_mean"}
    assert set(stats.loss_stats()) == keys
    assert all(np.isfinite(v) for v in stats.loss_stats().values())


@pytest.mark.parametrize("space", [BOX, gym.spaces.Discrete(3)], ids=["box", "discrete"])
def test_state_dict_round_trip_includes_optimizers_and_temperature(space: gym.Space[Any]) -> None:
    torch.manual_seed(0)
    policy = SAC(OBS_SPACE, space, hidden=(16,), alpha_lr=0.05)
    for i in range(4):
        policy.learn(make_batch(16, space, seed=i))
    assert policy.alpha != pytest.approx(1.0)
    clone = SAC(OBS_SPACE, space, hidden=(16,), alpha_lr=0.05)
    clone.load_state_dict(saved_and_loaded(policy.state_dict()))
    assert clone.alpha == policy.alpha
    assert_same_state(policy, clone)
    torch.manual_seed(1)
    first = policy.learn(make_batch(16, space, seed=9))
    torch.manual_seed(1)
    second = clone.learn(make_batch(16, space, seed=9))
    assert first == second


@pytest.mark.parametrize("space", [BOX, gym.spaces.Discrete(3)], ids=["box", "discrete"])
def test_learns_the_best_action_of_a_one_step_bandit(space: gym.Space[Any]) -> None:
    """Reward ``-|a - target|^2`` (Box) or ``[0, 1, 0]`` (Discrete), episodes of one step."""
    torch.manual_seed(0)
    policy = SAC(OBS_SPACE, space, hidden=(64, 64), actor_lr=3e-3, critic_lr=3e-3, alpha_lr=3e-3)
    target = torch.tensor([1.0, 0.25])
    for i in range(600):
        batch = make_batch(64, space, seed=i)
        batch.obs = torch.zeros(64, 3)
        if isinstance(space, gym.spaces.Discrete):
            batch.rew = (batch.act == 1).float()
        else:
            batch.rew = -(batch.act - target).pow(2).sum(-1)
        batch.terminated = torch.ones(64, dtype=torch.bool)
        policy.learn(batch)
    actions, _ = policy.act(torch.zeros(1, 3), deterministic=True)
    if isinstance(space, gym.spaces.Discrete):
        assert actions.item() == 1
    else:
        assert torch.allclose(actions[0], target, atol=0.25)  # Box range: 4 by 1


def test_make_trainer_builds_sac_for_box_and_discrete_envs() -> None:
    box = make_trainer("sac", "Pendulum-v1", max_epoch=1, step_per_epoch=10, warmup_steps=0)
    assert isinstance(box.policy, SAC) and not box.policy.discrete
    discrete = make_trainer("sac", "CartPole-v1", max_epoch=1, step_per_epoch=10)
    assert isinstance(discrete.policy, SAC) and discrete.policy.discrete


@pytest.mark.parametrize(
    ("space", "kwargs", "match"),
    [
        (gym.spaces.Box(-np.inf, np.inf, shape=(2,)), {}, "action_space"),
        (gym.spaces.MultiDiscrete([2, 2]), {}, "action_space"),
        (BOX, {"gamma": 1.5}, "gamma"),
        (BOX, {"tau": 0.0}, "tau"),
        (BOX, {"actor_lr": 0.0}, "actor_lr"),
        (BOX, {"critic_lr": -1.0}, "critic_lr"),
        (BOX, {"alpha": 0.0}, "alpha"),
        (gym.spaces.Discrete(2), {"target_entropy_ratio": 1.0}, "target_entropy_ratio"),
    ],
)
def test_invalid_settings_are_rejected(
    space: gym.Space[Any], kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        SAC(OBS_SPACE, space, **kwargs)
