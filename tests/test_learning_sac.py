"""Learning smoke tests of the SAC family: SAC swings Pendulum up; CQL beats its dataset.

Slow (tens of seconds each on one thread); seeded and deterministic on CPU. The full
learning bars (5 seeds, the factory's budgets) live in ``benchmarks/learning.py``.
"""

from __future__ import annotations

import pytest
import torch

from epochtrain.algorithms import CQL, SAC
from epochtrain.factory import make_trainer
from tests.pendulum_data import record_swing_up

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


def test_sac_swings_pendulum_up_within_6000_env_steps() -> None:
    trainer = make_trainer(
        "sac",
        "Pendulum-v1",
        seed=0,
        max_epoch=11,
        stop_fn=lambda best: best >= -300.0,
        show_progress=False,
    )
    assert isinstance(trainer.policy, SAC)
    info = trainer.run()
    assert info.best_test_return >= -300.0, info
    assert info.env_step <= 6000  # 500 warm-up steps and up to 11 epochs of 500
    # a gradient step every second env step (the preset), fractions carried over
    assert info.gradient_step == (info.env_step - 500) // 2


def test_cql_beats_the_policy_that_recorded_its_dataset() -> None:
    """4000 gradient steps; faster settings than the paper's (lr 1e-3, 4 sampled actions)."""
    dataset, dataset_return = record_swing_up(10_000, uniform=0.5)
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
