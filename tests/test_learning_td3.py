"""Learning checks of the deterministic actor-critic family: DDPG and TD3 online, TD3+BC offline.

TD3 and DDPG with the factory's Pendulum-v1 settings must swing the pendulum up within 5k
env steps. TD3+BC learns from a small Pendulum dataset recorded in-test from a scripted
swing-up controller with heavy Gaussian action noise (a "medium" policy, about -450 per
episode) and must reach the dataset policy's return and match behaviour cloning.
Seeded and deterministic on CPU.
"""

from __future__ import annotations

import pytest
import torch

from epochtrain.data import ReplayBuffer
from epochtrain.factory import make_trainer
from tests.pendulum_data import record_swing_up

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.parametrize("algo", ["td3", "ddpg"])
def test_swings_up_pendulum_within_5k_env_steps(algo: str) -> None:
    trainer = make_trainer(
        algo, "Pendulum-v1", seed=0, stop_fn=None, max_epoch=9, show_progress=False
    )
    info = trainer.run()
    assert info.env_step == 5000  # 500 warm-up steps and 9 epochs of 500
    last = trainer.last_test_stat
    assert last is not None and last.returns_stat is not None
    assert last.returns_stat.mean >= -400, last.returns_stat


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
    data, dataset_return = record_swing_up(10_000, gaussian=2.0)
    assert -600 <= dataset_return <= -300, dataset_return

    td3bc = final_return("td3bc", data, 4000)
    bc = final_return("bc", data, 2000)
    assert td3bc >= dataset_return, (td3bc, dataset_return)
    assert td3bc >= bc - 50, (td3bc, bc)
