"""Learning checks of the deterministic actor-critic family: TD3 online, TD3+BC offline.

TD3 with the factory's Pendulum-v1 settings must swing the pendulum up within 7k env
steps. TD3+BC learns from a small Pendulum dataset recorded in-test from a scripted
swing-up controller with heavy Gaussian action noise (a "medium" policy, about -450 per
episode) and must reach the dataset policy's return and match behaviour cloning.
Seeded and deterministic on CPU.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from epochtrain.data import ActResult, Collector, Obs, ReplayBuffer
from epochtrain.factory import make_envs, make_trainer

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


def test_td3_swings_up_pendulum_within_7k_env_steps() -> None:
    trainer = make_trainer(
        "td3", "Pendulum-v1", seed=0, stop_fn=None, max_epoch=6, show_progress=False
    )
    info = trainer.run()
    assert info.env_step == 7000  # 1000 warm-up steps and 6 epochs of 1000
    last = trainer.last_test_stat
    assert last is not None and last.returns_stat is not None
    assert last.returns_stat.mean >= -400, last.returns_stat


class NoisySwingUp:
    """Scripted Pendulum-v1 controller: energy pumping, then PD control near the top.

    With ``theta_dd = 15 sin(theta) + 3 u``, the energy ``0.5 w^2 + 15 cos(theta)``
    changes at ``3 u w``: pump with full torque in the direction of ``w`` until the
    upright energy 15 is reached; within ``cos(theta) > 0.85`` a PD law holds the top.
    ``noise`` is the std of Gaussian noise added to every action (then clipped).
    """

    def __init__(self, noise: float) -> None:
        self.noise = noise

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        assert isinstance(obs, torch.Tensor)
        cos, sin, w = obs[:, 0], obs[:, 1], obs[:, 2]
        pump = 2.0 * torch.sign(w * (15.0 - (0.5 * w**2 + 15.0 * cos)))
        hold = -(10.0 * torch.atan2(sin, cos) + 2.0 * w)
        u = torch.where(cos > 0.85, hold, pump)
        if not deterministic:
            u = u + self.noise * torch.randn_like(u)
        return u.clamp(-2.0, 2.0).unsqueeze(-1), {}

    def to_tensor(self, obs: Obs) -> Obs:
        return obs


def final_return(algo: str, data: ReplayBuffer, steps: int) -> float:
    trainer = make_trainer(
        algo,
        "Pendulum-v1",
        seed=0,
        buffer=data,
        stop_fn=None,
        max_epoch=steps // 1000,
        step_per_epoch=1000,
        show_progress=False,
    )
    trainer.run()
    last = trainer.last_test_stat
    assert last is not None and last.returns_stat is not None
    return last.returns_stat.mean


def test_td3bc_reaches_the_dataset_return_and_matches_bc() -> None:
    envs = make_envs("Pendulum-v1", 10)
    data = ReplayBuffer(10_000, 10)
    recorder = Collector(NoisySwingUp(noise=2.0), envs, data)
    recorder.reset(seed=0)
    torch.manual_seed(0)
    recorded = recorder.collect(n_step=10_000)
    dataset_return = float(np.mean(recorded.returns))
    assert -600 <= dataset_return <= -300, dataset_return

    td3bc = final_return("td3bc", data, 4000)
    bc = final_return("bc", data, 2000)
    assert td3bc >= dataset_return, (td3bc, dataset_return)
    assert td3bc >= bc - 50, (td3bc, bc)
