"""N-step returns across a resume (or a Ctrl-C roll-back) whose envs cannot be saved.

Such envs (``AsyncVectorEnv``, EnvPool, sync envs that do not pickle) restart their
episodes with a seeded reset; the buffer's newest row of each env from before then must end
its episode (truncated: its ``obs_next`` is real), or the n-step windows of the rows before
it run on into the new episode.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from epochtrain import make_trainer
from epochtrain.data import ReplayBuffer
from epochtrain.trainer import BaseTrainer, OnlineTrainer

ENV_ID = "epochtrain-test/UnpicklableCounting-v0"
EPISODE_STEPS = 100
"""Longer than any training episode here: only the test episodes reach it."""
GAMMA = 0.5


class UnpicklableCountingEnv(gym.Env[np.ndarray, np.int64]):
    """Observes ``[t]`` (steps since its reset) and pays ``t + 1`` for the step from ``t``,
    whatever the action. Holds a lock, so a vector env of it does not pickle (as an
    ``AsyncVectorEnv`` does not): a resume restarts its episodes."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1e6, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.lock = threading.Lock()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.array([self.t], dtype=np.float32), float(self.t), False, False, {}


if ENV_ID not in gym.registry:
    gym.register(
        ENV_ID, entry_point=f"{__name__}:UnpicklableCountingEnv", max_episode_steps=EPISODE_STEPS
    )

SETTINGS: dict[str, Any] = {
    "max_epoch": 2,
    "step_per_epoch": 32,
    "step_per_collect": 8,
    "warmup_steps": 16,
    "batch_size": 8,
    "buffer_size": 400,
    "num_envs": 2,
    "n_step": 3,
    "num_test_envs": 1,
    "episode_per_test": 1,
    "show_progress": False,
    "loggers": [],
    "stop_fn": None,
}
ROWS_PER_EPOCH = 24
"""Buffer rows (vector steps) of epoch 1: 16 warm-up and 32 training env steps over 2 envs."""


def _dqn(**extra: Any) -> BaseTrainer[Any]:
    return make_trainer("dqn", ENV_ID, seed=0, **SETTINGS, **extra)


def _buffer(trainer: BaseTrainer[Any]) -> ReplayBuffer:
    assert isinstance(trainer, OnlineTrainer) and trainer.train_collector.buffer is not None
    return trainer.train_collector.buffer


def _assert_episodes_end_at_the_seam(buffer: ReplayBuffer, seam: int) -> None:
    """Row ``seam - 1`` (t = seam - 1 in both envs) ends its episode, truncated; row
    ``seam`` starts the next at t = 0; n-step sums (n = 3) stop at the seam."""
    assert buffer.cursor > seam + 3  # the resumed run wrote past the seam
    last = seam - 1
    rows = torch.tensor([last - 2, last - 1, last, seam])
    flat = (rows[:, None] * 2 + torch.arange(2)).reshape(-1)  # both envs, row by row
    one = buffer.get(flat)
    assert isinstance(one.obs, torch.Tensor)
    assert one.obs[:, 0].tolist() == [last - 2] * 2 + [last - 1] * 2 + [last] * 2 + [0, 0]
    assert one.truncated.tolist() == [False] * 4 + [True, True] + [False] * 2
    assert not bool(one.terminated.any())
    got = buffer.get(flat, n_step=3, gamma=GAMMA)
    # the step from t pays t + 1; the window of row t stops at row `last` (t = last)
    r = float(last)  # the reward of the step from last - 1
    expected_rew = [
        *[(r - 1) + GAMMA * r + GAMMA**2 * (r + 1)] * 2,
        *[r + GAMMA * (r + 1)] * 2,
        *[r + 1] * 2,
        *[1 + GAMMA * 2 + GAMMA**2 * 3] * 2,  # the new episode: rewards 1, 2, 3
    ]
    assert got.rew.tolist() == pytest.approx(expected_rew)
    assert got.discount is not None
    assert got.discount.tolist() == pytest.approx(
        [GAMMA**3] * 2 + [GAMMA**2] * 2 + [GAMMA] * 2 + [GAMMA**3] * 2
    )
    assert isinstance(got.obs_next, torch.Tensor)
    assert got.obs_next[:, 0].tolist() == [last + 1] * 6 + [3, 3]
    assert got.truncated.tolist() == [True] * 6 + [False] * 2


def test_a_resume_that_restarts_the_envs_ends_their_buffered_episodes(tmp_path: Path) -> None:
    trainer = _dqn(checkpoint_dir=str(tmp_path / "ckpt"))
    next(trainer)
    trainer.close()
    del trainer  # it holds its checkpoint_dir until dropped
    resumed = _dqn(checkpoint_dir=str(tmp_path / "ckpt"), resume_from=str(tmp_path / "ckpt"))
    buffer = _buffer(resumed)
    assert buffer.cursor == ROWS_PER_EPOCH
    next(resumed)
    resumed.close()
    _assert_episodes_end_at_the_seam(buffer, ROWS_PER_EPOCH)


def test_a_ctrl_c_roll_back_that_restarts_the_envs_ends_their_buffered_episodes() -> None:
    calls = [0]

    def interrupt(epoch: int, env_step: int) -> None:
        calls[0] += 1
        if epoch == 2 and calls[0] == 7:  # two collect steps into epoch 2 (4 per epoch)
            raise KeyboardInterrupt

    trainer = _dqn(train_fn=interrupt)
    next(trainer)
    with pytest.raises(KeyboardInterrupt):
        next(trainer)
    buffer = _buffer(trainer)
    assert trainer.state.epoch == 1 and buffer.cursor == ROWS_PER_EPOCH
    next(trainer)
    trainer.close()
    _assert_episodes_end_at_the_seam(buffer, ROWS_PER_EPOCH)
