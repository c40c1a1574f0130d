"""ObservationNormalizer across resumes and Ctrl-C roll-backs: what its statistics hold.

A resume with envs that pickle, and a roll-back, continue the uninterrupted run bit for bit
(weights and statistics). Envs that do not pickle restart their episodes: the new first
observations are folded into the restored statistics, once, after the restore. When no
episode had started (a Ctrl-C inside the first epoch, a checkpoint saved before it) the
run's own start resets the envs, and the statistics hold no observation of the restart.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from epochtrain import DQN, Collector, ReplayBuffer
from epochtrain.trainer import BaseTrainer, ObservationNormalizer, OffpolicyTrainer
from epochtrain.trainer.data_hooks import RunningMeanStd
from epochtrain.trainer.hooks import TrainerHook
from epochtrain.trainer.params import OffpolicyParams
from tests import resume_cases
from tests.trainer.test_base import comparable
from tests.trainer.test_obs_normalizer_offpolicy import Drift

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NUM_ENVS = 2
FRESH_COUNT = 1e-4  # RunningMeanStd's count before any data


class LockedDrift(Drift):
    """``Drift`` holding a lock: its vector env does not pickle, so a checkpoint holds no
    env snapshot and a resume restarts the episodes (as for an ``AsyncVectorEnv``), in
    this process. Every episode starts at the observation ``[5.0] * 4``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()


def locked_envs() -> gym.vector.VectorEnv[Any, Any, Any]:
    return gym.vector.SyncVectorEnv(
        [LockedDrift] * NUM_ENVS, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


def hooked_dqn(
    env_cls: type[gym.Env[Any, Any]],
    hook: TrainerHook,
    *,
    max_epoch: int,
    async_collection: bool = False,
    resume_from: Path | None = None,
) -> OffpolicyTrainer[Any]:
    """DQN with ``hook`` on :data:`NUM_ENVS` envs of ``env_cls`` (and as many test envs):
    epochs of 40 env steps, 10 per collect step, after 16 warm-up steps."""
    torch.manual_seed(0)

    def envs() -> gym.vector.VectorEnv[Any, Any, Any]:
        return gym.vector.SyncVectorEnv(
            [env_cls] * NUM_ENVS, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
        )

    train_envs = envs()
    policy = DQN(train_envs.single_observation_space, train_envs.single_action_space, hidden=(8,))
    params = OffpolicyParams(
        max_epoch=max_epoch, step_per_epoch=40, step_per_collect=10, update_per_step=0.5,
        batch_size=8, warmup_steps=16, episode_per_test=2, show_progress=False, seed=1,
        async_collection=async_collection,
        resume_from=None if resume_from is None else str(resume_from),
    )  # fmt: skip
    return OffpolicyTrainer(
        policy=policy,
        params=params,
        train_collector=Collector(policy, train_envs, ReplayBuffer(400, NUM_ENVS)),
        test_collector=Collector(policy, envs(), exploration=False),
        hooks=[hook],
    )


def drift_dqn(
    norm: ObservationNormalizer, *, async_collection: bool, resume_from: Path | None = None
) -> OffpolicyTrainer[Any]:
    """DQN on envs that do not pickle: 2 epochs of 40 env steps, 10 per collect step."""
    return hooked_dqn(
        LockedDrift, norm, max_epoch=2, async_collection=async_collection, resume_from=resume_from
    )


CASES = {
    "ppo": ("ppo", {}),
    "dqn": ("dqn", {}),
    "dqn-async-collection": ("dqn", {"async_collection": True}),
    "sac-async-collection": ("sac", {"async_collection": True}),
}


def tiny(algo: str, tmp_path: Path, norm: ObservationNormalizer, **extra: Any) -> BaseTrainer[Any]:
    """``resume_cases.build`` with ``norm``, over 2 epochs (envs that pickle)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return resume_cases.build(algo, tmp_path, hooks=[norm], max_epoch=2, **extra)


def assert_same_weights(a: BaseTrainer[Any], b: BaseTrainer[Any]) -> None:
    state_a, state_b = a.policy.state_dict(), b.policy.state_dict()
    tensors = [k for k, v in state_a.items() if isinstance(v, torch.Tensor)]
    assert tensors
    assert [k for k in tensors if not torch.equal(state_a[k], state_b[k])] == []


def assert_same_statistics(a: RunningMeanStd, b: RunningMeanStd) -> None:
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.var, b.var)
    assert a.count == b.count


def copy_of(rms: RunningMeanStd) -> RunningMeanStd:
    out = RunningMeanStd(rms.mean.shape)
    out.load_state_dict(rms.state_dict())
    return out


@pytest.mark.parametrize("case", CASES)
def test_a_resume_with_envs_that_pickle_continues_weights_and_statistics_bit_for_bit(
    case: str, tmp_path: Path
) -> None:
    algo, extra = CASES[case]
    whole_norm = ObservationNormalizer()
    whole = tiny(algo, tmp_path, whole_norm, **extra)
    expected = [comparable(s) for s in whole]
    first_norm = ObservationNormalizer()
    first = tiny(algo, tmp_path, first_norm, **extra)
    stats = [next(first)]
    first.save_checkpoint(tmp_path / "ckpt")
    saved = copy_of(first_norm.rms)
    resumed_norm = ObservationNormalizer()
    resumed = tiny(algo, tmp_path, resumed_norm, resume_from=str(tmp_path / "ckpt"), **extra)
    assert_same_statistics(resumed_norm.rms, saved)  # the envs continue: nothing new yet
    assert [comparable(s) for s in stats + list(resumed)] == expected
    assert_same_weights(resumed, whole)
    assert_same_statistics(resumed_norm.rms, whole_norm.rms)
    assert whole_norm.rms.count > saved.count > 64  # both epochs fed the statistics


@pytest.mark.parametrize("async_collection", [False, True], ids=["sync", "async-collection"])
def test_restarted_episodes_add_their_first_observations_to_the_restored_statistics_once(
    async_collection: bool, tmp_path: Path
) -> None:
    """The restart's reset comes after the hook's state is restored: the statistics are the
    saved ones updated with the new first observations (each env's ``[5.0] * 4``), the
    observations the policy acts on next, as a fresh run's first reset is counted."""
    first_norm = ObservationNormalizer()
    first = drift_dqn(first_norm, async_collection=async_collection)
    next(first)
    assert first.train_collector.state_dict(include_env=True)["env"] is None  # no snapshot
    first.save_checkpoint(tmp_path / "ckpt")
    expected = copy_of(first_norm.rms)
    expected.update(np.full((NUM_ENVS, 4), 5.0))
    runs = []
    for _ in range(2):
        norm = ObservationNormalizer()
        resumed = drift_dqn(norm, async_collection=async_collection, resume_from=tmp_path / "ckpt")
        assert_same_statistics(norm.rms, expected)
        assert norm.rms.count == first_norm.rms.count + NUM_ENVS
        runs.append(([comparable(s) for s in resumed], norm, resumed.state.env_step))
    (stats_a, norm_a, env_step), (stats_b, norm_b, _) = runs
    assert stats_a == stats_b  # resuming twice gives one run
    assert_same_statistics(norm_a.rms, norm_b.rms)
    # every observation acted on counted once: two resets of both envs, and the env steps
    assert env_step == 16 + 2 * 40  # warm-up, two epochs
    assert norm_a.rms.count == pytest.approx(FRESH_COUNT + 2 * NUM_ENVS + env_step, abs=1e-9)


class Interrupt:
    """Raises ``KeyboardInterrupt`` at the ``at``-th call of its hook point in ``epoch``."""

    def __init__(self, trainer: BaseTrainer[Any], point: str, *, epoch: int, at: int) -> None:
        self.trainer, self.epoch, self.at, self.calls = trainer, epoch, at, 0
        trainer.register_op(point, self)

    def __call__(self, *args: Any) -> Any:
        if self.trainer.state.epoch == self.epoch:
            self.calls += 1
            if self.calls == self.at:
                raise KeyboardInterrupt
        return args[0] if args else None


INTERRUPTS = {
    "ppo": ("ppo", {}, "batch_process", 2),
    "dqn": ("dqn", {}, "process_optim_batch", 20),
    "dqn-async-collection": ("dqn", {"async_collection": True}, "process_optim_batch", 20),
    "dqn-async-collection-after-update": ("dqn", {"async_collection": True}, "post_steps", 3),
}


@pytest.mark.parametrize("case", INTERRUPTS)
def test_ctrl_c_in_an_epoch_rolls_the_statistics_back_and_continuing_is_the_whole_run(
    case: str, tmp_path: Path
) -> None:
    algo, extra, point, at = INTERRUPTS[case]
    whole_norm = ObservationNormalizer()
    whole = tiny(algo, tmp_path, whole_norm, **extra)
    expected = [comparable(s) for s in whole]
    norm = ObservationNormalizer()
    trainer = tiny(algo, tmp_path, norm, **extra)
    interrupt = Interrupt(trainer, point, epoch=2, at=at)
    stats = [next(trainer)]
    after_epoch_1 = copy_of(norm.rms)
    with pytest.raises(KeyboardInterrupt):
        next(trainer)
    assert interrupt.calls == at and trainer.state.epoch == 1
    assert_same_statistics(norm.rms, after_epoch_1)
    stats += list(trainer)
    assert [comparable(s) for s in stats] == expected
    assert_same_weights(trainer, whole)
    assert_same_statistics(norm.rms, whole_norm.rms)


@pytest.mark.parametrize("async_collection", [False, True], ids=["sync", "async-collection"])
def test_ctrl_c_in_epoch_1_with_envs_that_do_not_pickle_leaves_fresh_statistics(
    async_collection: bool,
) -> None:
    """The roll-back of epoch 1 restarts envs that do not pickle, then the run's start
    resets them again: the first reset's observations were counted as data nobody acted on
    (count 2.0001 after the roll-back, and the continued run differed from the
    uninterrupted one in weights and statistics)."""
    whole_norm = ObservationNormalizer()
    whole = drift_dqn(whole_norm, async_collection=async_collection)
    expected = [comparable(s) for s in whole]
    norm = ObservationNormalizer()
    trainer = drift_dqn(norm, async_collection=async_collection)
    Interrupt(trainer, "process_optim_batch", epoch=1, at=5)
    with pytest.raises(KeyboardInterrupt):
        next(trainer)
    assert trainer.state.epoch == 0
    assert_same_statistics(norm.rms, RunningMeanStd((4,)))  # as fresh as before the run
    assert [comparable(s) for s in trainer] == expected
    assert_same_weights(trainer, whole)
    assert_same_statistics(norm.rms, whole_norm.rms)


def test_a_checkpoint_before_epoch_1_with_envs_that_do_not_pickle_resumes_to_the_whole_run(
    tmp_path: Path,
) -> None:
    whole_norm = ObservationNormalizer()
    whole = drift_dqn(whole_norm, async_collection=False)
    expected = [comparable(s) for s in whole]
    drift_dqn(ObservationNormalizer(), async_collection=False).save_checkpoint(tmp_path / "ckpt")
    norm = ObservationNormalizer()
    resumed = drift_dqn(norm, async_collection=False, resume_from=tmp_path / "ckpt")
    assert_same_statistics(norm.rms, RunningMeanStd((4,)))
    assert [comparable(s) for s in resumed] == expected
    assert_same_weights(resumed, whole)
    assert_same_statistics(norm.rms, whole_norm.rms)
