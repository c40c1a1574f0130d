"""RewardNormalizer's running discounted returns follow the training envs' episodes.

Envs that do not pickle restart their episodes on a resume and on a Ctrl-C roll-back; the
abandoned episodes' partial returns must not carry into the new ones. Every env here earns
1.0 per step, so an env ``n`` steps into its episode has the running return
``sum(gamma**i for i < n)``: the hook's ``returns`` must match the collector's ``ep_len``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from epochtrain.trainer import OffpolicyTrainer, RewardNormalizer
from tests.trainer.test_normalizer_resume import NUM_ENVS, Interrupt, hooked_dqn

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GAMMA = 0.9


class Steady(gym.Env[np.ndarray, int]):
    """Reward 1.0 per step over 50-step episodes (longer than an epoch)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.zeros(2, np.float32), 1.0, False, self.t >= 50, {}


class LockedSteady(Steady):
    """``Steady`` holding a lock: its vector env does not pickle (as an ``AsyncVectorEnv``),
    so a resume or a roll-back restarts its episodes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()


def steady_dqn(
    hook: RewardNormalizer, *, pickles: bool, resume_from: Path | None = None
) -> OffpolicyTrainer[Any]:
    """DQN over 3 epochs of 40 env steps (2 envs, 16 warm-up steps)."""
    env_cls = Steady if pickles else LockedSteady
    return hooked_dqn(env_cls, hook, max_epoch=3, resume_from=resume_from)


def expected_returns(trainer: OffpolicyTrainer[Any]) -> np.ndarray:
    """Each training env's discounted return so far in its current episode."""
    ep_len = trainer.train_collector.state_dict()["ep_len"]
    return np.array([sum(GAMMA**i for i in range(n)) for n in ep_len])


def test_a_resume_that_restarts_the_episodes_starts_their_running_returns_at_zero(
    tmp_path: Path,
) -> None:
    first_hook = RewardNormalizer(gamma=GAMMA)
    first = steady_dqn(first_hook, pickles=False)
    next(first)
    assert first_hook.returns.min() > 1.0  # mid-episode: partial returns to abandon
    first.save_checkpoint(tmp_path / "ckpt")
    hook = RewardNormalizer(gamma=GAMMA)
    resumed = steady_dqn(hook, pickles=False, resume_from=tmp_path / "ckpt")
    assert list(resumed.train_collector.state_dict()["ep_len"]) == [0] * NUM_ENVS
    np.testing.assert_array_equal(hook.returns, np.zeros(NUM_ENVS))
    assert hook.rms.count == first_hook.rms.count  # the statistics are kept
    next(resumed)
    np.testing.assert_allclose(hook.returns, expected_returns(resumed))


def test_a_resume_whose_envs_continue_keeps_their_running_returns(tmp_path: Path) -> None:
    first_hook = RewardNormalizer(gamma=GAMMA)
    first = steady_dqn(first_hook, pickles=True)
    next(first)
    first.save_checkpoint(tmp_path / "ckpt")
    hook = RewardNormalizer(gamma=GAMMA)
    resumed = steady_dqn(hook, pickles=True, resume_from=tmp_path / "ckpt")
    np.testing.assert_array_equal(hook.returns, first_hook.returns)
    np.testing.assert_allclose(hook.returns, expected_returns(resumed))


def test_a_ctrl_c_roll_back_that_restarts_the_episodes_starts_their_running_returns_at_zero() -> (
    None
):
    hook = RewardNormalizer(gamma=GAMMA)
    trainer = steady_dqn(hook, pickles=False)
    Interrupt(trainer, "process_optim_batch", epoch=2, at=5)
    next(trainer)
    with pytest.raises(KeyboardInterrupt):
        next(trainer)
    assert trainer.state.epoch == 1
    np.testing.assert_array_equal(hook.returns, np.zeros(NUM_ENVS))
    next(trainer)
    np.testing.assert_allclose(hook.returns, expected_returns(trainer))


def test_a_ctrl_c_roll_back_whose_envs_continue_keeps_their_running_returns() -> None:
    hook = RewardNormalizer(gamma=GAMMA)
    trainer = steady_dqn(hook, pickles=True)
    Interrupt(trainer, "process_optim_batch", epoch=2, at=5)
    next(trainer)
    after_epoch_1 = hook.returns.copy()
    with pytest.raises(KeyboardInterrupt):
        next(trainer)
    np.testing.assert_array_equal(hook.returns, after_epoch_1)
    np.testing.assert_allclose(hook.returns, expected_returns(trainer))
