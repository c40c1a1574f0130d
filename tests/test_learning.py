"""Learning checks: DQN and PPO solve CartPole-v1; BC recovers a scripted expert.

Slow (seconds to tens of seconds each) but run by default. Runs are seeded and
deterministic on CPU; the budgets in env steps leave several times the usual need.
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from epochtrain.algorithms import BC
from epochtrain.data import ActResult, Collector, Obs, ReplayBuffer
from epochtrain.factory import make_trainer
from epochtrain.trainer import OfflineParams, OfflineTrainer

pytestmark = pytest.mark.slow

SOLVED = 475.0


def make_envs(n: int) -> gym.vector.VectorEnv:
    return gym.make_vec(
        "CartPole-v1",
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.parametrize(("algo", "seed"), [("ppo", 0), ("dqn", 0)])
def test_solves_cartpole(algo: str, seed: int) -> None:
    trainer = make_trainer(algo, "CartPole-v1", seed=seed, max_epoch=50, show_progress=False)
    start = time.perf_counter()
    info = trainer.run()
    seconds = time.perf_counter() - start
    assert trainer.stop_reason == "stop_fn", (info, seconds)
    assert info.best_test_return >= SOLVED
    assert trainer.last_test_stat is not None and trainer.last_test_stat.n_collected_episodes == 10


class PoleBalancer:
    """Scripted CartPole expert: push towards the side the pole is falling to (PD law)."""

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        assert isinstance(obs, torch.Tensor)
        gains = torch.tensor([0.1, 0.5, 3.0, 1.0])
        return (obs.float() @ gains > 0).long(), {}

    def to_tensor(self, obs: Obs) -> Obs:
        return obs


def test_expert_scores_near_500() -> None:
    collector = Collector(PoleBalancer(), make_envs(10), exploration=False)
    collector.reset(seed=0)
    assert collector.collect(n_episode=10).returns.mean() >= 495


def test_bc_recovers_the_scripted_expert() -> None:
    envs = make_envs(10)
    dataset = ReplayBuffer(10_000, 10)
    recorder = Collector(PoleBalancer(), envs, dataset)
    recorder.reset(seed=0)
    expert = recorder.collect(n_step=10_000)
    assert dataset.n_valid == 10_000 and expert.n_collected_steps == 10_000

    torch.manual_seed(0)
    policy = BC(envs.single_observation_space, envs.single_action_space, lr=3e-3)
    trainer = OfflineTrainer(
        policy=policy,
        buffer=dataset,
        test_collector=Collector(policy, make_envs(10), exploration=False),
        stop_fn=lambda best: best >= 0.9 * 500,
        params=OfflineParams(batch_size=256, max_epoch=10, step_per_epoch=500, show_progress=False),
    )
    info = trainer.run()
    assert info.best_test_return >= 0.9 * 500, info
    assert np.isfinite(info.best_test_return)
