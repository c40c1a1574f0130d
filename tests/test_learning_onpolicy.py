"""Learning smoke tests of the on-policy family: PG and A2C on CartPole, Gaussian PPO on Pendulum.

Slow (tens of seconds each on one thread); each runs the factory's tuned defaults for one
seed and stops as soon as a 10-episode deterministic test reaches the threshold. Runs are
seeded and deterministic on CPU; the budgets leave room above what seed 0 needs.
"""

from __future__ import annotations

import time

import pytest
import torch

from epochtrain.factory import make_trainer

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.parametrize(
    ("algo", "env_id", "threshold", "max_env_step"),
    [
        ("pg", "CartPole-v1", 475.0, 200_000),
        ("a2c", "CartPole-v1", 475.0, 200_000),
        ("ppo", "Pendulum-v1", -300.0, 100_000),
    ],
)
def test_reaches_threshold(algo: str, env_id: str, threshold: float, max_env_step: int) -> None:
    trainer = make_trainer(
        algo,
        env_id,
        seed=0,
        stop_fn=lambda best: best >= threshold,
        show_progress=False,
    )
    start = time.perf_counter()
    info = trainer.run()
    seconds = time.perf_counter() - start
    assert trainer.stop_reason == "stop_fn", (info, seconds)
    assert info.best_test_return >= threshold
    assert info.env_step <= max_env_step
