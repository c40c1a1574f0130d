"""n-step returns in the continuous actor-critics (SAC, CQL, DDPG, TD3, TD3+BC).

Each is checked on a hand-built chain of transitions against the n-step formula
``sum_k gamma**k r[t + k] + gamma**m * V(s[t + m])``, with ``V`` read off the policy's own
one-step target at ``s[t + m]`` (the same random draws, from the same torch seed).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor

from epochtrain.algorithms import CQL, DDPG, SAC, TD3, TD3BC
from epochtrain.algorithms.base import Policy
from epochtrain.data import Batch, ReplayBuffer
from epochtrain.factory import make_trainer

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32)
ACT_SPACE = gym.spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32)
POLICIES: dict[str, Any] = {"sac": SAC, "cql": CQL, "ddpg": DDPG, "td3": TD3, "td3bc": TD3BC}
REWARDS = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]


def chain_buffer(terminated_at: int | None) -> ReplayBuffer:
    """One env; obs ``[t, t/2, 1]`` -> obs at ``t + 1``; reward ``REWARDS[t]``."""
    buf = ReplayBuffer(16, 1)
    for t, r in enumerate(REWARDS):
        buf.add(
            np.array([[t, t / 2, 1]], dtype=np.float32),
            np.array([[0.1 * t]], dtype=np.float32),
            np.array([r]),
            np.array([t == terminated_at]),
            np.array([False]),
            np.array([[t + 1, (t + 1) / 2, 1]], dtype=np.float32),
        )
    return buf


def target(policy: Policy[Any], batch: Batch) -> Tensor:
    """The policy's TD target of ``batch``, with torch's random stream reset first."""
    torch.manual_seed(7)
    if isinstance(policy, SAC | CQL):
        return policy.compute_target(batch)
    assert isinstance(policy, DDPG | TD3 | TD3BC)
    return policy.compute_target(batch, policy.preprocess_obs(batch.obs_next))


@pytest.mark.parametrize("algo", sorted(POLICIES))
def test_n_step_target_is_the_discounted_reward_sum_plus_the_discounted_bootstrap(
    algo: str,
) -> None:
    torch.manual_seed(0)
    policy = POLICIES[algo](OBS_SPACE, ACT_SPACE, hidden=(8,), gamma=0.5, n_step=3)
    buf = chain_buffer(terminated_at=3)
    batch = policy.process_sample(buf.get(torch.tensor([0, 1, 2, 4])), buf)
    # t=0: 1 + .5*2 + .25*4, bootstraps from s_3 with .125; t=1, 2: the episode ends at
    # t=3 (terminated): no bootstrap; t=4: the newest rows end at t=5, so 2 steps
    assert batch.rew.tolist() == pytest.approx([3.0, 6.0, 8.0, 32.0])
    assert batch.obs_next[:, 0].tolist() == [3.0, 4.0, 4.0, 6.0]
    one_step_values = dataclasses.replace(
        batch, rew=torch.zeros(4), terminated=torch.zeros(4, dtype=torch.bool), discount=None
    )
    values = target(policy, one_step_values) / 0.5  # V(s') of the one-step target
    expected = batch.rew + torch.tensor([0.125, 0.0, 0.0, 0.25]) * values
    assert torch.allclose(target(policy, batch), expected)
    assert not torch.allclose(values[[0, 3]], torch.zeros(2))  # the bootstrap counted


@pytest.mark.parametrize("algo", sorted(POLICIES))
def test_n_step_one_leaves_the_sample_unchanged(algo: str) -> None:
    policy = POLICIES[algo](OBS_SPACE, ACT_SPACE, hidden=(8,))
    assert policy.n_step == 1
    buf = chain_buffer(terminated_at=None)
    batch = buf.get(torch.tensor([0, 1]))
    out = policy.process_sample(batch, buf)
    assert torch.equal(out.rew, batch.rew) and out.discount is None


@pytest.mark.parametrize("algo", sorted(POLICIES))
def test_constructor_rejects_n_step_below_one_naming_it(algo: str) -> None:
    with pytest.raises(ValueError, match="n_step"):
        POLICIES[algo](OBS_SPACE, ACT_SPACE, n_step=0)


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_an_n_step_run_trains_from_n_step_samples(
    algo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = make_trainer(
        algo, "Pendulum-v1", n_step=3, hidden=(16,), max_epoch=1, step_per_epoch=64,
        warmup_steps=64, batch_size=16, update_per_step=1.0, show_progress=False,
        stop_fn=None,
    )  # fmt: skip
    seen: list[Batch] = []
    learn = trainer.policy.learn

    def spy(batch: Batch) -> Any:
        seen.append(batch)
        return learn(batch)

    monkeypatch.setattr(trainer.policy, "learn", spy)
    trainer.run()
    assert len(seen) == 64
    assert all(b.discount is not None for b in seen)
    # Pendulum never terminates: every factor is gamma**m for m in 1..3
    factors = torch.cat([b.discount for b in seen if b.discount is not None]).unique()
    gamma = trainer.policy.gamma
    powers = torch.tensor([gamma**m for m in (1, 2, 3)])
    assert all(torch.isclose(f, powers).any() for f in factors)
    assert factors.min().item() == pytest.approx(gamma**3)


@pytest.mark.parametrize("algo", sorted(POLICIES))
def test_sample_batch_draws_n_step_transitions_as_process_sample_makes_them(algo: str) -> None:
    """The trainer's ``sample_batch`` (n-step transitions gathered once) gives the batch
    ``process_sample`` makes of a plain sample with the same seed, and ``process_sample``
    leaves a batch already of n-step transitions as it is."""
    policy: Policy[Any] = POLICIES[algo](OBS_SPACE, ACT_SPACE, n_step=3, gamma=0.5)
    assert policy.replay_n_step() == (3, 0.5)
    buf = chain_buffer(terminated_at=3)
    torch.manual_seed(0)
    fused = policy.sample_batch(buf, 32)
    torch.manual_seed(0)
    two_pass = policy.process_sample(buf.sample(32), buf)
    for name in ("obs", "act", "rew", "terminated", "obs_next", "discount", "index"):
        assert torch.equal(getattr(fused, name), getattr(two_pass, name)), name
    assert policy.process_sample(fused, buf) is fused


def test_sample_batch_still_runs_a_subclass_process_sample() -> None:
    """TD3+BC computes its observation statistics in ``process_sample``: drawing through
    ``sample_batch`` still does."""
    policy = TD3BC(OBS_SPACE, ACT_SPACE, n_step=2, normalize_obs=True)
    assert not policy.obs_stats_ready
    batch = policy.sample_batch(chain_buffer(terminated_at=None), 8)
    assert policy.obs_stats_ready and batch.discount is not None
