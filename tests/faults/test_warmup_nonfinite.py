"""NaN in an off-policy warm-up under ``on_nonfinite="stop"`` (or ``"skip"``) ends the run
as NaN in an on-policy run's first collect step does: one ``EpochStats`` (no training, no
test) reporting the env steps made, and ``stop_reason == "nonfinite"``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from epochtrain import DQN, PPO, SAC, Collector, ReplayBuffer
from epochtrain.checkpoint import find_checkpoints
from epochtrain.errors import NonFiniteError
from epochtrain.stats import EpochStats
from epochtrain.trainer import BaseTrainer, OffpolicyTrainer, OnpolicyTrainer
from epochtrain.trainer.params import OffpolicyParams, OnpolicyParams
from tests.faults.envs import FaultyEnv, faulty_vec


class NaNPendulum(gym.Wrapper[np.ndarray, np.ndarray, np.ndarray, np.ndarray]):
    """Pendulum whose observation holds a NaN from its ``at``-th step on (None: never)."""

    def __init__(self, at: int | None) -> None:
        super().__init__(gym.make("Pendulum-v1"))
        self.at, self.steps = at, 0

    def step(self, action: np.ndarray) -> tuple[np.ndarray, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.at is not None and self.steps >= self.at:
            obs = obs.copy()
            obs[1] = np.nan
        return obs, reward, terminated, truncated, info


def nan_vec(algo: str, at: int | None) -> gym.vector.VectorEnv[Any, Any, Any]:
    """Two envs whose sub-env 0 gives NaN at its ``at``-th step: FaultyEnv (Discrete
    actions) for DQN and PPO, Pendulum (Box actions) for SAC."""
    if algo != "sac":
        return faulty_vec(2, bad=0 if at is not None else -1, fault="nan_obs", fault_at=at or 1)
    return gym.vector.SyncVectorEnv(
        [lambda: NaNPendulum(at), lambda: NaNPendulum(None)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )


def trainer_of(algo: str, at: int | None, **params: Any) -> BaseTrainer[Any]:
    """A small trainer of ``algo`` (off-policy: 40 warm-up steps) tested on clean envs."""
    torch.manual_seed(0)
    envs, test_envs = nan_vec(algo, at), nan_vec(algo, None)
    cls = {"dqn": DQN, "sac": SAC, "ppo": PPO}[algo]
    policy = cls(envs.single_observation_space, envs.single_action_space, hidden=(16,))
    common: dict[str, Any] = dict(
        max_epoch=3, step_per_epoch=40, step_per_collect=20, batch_size=16, episode_per_test=1,
        show_progress=False, seed=3,
    )  # fmt: skip
    common.update(params)
    test_collector = Collector(policy, test_envs, exploration=False)
    if algo == "ppo":
        return OnpolicyTrainer(
            policy=policy,
            params=OnpolicyParams(repeat_per_collect=1, **common),
            train_collector=Collector(policy, envs, ReplayBuffer(40, 2)),
            test_collector=test_collector,
        )
    return OffpolicyTrainer(
        policy=policy,
        params=OffpolicyParams(warmup_steps=40, update_per_step=0.5, **common),
        train_collector=Collector(policy, envs, ReplayBuffer(1000, 2)),
        test_collector=test_collector,
    )


def shape(stats: list[EpochStats[Any]]) -> list[tuple[Any, ...]]:
    """What each epoch reports, timings aside."""
    return [
        (
            s.epoch,
            s.info_stat.env_step,
            s.info_stat.gradient_step,
            s.train_collect_stat,
            s.test_collect_stat,
            s.training_stat,
        )
        for s in stats
    ]


@pytest.mark.parametrize("on_nonfinite", ["stop", "skip"])
@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_nan_in_the_warm_up_yields_one_epoch_reporting_the_steps_made(
    tmp_path: Path, algo: str, on_nonfinite: str
) -> None:
    trainer = trainer_of(algo, at=5, on_nonfinite=on_nonfinite, checkpoint_dir=str(tmp_path))
    stats = list(trainer)
    # 4 rows of 2 envs before sub-env 0's 5th step: 8 env steps made, none trained on
    assert shape(stats) == [(1, 8, 0, None, None, None)]
    assert trainer.stop_reason == "nonfinite" and trainer.state.env_step == 8
    message = trainer.nonfinite_message or ""
    assert "observation of sub-env 0" in message
    assert "at env step 8 of the random warm-up" in message
    with pytest.raises(StopIteration):
        next(trainer)
    assert find_checkpoints(tmp_path) == []  # no checkpoint of a run ended by NaN


@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_nan_in_the_warm_up_is_reported_as_nan_in_an_on_policy_first_collect_is(
    algo: str,
) -> None:
    onpolicy = trainer_of("ppo", at=5, on_nonfinite="stop")
    offpolicy = trainer_of(algo, at=5, on_nonfinite="stop")
    on_stats, off_stats = list(onpolicy), list(offpolicy)
    assert shape(off_stats) == shape(on_stats) == [(1, 8, 0, None, None, None)]
    assert offpolicy.stop_reason == onpolicy.stop_reason == "nonfinite"


@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_nan_in_the_warm_up_under_raise_raises_before_any_epoch(algo: str) -> None:
    trainer = trainer_of(algo, at=5)
    with pytest.raises(NonFiniteError, match=r"at env step 8 of the random warm-up \(epoch 0\)"):
        next(trainer)
    assert trainer.state.epoch == 0


def test_a_warm_up_without_nan_still_precedes_a_full_first_epoch() -> None:
    trainer = trainer_of("dqn", at=200, on_nonfinite="stop", max_epoch=1)
    stats = list(trainer)
    assert [s.info_stat.env_step for s in stats] == [80]  # 40 warm-up + 40 in epoch 1
    assert stats[0].train_collect_stat is not None and trainer.stop_reason == "max_epoch"


class NaNAtReset(FaultyEnv):
    """A FaultyEnv whose every reset's observation holds a NaN."""

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(**kwargs)
        obs[1] = np.nan
        return obs, info


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_nan_at_the_first_reset_or_in_the_test_before_training_yields_epoch_one(
    algo: str,
) -> None:
    trainer = trainer_of(algo, at=None, on_nonfinite="stop")
    trainer.train_collector.env = gym.vector.SyncVectorEnv(
        [NaNAtReset, NaNAtReset], autoreset_mode=AutoresetMode.SAME_STEP
    )
    assert shape(list(trainer)) == [(1, 0, 0, None, None, None)]  # no step made, as reported
    assert trainer.stop_reason == "nonfinite" and "sub-env 0" in (trainer.nonfinite_message or "")

    trainer = trainer_of(algo, at=None, on_nonfinite="stop", test_before_train=True)
    assert trainer.test_collector is not None
    trainer.test_collector.env = nan_vec(algo, 3)
    stats = list(trainer)
    assert [s.epoch for s in stats] == [1] and trainer.stop_reason == "nonfinite"
