"""PPO: acting, GAE with truncation and termination, the clipped loss, schedules, saving."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from epochtrain.algorithms import PPO, A2CTrainingStats, PGTrainingStats, PPOTrainingStats
from epochtrain.algorithms.actor_critic import explained_variance
from epochtrain.data import Batch
from tests.algorithms.checks import assert_same_state
from tests.algorithms.tables import TableV, obs_ids

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(4,), dtype=np.float32)


def test_act_discrete_samples_from_the_softmax_and_stores_nothing() -> None:
    policy = PPO(OBS_SPACE, gym.spaces.Discrete(3))
    obs = torch.randn(6, 4)
    actions, extras = policy.act(obs)
    assert actions.shape == (6,) and actions.dtype == torch.int64 and extras == {}
    torch.manual_seed(3)
    draws = torch.stack([policy.act(obs[:1])[0] for _ in range(3000)]).flatten()
    freq = torch.bincount(draws, minlength=3).float() / len(draws)
    torch.testing.assert_close(freq, policy.actor(obs[:1]).softmax(-1)[0], atol=0.03, rtol=0)
    greedy, _ = policy.act(obs, deterministic=True)
    assert torch.equal(greedy, policy.actor(obs).argmax(-1))


def test_act_continuous_shapes_and_logp() -> None:
    policy = PPO(OBS_SPACE, gym.spaces.Box(-2.0, 2.0, shape=(2,)))
    obs = torch.randn(6, 4)
    actions, extras = policy.act(obs)
    assert actions.shape == (6, 2) and actions.dtype == torch.float32 and extras == {}
    logp, entropy = policy.log_prob_entropy(obs, actions)
    assert torch.equal(logp, policy.log_prob(obs, actions))
    normal = torch.distributions.Normal(policy.actor(obs), policy.log_std.exp())
    assert torch.allclose(logp, normal.log_prob(actions).sum(-1), atol=1e-5)
    assert torch.allclose(entropy, normal.entropy().sum(-1), atol=1e-5)


def test_gae_bootstraps_truncation_from_obs_next_and_cuts_at_termination() -> None:
    policy = PPO(OBS_SPACE, gym.spaces.Discrete(2), gamma=0.5, gae_lambda=0.5)
    # V by observation id; id 4 is the obs after a termination and must be ignored
    policy.critic = TableV([1.0, 2.0, 4.0, 3.0, 100.0])
    # env 0: step, truncated step (true final obs id 2), terminated step
    # env 1: three plain steps, the last bootstrapping from its obs_next (id 1)
    batch = Batch(
        obs=obs_ids([[0, 0], [1, 0], [3, 0]]),
        act=torch.zeros(3, 2, dtype=torch.int64),
        rew=torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]),
        terminated=torch.tensor([[False, False], [False, False], [True, False]]),
        truncated=torch.tensor([[False, False], [True, False], [False, False]]),
        obs_next=obs_ids([[1, 0], [2, 0], [4, 1]]),
    )
    out = policy.process_rollout(batch)
    assert out.adv is not None and out.ret is not None and out.value is not None
    # env 0: delta = [1 + .5*2 - 1, 1 + .5*4 - 2, 1 - 3] = [1, 1, -2]; the done at t=1
    # stops the recursion, so adv = [1 + .25*1, 1, -2]
    # env 1: delta = [.5*1 - 1, .5*1 - 1, .5*2 - 1] = [-.5, -.5, 0]
    expected_adv = [[1.25, -0.625], [1.0, -0.5], [-2.0, 0.0]]
    torch.testing.assert_close(out.adv, torch.tensor(expected_adv))
    torch.testing.assert_close(out.value, torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]]))
    torch.testing.assert_close(out.ret, out.adv + out.value)


def _one_state_batch(ratio: float, adv: list[float], policy: PPO) -> Batch:
    n = len(adv)
    obs = torch.zeros(n, 4)
    act = torch.tensor([i % 2 for i in range(n)])
    logp, _ = policy.log_prob_entropy(obs, act)
    return Batch(
        obs=obs,
        act=act,
        rew=torch.zeros(n),
        terminated=torch.zeros(n, dtype=torch.bool),
        truncated=torch.zeros(n, dtype=torch.bool),
        obs_next=obs,
        logp=logp.detach() - math.log(ratio),
        adv=torch.tensor(adv),
        ret=torch.zeros(n),
    )


@pytest.mark.parametrize("space", [gym.spaces.Discrete(3), gym.spaces.Box(-2.0, 2.0, (2,))])
def test_process_rollout_gives_the_logp_of_the_acting_policy(space: gym.Space[Any]) -> None:
    torch.manual_seed(0)
    policy = PPO(OBS_SPACE, space)
    obs = torch.randn(5, 3, 4)  # [time, env, obs]
    with torch.no_grad():
        act = torch.stack([policy.act(o)[0] for o in obs])
        per_step = torch.stack(
            [policy.log_prob_entropy(o, a)[0] for o, a in zip(obs, act, strict=True)]
        )
    batch = Batch(
        obs=obs,
        act=act,
        rew=torch.randn(5, 3),
        terminated=torch.zeros(5, 3, dtype=torch.bool),
        truncated=torch.zeros(5, 3, dtype=torch.bool),
        obs_next=torch.randn(5, 3, 4),
    )
    out = policy.process_rollout(batch)
    assert out.logp is not None and out.logp.shape == (5, 3)
    torch.testing.assert_close(out.logp, per_step)
    # the stored actions are the ones scored: another action changes the logp
    shifted = (act + 1) % 3 if isinstance(space, gym.spaces.Discrete) else act + 1.0
    other = policy.process_rollout(dataclasses.replace(batch, act=shifted))
    assert other.logp is not None and not torch.allclose(other.logp, per_step)


def test_clipped_surrogate_takes_the_pessimistic_side() -> None:
    policy = PPO(
        OBS_SPACE,
        gym.spaces.Discrete(2),
        clip_range=0.2,
        normalize_advantage=False,
        lr_anneal_steps=None,
        clip_anneal_steps=None,
    )
    # ratio 2: positive advantage is clipped to 1.2 * 1, negative keeps 2 * -1
    stats = policy.learn(_one_state_batch(2.0, [1.0, -1.0], policy))
    assert isinstance(stats, PPOTrainingStats)
    assert stats.loss_actor.mean == pytest.approx(-(1.2 - 2.0) / 2, rel=1e-5)
    assert stats.clip_fraction.mean == 1.0
    assert stats.approx_kl.mean == pytest.approx(2.0 - 1.0 - math.log(2.0), rel=1e-5)


def test_positive_advantage_makes_the_action_more_likely() -> None:
    policy = PPO(OBS_SPACE, gym.spaces.Discrete(2), lr=1e-2, normalize_advantage=False)
    obs = torch.zeros(1, 4)
    before = policy.actor(obs).softmax(-1)[0, 0].item()
    batch = _one_state_batch(1.0, [1.0], policy)  # action 0, advantage +1
    policy.learn(batch)
    after = policy.actor(obs).softmax(-1)[0, 0].item()
    assert after > before


@pytest.mark.parametrize("ent_coef", [0.0, 0.5])
def test_the_entropy_bonus_moves_the_policy_only_with_a_positive_ent_coef(
    ent_coef: float,
) -> None:
    # advantage 0 everywhere: the actor's only gradient is the entropy bonus
    kw = dict(normalize_advantage=False, lr_anneal_steps=None, clip_anneal_steps=None)
    policy = PPO(OBS_SPACE, gym.spaces.Discrete(2), lr=1e-2, ent_coef=ent_coef, **kw)
    with torch.no_grad():
        policy.actor(torch.zeros(1, 4))  # built
        last = [m for m in policy.actor.modules() if isinstance(m, torch.nn.Linear)][-1]
        last.bias.copy_(torch.tensor([2.0, -2.0]))  # a confident policy: entropy < log 2
    batch = _one_state_batch(1.0, [0.0, 0.0], policy)
    batch = dataclasses.replace(batch, ret=torch.tensor([1.0, 3.0]))
    obs = torch.zeros(1, 4)
    probs = policy.actor(obs).softmax(-1)[0].detach()
    entropy_before = float(-(probs * probs.log()).sum())
    value = policy.value(batch.obs).detach()  # before the step, as learn sees it
    stats = policy.learn(batch)
    assert stats.entropy.mean == pytest.approx(entropy_before, rel=1e-5)
    assert stats.loss_entropy.mean == pytest.approx(-entropy_before, rel=1e-5)
    assert stats.explained_variance.mean == pytest.approx(
        explained_variance(batch.ret, value), rel=1e-5
    )
    expected_loss = stats.loss_actor.mean + 0.5 * stats.loss_critic.mean
    expected_loss += ent_coef * stats.loss_entropy.mean
    assert stats.loss.mean == pytest.approx(expected_loss, rel=1e-5)
    probs_after = policy.actor(obs).softmax(-1)[0].detach()
    entropy_after = float(-(probs_after * probs_after.log()).sum())
    if ent_coef > 0:
        assert entropy_after > entropy_before + 1e-4
    else:
        assert entropy_after == pytest.approx(entropy_before, abs=1e-7)


def test_explained_variance_is_one_minus_the_residual_share() -> None:
    ret, value = torch.tensor([1.0, 2.0, 3.0, 6.0]), torch.tensor([1.0, 2.5, 3.0, 5.0])
    expected = 1.0 - float((ret - value).var(correction=0)) / float(ret.var(correction=0))
    assert explained_variance(ret, value) == pytest.approx(expected, rel=1e-6)
    assert 0.0 < expected < 1.0


def test_lr_and_clip_anneal_linearly_to_zero() -> None:
    policy = PPO(
        OBS_SPACE,
        gym.spaces.Discrete(2),
        lr=1e-3,
        clip_range=0.2,
        lr_anneal_steps=1000,
        clip_anneal_steps=2000,
    )
    policy.set_progress(500)
    assert policy.optimizers["ppo"].param_groups[0]["lr"] == pytest.approx(5e-4)
    assert policy.clip_range_now == pytest.approx(0.15)
    policy.set_progress(5000)
    assert policy.optimizers["ppo"].param_groups[0]["lr"] == 0.0
    assert policy.clip_range_now == 0.0


def test_state_dict_round_trip_includes_optimizer() -> None:
    torch.manual_seed(0)
    policy = PPO(OBS_SPACE, gym.spaces.Discrete(2))
    for _ in range(3):
        policy.learn(_one_state_batch(1.0, [1.0, -0.5, 0.3], policy))
    policy.set_progress(30_000)
    clone = PPO(OBS_SPACE, gym.spaces.Discrete(2))
    clone.load_state_dict(policy.state_dict())
    assert_same_state(policy, clone)
    assert clone.clip_range_now == policy.clip_range_now
    batch = _one_state_batch(1.0, [1.0, -0.5], policy)
    assert policy.learn(batch).loss.mean == clone.learn(batch).loss.mean


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gamma": -0.1}, "gamma"),
        ({"gae_lambda": 2.0}, "gae_lambda"),
        ({"clip_range": 0.0}, "clip_range"),
        ({"lr_anneal_steps": 0}, "lr_anneal_steps"),
    ],
)
def test_constructor_rejects_bad_hyper_parameters(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PPO(OBS_SPACE, gym.spaces.Discrete(2), **kwargs)


def test_constructor_rejects_unsupported_action_space() -> None:
    with pytest.raises(ValueError, match=r"action_space .*MultiDiscrete"):
        PPO(OBS_SPACE, gym.spaces.MultiDiscrete([2, 3]))


def test_stats_follow_the_algorithm_family() -> None:
    assert issubclass(PPOTrainingStats, A2CTrainingStats)
    assert issubclass(A2CTrainingStats, PGTrainingStats)


def test_gaussian_policy_learns_its_state_independent_log_std() -> None:
    torch.manual_seed(0)
    policy = PPO(OBS_SPACE, gym.spaces.Box(-2.0, 2.0, shape=(1,)), log_std_init=-0.5)
    assert policy.log_std.requires_grad
    torch.testing.assert_close(policy.log_std.detach(), torch.tensor([-0.5]))
    obs = torch.zeros(4, 4)
    with torch.no_grad():
        act, _ = policy.act(obs)
        old_logp = policy.log_prob(obs, act)
    batch = Batch(
        obs=obs,
        act=act,
        rew=torch.zeros(4),
        terminated=torch.zeros(4, dtype=torch.bool),
        truncated=torch.zeros(4, dtype=torch.bool),
        obs_next=obs,
        logp=old_logp,
        adv=torch.tensor([1.0, -1.0, 0.5, -0.5]),
        ret=torch.zeros(4),
    )
    stats = policy.learn(batch)
    assert not torch.equal(policy.log_std.detach(), torch.tensor([-0.5]))
    assert stats.entropy.mean == pytest.approx(0.5 + 0.5 * math.log(2 * math.pi) - 0.5, rel=1e-5)
    clone = PPO(OBS_SPACE, gym.spaces.Box(-2.0, 2.0, shape=(1,)))
    clone.load_state_dict(policy.state_dict())
    assert torch.equal(clone.log_std, policy.log_std)
    assert policy.learn(batch).loss.mean == clone.learn(batch).loss.mean


@pytest.mark.parametrize(
    "ent_coefs",
    [(0.01, 0.01, 0.01), (0.0, 0.0, 0.0), (0.0, 0.01, 0.0)],
    ids=["entropy-in-loss", "entropy-deferred", "mixed"],
)
def test_diagnostics_read_for_an_update_step_at_once_match_each_steps_own(
    ent_coefs: tuple[float, float, float],
) -> None:
    # with ent_coef 0 a categorical policy's entropy is computed when the stats are read,
    # batched over the update step; "mixed" changes ent_coef within one size group
    torch.manual_seed(0)
    policy = PPO(OBS_SPACE, gym.spaces.Discrete(3))
    steps, expected = [], []
    sizes_clips = ((32, 0.2), (32, 0.1), (7, 0.1))  # two sizes, two clip ranges
    for (size, clip), ent_coef in zip(sizes_clips, ent_coefs, strict=True):
        policy.clip_range_now = clip
        policy.ent_coef = ent_coef
        batch = Batch(
            obs=torch.randn(size, 4),
            act=torch.randint(3, (size,)),
            rew=torch.randn(size),
            terminated=torch.zeros(size, dtype=torch.bool),
            truncated=torch.zeros(size, dtype=torch.bool),
            obs_next=torch.randn(size, 4),
            logp=torch.randn(size).clamp(-3.0, -0.1),
            adv=torch.randn(size),
            ret=torch.randn(size),
        )
        with torch.no_grad():  # the step's own numbers, from the weights it starts with
            log_ratio = policy.log_prob(batch.obs, batch.act) - batch.logp
            ratio = log_ratio.exp()
            value = policy.value(batch.obs)
            logp_all = policy.actor(batch.obs).log_softmax(-1)
            entropy = float(-(logp_all.exp() * logp_all).sum(-1).mean())
        expected.append(
            (
                ((ratio - 1.0) - log_ratio).mean().item(),
                ((ratio - 1.0).abs() > clip).float().mean().item(),
                explained_variance(batch.ret, value),
                entropy,
            )
        )
        steps.append(policy.learn(batch))
    for stats, ent_coef, (kl, clipped, explained, entropy) in zip(
        steps, ent_coefs, expected, strict=True
    ):
        assert stats.approx_kl.mean == pytest.approx(kl, rel=1e-5, abs=1e-7)
        assert stats.clip_fraction.mean == pytest.approx(clipped)
        assert stats.explained_variance.mean == pytest.approx(explained, rel=1e-5)
        assert stats.entropy.mean == pytest.approx(entropy, rel=1e-5)
        assert stats.entropy.mean == -stats.loss_entropy.mean > 0
        assert stats.loss.mean == pytest.approx(
            stats.loss_actor.mean + 0.5 * stats.loss_critic.mean - ent_coef * stats.entropy.mean,
            rel=1e-5,
        )
