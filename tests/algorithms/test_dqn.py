"""DQN: acting, TD and n-step targets, dueling head, weighted loss and priorities, resume."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from epochtrain.algorithms import DQN, DQNTrainingStats
from epochtrain.algorithms.dqn import DuelingQNet
from epochtrain.data import Batch, PrioritizedReplayBuffer, ReplayBuffer
from epochtrain.factory import make_trainer
from epochtrain.trainer import OffpolicyTrainer
from tests.algorithms.checks import assert_same_state
from tests.algorithms.tables import Table

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(4,), dtype=np.float32)


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


def test_act_replaces_a_greedy_action_with_a_uniform_one_with_probability_epsilon() -> None:
    # one draw u per env decides (u < epsilon) and picks the action (u / epsilon uniform)
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(3))
    policy.epsilon = 0.3
    obs = torch.randn(20_000, 4)
    torch.manual_seed(0)
    actions, _ = policy.act(obs)
    with torch.no_grad():
        greedy = policy.q_net(obs).argmax(-1)
    changed = float((actions != greedy).float().mean())
    assert changed == pytest.approx(0.3 * 2 / 3, abs=0.015)  # a third of draws hit greedy
    torch.manual_seed(0)
    explored = torch.rand(20_000) < 0.3  # the draws act made
    counts = torch.bincount(actions[explored], minlength=3).float() / int(explored.sum())
    assert counts.tolist() == pytest.approx([1 / 3] * 3, abs=0.02)
    assert torch.equal(actions[~explored], greedy[~explored])


@pytest.mark.parametrize(("double_q", "expected_bootstrap"), [(True, 2.0), (False, 3.0)])
def test_target_double_q_and_termination_masking(double_q: bool, expected_bootstrap: float) -> None:
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(2), gamma=0.5, double_q=double_q)
    policy.q_net = Table([[1.0, 5.0]])  # online picks action 1 at s'
    policy.target_net = Table([[3.0, 2.0]])  # target's own max is action 0
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
    assert_same_state(policy, clone)
    assert clone.n_updates == 5 and clone.epsilon == policy.epsilon
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
        ({"n_step": 0}, "n_step"),
        ({"dueling": True, "hidden": ()}, "hidden"),
        ({"lr_anneal_steps": 0}, "lr_anneal_steps"),
    ],
)
def test_constructor_rejects_bad_hyper_parameters(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DQN(OBS_SPACE, gym.spaces.Discrete(2), **kwargs)


def test_constructor_rejects_continuous_actions_naming_the_space() -> None:
    box = gym.spaces.Box(-1.0, 1.0, shape=(2,))
    with pytest.raises(ValueError, match=r"action_space must be gymnasium.spaces.Discrete.*Box"):
        DQN(OBS_SPACE, box)


# ------------------------------------------------------- n-step, dueling, prioritized
def _chain_buffer(rewards: list[float], terminated_at: int | None) -> ReplayBuffer:
    """One env; obs ``[t, 0, 0, 0]`` -> ``[t + 1, ...]``; reward ``rewards[t]``."""
    buf = ReplayBuffer(16, 1)
    for t, r in enumerate(rewards):
        obs = np.array([[t, 0, 0, 0]], dtype=np.float32)
        buf.add(
            obs,
            np.array([t % 2]),
            np.array([r]),
            np.array([t == terminated_at]),
            np.array([False]),
            obs + np.array([1, 0, 0, 0], dtype=np.float32),
        )
    return buf


def test_n_step_target_and_loss_on_a_hand_computed_example() -> None:
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(2), gamma=0.5, n_step=3, double_q=False)
    # Q(s_t, a) = table[t]; the target network's values at s_3 and s_4 bootstrap
    table = [[0.0, 1.0], [2.0, 0.5], [0.0, 0.0], [4.0, 8.0], [6.0, 2.0], [0.0, 0.0]]
    policy.q_net = Table(table)
    policy.target_net = Table(table)
    policy.optimizers["q"] = torch.optim.SGD(policy.q_net.parameters(), lr=0.0)
    buf = _chain_buffer([1.0, 2.0, 4.0, 8.0, 16.0], terminated_at=3)
    batch = policy.process_sample(buf.get(torch.tensor([0, 1, 2])), buf)
    target = policy.compute_target(batch)
    # t=0: 1 + .5 * 2 + .25 * 4 + .125 * max Q(s_3) = 3 + .125 * 8 = 4
    # t=1: 2 + .5 * 4 + .25 * 8, terminated at t = 3: no bootstrap = 6
    # t=2: 4 + .5 * 8, terminated = 8
    assert target.tolist() == pytest.approx([4.0, 6.0, 8.0])
    stats = policy.learn(batch)
    # q(s_t, a_t) with a_t = t % 2: 0.0, 0.5, 0.0; errors 4, 5.5, 8: Huber |d| - 0.5
    assert stats.loss.mean == pytest.approx((3.5 + 5.0 + 7.5) / 3)
    assert policy.td_abs is not None
    assert policy.td_abs.tolist() == pytest.approx([4.0, 5.5, 8.0])


def test_n_step_one_leaves_the_sample_unchanged() -> None:
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(2))
    buf = _chain_buffer([1.0, 2.0], terminated_at=None)
    batch = buf.get(torch.tensor([0]))
    assert policy.process_sample(batch, buf) is batch


def test_importance_weights_scale_each_sample_loss() -> None:
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(2), gamma=0.5)
    policy.q_net = Table([[0.0, 0.0], [3.0, 0.0]])
    policy.target_net = Table([[0.0, 0.0], [0.0, 0.0]])
    policy.optimizers["q"] = torch.optim.SGD(policy.q_net.parameters(), lr=0.0)
    batch = Batch(
        obs=torch.tensor([[0.0, 0, 0, 0], [1.0, 0, 0, 0]]),
        act=torch.tensor([0, 0]),
        rew=torch.tensor([0.5, 1.0]),
        terminated=torch.tensor([True, True]),
        truncated=torch.tensor([False, False]),
        obs_next=torch.zeros(2, 4),
        weight=torch.tensor([1.0, 0.25]),
    )
    stats = policy.learn(batch)
    # errors 0.5 (Huber 0.125) and 2.0 (Huber 1.5); weighted mean (0.125 + 0.375) / 2
    assert stats.loss.mean == pytest.approx(0.25)
    assert policy.td_abs is not None and policy.td_abs.tolist() == pytest.approx([0.5, 2.0])


def test_post_learn_updates_priorities_of_a_prioritized_buffer_only() -> None:
    torch.manual_seed(0)
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(2), n_step=2)
    per = PrioritizedReplayBuffer(16, 1, alpha=1.0)
    plain = ReplayBuffer(16, 1)
    for buf in (per, plain):
        for t in range(6):
            obs = np.full((1, 4), t, dtype=np.float32)
            buf.add(obs, np.array([0]), np.array([1.0]), np.array([False]), np.array([False]), obs)
    batch = policy.process_sample(per.sample(4), per)
    assert batch.weight is not None and batch.index is not None
    policy.learn(batch)
    policy.post_learn(batch, per)
    assert policy.td_abs is not None
    expected = policy.td_abs.numpy() + per.eps
    for i, p in zip(batch.index.tolist(), expected, strict=True):
        assert per.priorities(torch.tensor([i]))[0] == pytest.approx(p, rel=1e-6)
    policy.post_learn(batch, plain)  # a uniform buffer has nothing to update


@pytest.mark.parametrize("prioritized", [False, True])
def test_sample_batch_draws_the_n_step_batch_process_sample_makes(prioritized: bool) -> None:
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(2), gamma=0.5, n_step=3)
    buf = _chain_buffer([1.0, 2.0, 4.0, 8.0, 16.0, 32.0], terminated_at=3)
    if prioritized:
        per = PrioritizedReplayBuffer(16, 1, alpha=1.0)
        per.load_state_dict(buf.state_dict())
        per.update_priorities(torch.arange(6), torch.arange(1.0, 7.0))
        buf = per
    torch.manual_seed(1)
    fused = policy.sample_batch(buf, 16)
    torch.manual_seed(1)
    two_pass = policy.process_sample(buf.sample(16), buf)
    assert two_pass.discount is not None and two_pass.discount.min() == 0.0  # a cut window
    for name in ("obs", "act", "rew", "terminated", "obs_next", "discount", "index"):
        assert torch.equal(getattr(fused, name), getattr(two_pass, name)), name
    assert (fused.weight is not None) == prioritized
    if fused.weight is not None:
        assert torch.equal(fused.weight, two_pass.weight)


def test_dueling_head_is_value_plus_centred_advantage() -> None:
    torch.manual_seed(0)
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(3), dueling=True, hidden=(16, 8))
    net = policy.q_net
    assert isinstance(net, DuelingQNet)
    obs = torch.randn(5, 4)
    features = net.trunk(obs)
    value, adv = net.value(features), net.advantage(features)
    q = net(obs)
    assert q.shape == (5, 3)
    assert torch.allclose(q, value + adv - adv.mean(-1, keepdim=True), atol=1e-6)
    assert torch.allclose(q.mean(-1, keepdim=True), value, atol=1e-6)  # identifiable V
    actions, _ = policy.act(obs, deterministic=True)
    assert torch.equal(actions, adv.argmax(-1))


def test_dueling_n_step_state_dict_round_trip_includes_optimizer() -> None:
    torch.manual_seed(0)
    kwargs: dict[str, Any] = {"dueling": True, "n_step": 3, "target_update_freq": 100}
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(2), **kwargs)
    for _ in range(3):
        policy.learn(make_batch())
    clone = DQN(OBS_SPACE, gym.spaces.Discrete(2), **kwargs)
    clone.load_state_dict(policy.state_dict())
    assert clone.n_updates == 3
    torch.manual_seed(1)
    a = policy.learn(make_batch(seed=3)).loss.mean
    torch.manual_seed(1)
    b = clone.learn(make_batch(seed=3)).loss.mean
    assert a == b
    plain = DQN(OBS_SPACE, gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match="dueling=True"):
        plain.load_state_dict(policy.state_dict())


def test_factory_builds_a_prioritized_buffer_on_request() -> None:
    trainer = make_trainer(
        "dqn",
        "CartPole-v1",
        prioritized_replay=True,
        priority_alpha=0.5,
        n_step=3,
        max_epoch=4,
        step_per_epoch=1000,
        num_test_envs=1,
    )
    assert isinstance(trainer, OffpolicyTrainer)
    buf = trainer.train_collector.buffer
    assert isinstance(buf, PrioritizedReplayBuffer)
    assert (buf.alpha, buf.beta_start, buf.beta_anneal_steps) == (0.5, 0.4, 4000)
    assert isinstance(trainer.policy, DQN) and trainer.policy.n_step == 3
    with pytest.raises(ValueError, match="prioritized_replay"):
        make_trainer("ppo", "CartPole-v1", prioritized_replay=True)


def test_loading_a_live_state_dict_does_not_share_optimizer_state() -> None:
    space = gym.spaces.Box(-1.0, 1.0, (3,))
    a, b = DQN(space, gym.spaces.Discrete(2)), DQN(space, gym.spaces.Discrete(2))
    a.optimize("q", a.q_net(torch.ones(4, 3)).sum())
    b.load_state_dict(a.state_dict())
    before = {k: v.clone() for k, v in a.optimizers["q"].state_dict()["state"][0].items()}
    b.optimize("q", b.q_net(torch.ones(4, 3)).sum())
    after = a.optimizers["q"].state_dict()["state"][0]
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_lr_anneals_linearly_to_zero_only_when_asked_and_travels_in_the_state_dict() -> None:
    constant = DQN(OBS_SPACE, gym.spaces.Discrete(2), lr=1e-3)
    constant.set_progress(500)
    assert constant.optimizers["q"].param_groups[0]["lr"] == 1e-3
    policy = DQN(OBS_SPACE, gym.spaces.Discrete(2), lr=1e-3, lr_anneal_steps=1000)
    for env_step, expected in [(0, 1e-3), (250, 7.5e-4), (1000, 0.0), (4000, 0.0)]:
        policy.set_progress(env_step)
        assert policy.optimizers["q"].param_groups[0]["lr"] == pytest.approx(expected)
    policy.set_progress(600)
    copy = DQN(OBS_SPACE, gym.spaces.Discrete(2), lr=1e-3, lr_anneal_steps=1000)
    copy.load_state_dict(policy.state_dict())
    assert copy.optimizers["q"].param_groups[0]["lr"] == pytest.approx(4e-4)
