"""Learning smoke tests of the SAC family: SAC swings Pendulum up; CQL beats its dataset.

Slow (tens of seconds each on one thread); seeded and deterministic on CPU. The full
learning bars (5 seeds, the factory's budgets) live in ``benchmarks/learning.py``.
"""

from __future__ import annotations

import pytest
import torch

from epochtrain.algorithms import CQL, SAC
from epochtrain.data import ActResult, Collector, Obs, ReplayBuffer
from epochtrain.factory import make_envs, make_trainer

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


def test_sac_swings_pendulum_up_within_6000_env_steps() -> None:
    trainer = make_trainer(
        "sac",
        "Pendulum-v1",
        seed=0,
        max_epoch=6,
        stop_fn=lambda best: best >= -300.0,
        show_progress=False,
    )
    assert isinstance(trainer.policy, SAC)
    info = trainer.run()
    assert info.best_test_return >= -300.0, info
    assert info.env_step <= 6000


class NoisySwingUp:
    """Scripted Pendulum controller; each action is uniform instead with prob. ``noise``.

    Energy pumping (``H = v^2 / 2 + 15 cos(theta)``, 15 at rest upright) far from the
    top, a PD law near it. Alone it scores about -155; with ``noise=0.5`` about -490.
    """

    def __init__(self, noise: float) -> None:
        self.noise = noise

    def to_tensor(self, obs: Obs) -> Obs:
        return obs

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        assert isinstance(obs, torch.Tensor)
        cos, sin, vel = obs[:, 0], obs[:, 1], obs[:, 2]
        energy = 0.5 * vel**2 + 15.0 * cos
        pump = 2.0 * torch.where(vel >= 0, 1.0, -1.0) * torch.sign(15.0 - energy)
        pd = -10.0 * torch.atan2(sin, cos) - 2.0 * vel
        u = torch.where(cos > 0.9, pd, pump).clamp(-2.0, 2.0)
        explore = torch.rand_like(u) < self.noise
        u = torch.where(explore, torch.rand_like(u) * 4.0 - 2.0, u)
        return u.unsqueeze(-1), {}


def record_dataset(n_steps: int, noise: float) -> tuple[ReplayBuffer, float]:
    """``n_steps`` transitions of the noisy controller and its mean episode return."""
    envs = make_envs("Pendulum-v1", 10)
    dataset = ReplayBuffer(n_steps, 10)
    recorder = Collector(NoisySwingUp(noise), envs, dataset)
    recorder.reset(seed=0)
    torch.manual_seed(0)
    stats = recorder.collect(n_step=n_steps)
    return dataset, float(stats.returns.mean())


def test_cql_beats_the_policy_that_recorded_its_dataset() -> None:
    """4000 gradient steps; faster settings than the paper's (lr 1e-3, 4 sampled actions)."""
    dataset, dataset_return = record_dataset(10_000, noise=0.5)
    assert -600.0 < dataset_return < -400.0  # a "medium" dataset
    trainer = make_trainer(
        "cql",
        "Pendulum-v1",
        seed=0,
        buffer=dataset,
        hidden=(64, 64),
        actor_lr=1e-3,
        critic_lr=1e-3,
        alpha_lr=1e-3,
        n_action_samples=4,
        max_epoch=8,
        step_per_epoch=500,
        stop_fn=None,
        show_progress=False,
    )
    assert isinstance(trainer.policy, CQL)
    trainer.run()
    last = trainer.last_test_stat
    assert last is not None and last.returns_stat is not None
    assert last.returns_stat.mean >= dataset_return, (last.returns_stat, dataset_return)
