"""BC: acting, loss decreasing on discrete and continuous data, bounds, saving, validation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from epochtrain.algorithms import BC, BCTrainingStats
from epochtrain.data import Batch
from tests.algorithms.checks import assert_same_state

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32)
BOX = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


def expert_batch(n: int, discrete: bool, seed: int = 0) -> Batch:
    """Discrete expert: ``obs[0] > 0``; continuous: a linear map clipped into ``BOX``."""
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 3, generator=gen)
    if discrete:
        act = (obs[:, 0] > 0).long()
    else:
        weights = torch.tensor([[1.0, 0.2], [-0.5, 0.1], [0.3, -0.2]])
        act = (obs @ weights + torch.tensor([0.0, 0.5])).clamp(
            torch.as_tensor(BOX.low), torch.as_tensor(BOX.high)
        )
    zeros = torch.zeros(n, dtype=torch.bool)
    return Batch(
        obs=obs, act=act, rew=torch.zeros(n), terminated=zeros, truncated=zeros, obs_next=obs
    )


def train(policy: BC, discrete: bool, steps: int) -> list[float]:
    losses = []
    for i in range(steps):
        losses.append(policy.learn(expert_batch(128, discrete, seed=i)).loss.mean)
    return losses


def test_discrete_loss_decreases_and_greedy_actions_match_expert() -> None:
    torch.manual_seed(0)
    policy = BC(OBS_SPACE, gym.spaces.Discrete(2), lr=3e-3)
    losses = train(policy, discrete=True, steps=300)
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])
    test = expert_batch(1000, discrete=True, seed=10_000)
    actions, extras = policy.act(test.obs, deterministic=True)
    assert extras == {} and actions.shape == (1000,)
    assert (actions == test.act).float().mean() > 0.95


def test_continuous_loss_decreases_and_actions_stay_in_bounds() -> None:
    torch.manual_seed(0)
    policy = BC(OBS_SPACE, BOX, lr=3e-3)
    losses = train(policy, discrete=False, steps=400)
    assert np.mean(losses[-20:]) < 0.1 * np.mean(losses[:20])
    assert np.mean(losses[-20:]) < 0.02
    actions, _ = policy.act(torch.randn(1000, 3) * 10)
    assert actions.shape == (1000, 2)
    assert bool((actions >= torch.as_tensor(BOX.low)).all())
    assert bool((actions <= torch.as_tensor(BOX.high)).all())


def test_stochastic_discrete_act_samples_from_the_softmax() -> None:
    policy = BC(OBS_SPACE, gym.spaces.Discrete(3))
    actions, _ = policy.act(torch.zeros(3000, 3))
    assert torch.bincount(actions, minlength=3).min() > 500  # near-uniform at init


def test_learn_returns_typed_stats() -> None:
    stats = BC(OBS_SPACE, gym.spaces.Discrete(2)).learn(expert_batch(8, discrete=True))
    assert isinstance(stats, BCTrainingStats)
    assert set(stats.loss_stats()) == {"loss"}


def test_state_dict_round_trip_includes_optimizer() -> None:
    torch.manual_seed(0)
    policy = BC(OBS_SPACE, BOX)
    train(policy, discrete=False, steps=3)
    clone = BC(OBS_SPACE, BOX)
    clone.load_state_dict(policy.state_dict())
    assert_same_state(policy, clone)
    batch = expert_batch(16, discrete=False, seed=99)
    assert policy.learn(batch).loss.mean == clone.learn(batch).loss.mean


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Box(-np.inf, np.inf, shape=(2,)),
        gym.spaces.Box(-1.0, 1.0, shape=(2, 2)),
        gym.spaces.MultiBinary(3),
    ],
)
def test_constructor_rejects_unsupported_action_spaces(space: gym.Space[object]) -> None:
    with pytest.raises(ValueError, match="action_space"):
        BC(OBS_SPACE, space)


def test_constructor_rejects_dict_observations() -> None:
    obs_space = gym.spaces.Dict({"a": OBS_SPACE})
    with pytest.raises(ValueError, match="observation_space"):
        BC(obs_space, gym.spaces.Discrete(2))
