"""DQN: acting, TD targets (double-Q, termination vs truncation), target sync, schedules."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor, nn

from epochtrain.algorithms import DQN, DQNTrainingStats
from epochtrain.data import Batch

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(4,), dtype=np.float32)


class TableQ(nn.Module):
    """Q values looked up by the integer in the first observation entry."""

    def __init__(self, table: list[list[float]]) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.tensor(table))

    def forward(self, obs: Tensor) -> Tensor:
        return self.table[obs[:, 0].long()]


def make_batch(n: int = 8, seed: int = 0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    return Batch(
        obs=torch.randn(n, 4, generator=gen),
        act=torch.randint(2, (n,), generator=gen),
        rew=torch.ones(n),
        terminated=torch.zeros(n, dtype=torch.bool),
        truncated=torch.zeros(n, dtype=torch.bool),
        obs_next=torch.randn(n, 4, generator=gen),
    )


def test_act_shapes_and_greedy_when_deterministic() -> None:
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(3))
    obs = torch.randn(5, 4)
    actions, extras = policy.act(obs, deterministic=True)
    assert actions.shape == (5,) and actions.dtype == torch.int64
    assert extras == {}
    assert torch.equal(actions, policy.q_net(obs).argmax(-1))


def test_act_explores_uniformly_with_epsilon_one() -> None:
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(3), epsilon_start=1.0)
    policy.set_progress(0)
    actions, _ = policy.act(torch.zeros(3000, 4))
    counts = torch.bincount(actions, minlength=3)
    assert counts.min() > 800


@pytest.mark.parametrize(("double_q", "expected_bootstrap"), [(True, 2.0), (False, 3.0)])
def test_target_double_q_and_termination_masking(double_q: bool, expected_bootstrap: float) -> None:
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(2), gamma=0.5, double_q=double_q)
    policy.q_net = TableQ([[1.0, 5.0]])  # online picks action 1 at s'
    policy.target_net = TableQ([[3.0, 2.0]])  # target's own max is action 0
    batch = Batch(
        obs=torch.zeros(3, 4),
        act=torch.zeros(3, dtype=torch.int64),
        rew=torch.tensor([1.0, 1.0, 1.0]),
        terminated=torch.tensor([False, True, False]),
        truncated=torch.tensor([False, False, True]),
        obs_next=torch.zeros(3, 4),
    )
    target = policy.compute_target(batch)
    bootstrapped = 1.0 + 0.5 * expected_bootstrap
    # row 1 terminated: no bootstrap; row 2 truncated: still bootstraps
    assert target.tolist() == pytest.approx([bootstrapped, 1.0, bootstrapped])


def test_target_network_hard_update_after_target_update_freq_steps() -> None:
    torch.manual_seed(0)
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(2), target_update_freq=3, lr=1e-2)
    batch = make_batch()

    def same() -> bool:
        online, target = policy.q_net.state_dict(), policy.target_net.state_dict()
        return all(torch.equal(online[k], target[k]) for k in online)

    assert same()
    policy.learn(batch)
    policy.learn(batch)
    assert not same()
    policy.learn(batch)
    assert same() and policy.n_updates == 3
    policy.learn(batch)
    assert not same()


def test_epsilon_schedule_is_linear_in_env_steps_then_flat() -> None:
    policy = DQN(
        OBS_SPACE,
        gym.spaces.Discrete(2),
        epsilon_start=1.0,
        epsilon_end=0.1,
        epsilon_decay_steps=100,
    )
    expected = {0: 1.0, 50: 0.55, 100: 0.1, 1000: 0.1}
    for step, eps in expected.items():
        policy.set_progress(step)
        assert policy.epsilon == pytest.approx(eps)


def test_learn_returns_typed_stats() -> None:
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(2))
    stats = policy.learn(make_batch())
    assert isinstance(stats, DQNTrainingStats)
    assert set(stats.loss_stats()) == {"loss", "q_mean", "epsilon"}
    assert np.isfinite(stats.loss.mean)


def test_state_dict_round_trip_includes_optimizer_and_counter() -> None:
    torch.manual_seed(0)
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(2), target_update_freq=100)
    for _ in range(5):
        policy.learn(make_batch())
    policy.set_progress(4000)
    state = policy.state_dict()
    clone = DQN(OBS_SPACE, gym.spaces.Discrete(2), target_update_freq=100)
    clone.load_state_dict(state)
    for k, v in policy.state_dict().items():
        if isinstance(v, Tensor):
            assert torch.equal(v, clone.state_dict()[k]), k
    assert clone.n_updates == 5 and clone.epsilon == policy.epsilon
    opt_a = policy.optimizers["q"].state_dict()["state"]
    opt_b = clone.optimizers["q"].state_dict()["state"]
    assert opt_a.keys() == opt_b.keys() and len(opt_a) > 0
    for k in opt_a:
        assert torch.equal(opt_a[k]["exp_avg"], opt_b[k]["exp_avg"])
    # both continue identically
    torch.manual_seed(1)
    a = policy.learn(make_batch(seed=3)).loss.mean
    torch.manual_seed(1)
    b = clone.learn(make_batch(seed=3)).loss.mean
    assert a == b


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gamma": 1.5}, "gamma"),
        ({"lr": 0.0}, "lr"),
        ({"target_update_freq": 0}, "target_update_freq"),
        ({"epsilon_end": -0.1}, "epsilon_end"),
    ],
)
def test_constructor_rejects_bad_hyper_parameters(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DQN(OBS_SPACE, gym.spaces.Discrete(2), **kwargs)


def test_constructor_rejects_continuous_actions_naming_the_space() -> None:
    box = gym.spaces.Box(-1.0, 1.0, shape=(2,))
    with pytest.raises(ValueError, match=r"action_space must be gymnasium.spaces.Discrete.*Box"):
        DQN(OBS_SPACE, box)
