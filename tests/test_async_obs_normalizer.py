"""ObservationNormalizer with asynchronous collection (``async_collection=True``).

The collect step in the worker thread updates a copy of the statistics, which lands with
its rows: update k normalises its minibatches with the statistics of collects 1..k (those a
synchronous run uses), runs are reproducible given their seed and resume exactly.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from epochtrain import DQN, Collector, ReplayBuffer, make_trainer
from epochtrain.algorithms.dqn import DQNTrainingStats
from epochtrain.data.batch import ActResult, Batch, Obs
from epochtrain.trainer import BaseTrainer, ObservationNormalizer, OffpolicyTrainer
from epochtrain.trainer.params import OffpolicyParams
from tests import resume_cases
from tests.trainer.test_base import comparable
from tests.trainer.test_obs_normalizer_offpolicy import drift_envs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NUM_ENVS = 2
FRESH_COUNT = 1e-4  # RunningMeanStd's count before any data


class RecordingDQN(DQN):
    """DQN that records what its exploring ``act`` receives (the learner and its actor
    copy share the list) and in which thread."""

    inputs: ClassVar[list[tuple[torch.Tensor, bool]]] = []

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        if not deterministic:
            assert isinstance(obs, torch.Tensor)
            in_worker = threading.current_thread() is not threading.main_thread()
            self.inputs.append((obs.clone(), in_worker))
        return super().act(obs, deterministic)


def drift_dqn(norm: ObservationNormalizer, *, async_collection: bool) -> OffpolicyTrainer[Any]:
    """DQN on the Drift envs (observations that do not depend on the actions, 10-step
    episodes): 2 epochs of 60 env steps, 10 per collect step."""
    torch.manual_seed(0)
    envs = drift_envs(NUM_ENVS)
    policy = RecordingDQN(envs.single_observation_space, envs.single_action_space, hidden=(8,))
    params = OffpolicyParams(
        max_epoch=2, step_per_epoch=60, step_per_collect=10, update_per_step=0.5,
        batch_size=8, warmup_steps=16, episode_per_test=2, show_progress=False, seed=1,
        async_collection=async_collection,
    )  # fmt: skip
    return OffpolicyTrainer(
        policy=policy,
        params=params,
        train_collector=Collector(policy, envs, ReplayBuffer(400, NUM_ENVS)),
        test_collector=Collector(policy, drift_envs(NUM_ENVS), exploration=False),
        hooks=[norm],
    )


def cartpole_dqn(norm: ObservationNormalizer, **overrides: Any) -> BaseTrainer[Any]:
    settings: dict[str, Any] = dict(
        max_epoch=2, step_per_epoch=96, step_per_collect=8, update_per_step=0.5,
        batch_size=16, warmup_steps=32, buffer_size=1000, num_envs=NUM_ENVS, hidden=(64, 64),
        num_test_envs=1, episode_per_test=1, show_progress=False, stop_fn=None,
        async_collection=True, hooks=[norm],
    )  # fmt: skip
    return make_trainer("dqn", "CartPole-v1", seed=5, **{**settings, **overrides})


def weights(trainer: BaseTrainer[Any]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in trainer.policy.state_dict().items() if isinstance(v, torch.Tensor)}


def assert_same_statistics(a: ObservationNormalizer, b: ObservationNormalizer) -> None:
    np.testing.assert_array_equal(a.rms.mean, b.rms.mean)
    np.testing.assert_array_equal(a.rms.var, b.rms.var)
    assert a.rms.count == b.rms.count


def test_two_async_runs_with_one_seed_give_the_same_stats_weights_and_statistics() -> None:
    runs = []
    for _ in range(2):
        norm = ObservationNormalizer()
        trainer = cartpole_dqn(norm)
        runs.append(([comparable(s) for s in trainer], weights(trainer), norm))
    (stats_a, weights_a, norm_a), (stats_b, weights_b, norm_b) = runs
    assert stats_a == stats_b
    assert weights_a.keys() == weights_b.keys()
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)
    assert_same_statistics(norm_a, norm_b)
    assert norm_a.rms.count > 2 * 96  # the statistics did follow the collects


def test_update_k_normalises_its_minibatches_with_the_statistics_of_collects_1_to_k(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each gradient step waits until collect k+1 (in the worker) has finished: the
    minibatch is still normalised, bit for bit, with the statistics of the observations
    landed so far (the reset's, the warm-up's, collects 1..k), not with the worker's."""
    norm = ObservationNormalizer()
    trainer = drift_dqn(norm, async_collection=True)
    runner = trainer.async_collection
    buffer = trainer.train_collector.buffer
    assert runner is not None and buffer is not None
    learn = trainer.policy.learn
    seen: list[tuple[float, int, float | None]] = []

    def checking_learn(batch: Batch) -> DQNTrainingStats:
        assert runner._done.wait(timeout=30.0), "the collect step in flight did not end"
        staging = runner.act_obs_staging
        worker = None if staging is None else getattr(staging, "copy", None)
        # every observation landed: each env's first, then one per env step counted
        landed = FRESH_COUNT + NUM_ENVS + trainer.state.env_step
        assert norm.rms.count == pytest.approx(landed, abs=1e-6)
        seen.append(
            (norm.rms.count, trainer.state.env_step, None if worker is None else worker.count)
        )
        assert batch.index is not None
        raw = buffer.get(batch.index)
        assert isinstance(raw.obs, torch.Tensor) and isinstance(raw.obs_next, torch.Tensor)
        assert torch.equal(batch.obs, torch.from_numpy(norm.normalize(raw.obs.numpy())))
        assert torch.equal(batch.obs_next, torch.from_numpy(norm.normalize(raw.obs_next.numpy())))
        return learn(batch)

    monkeypatch.setattr(trainer.policy, "learn", checking_learn)
    trainer.run()
    assert len(seen) >= 20
    # the worker had collected 10 more env steps than the minibatch's statistics hold
    ahead = [(count, worker) for count, _, worker in seen if worker is not None]
    assert ahead and all(worker == pytest.approx(count + 10) for count, worker in ahead)
    assert norm.rms.count == pytest.approx(FRESH_COUNT + NUM_ENVS + trainer.state.env_step)


def test_statistics_and_the_acted_on_observations_match_a_synchronous_run() -> None:
    """With observations that do not depend on the actions, the worker's policy acts on
    the observations a synchronous run's acts on (normalised, bit for bit) and the
    statistics are updated in the same order (the same bits at the end)."""
    acted, norms = {}, {}
    for async_collection in (False, True):
        RecordingDQN.inputs = []
        norms[async_collection] = norm = ObservationNormalizer()
        trainer = drift_dqn(norm, async_collection=async_collection)
        RecordingDQN.inputs = []  # drop the construction-time check's act
        trainer.run()
        acted[async_collection] = list(RecordingDQN.inputs)
    sync, asynchronous = acted[False], acted[True]
    assert len(asynchronous) == len(sync) == 2 * 60 // NUM_ENVS
    assert sum(in_worker for _, in_worker in asynchronous) == 2 * 50 // NUM_ENVS
    for (a, _), (b, _) in zip(asynchronous, sync, strict=True):
        assert torch.equal(a, b)
    assert max(float(obs.abs().max()) for obs, _ in asynchronous) < 3.0  # raw: 5 .. 15
    assert_same_statistics(norms[True], norms[False])


def test_an_async_run_with_the_normaliser_resumed_after_epoch_2_continues_exactly(
    tmp_path: Path,
) -> None:
    whole_norm = ObservationNormalizer()
    whole = resume_cases.build("dqn", tmp_path, hooks=[whole_norm], async_collection=True)
    expected = resume_cases.snapshot(whole, list(whole))
    first = resume_cases.build(
        "dqn", tmp_path, hooks=[ObservationNormalizer()], async_collection=True
    )
    stats = [next(first) for _ in range(resume_cases.N_EPOCHS)]
    first.save_checkpoint(tmp_path / "ckpt")
    resumed_norm = ObservationNormalizer()
    resumed = resume_cases.build(
        "dqn",
        tmp_path,
        hooks=[resumed_norm],
        async_collection=True,
        resume_from=str(tmp_path / "ckpt"),
    )
    assert isinstance(resumed, OffpolicyTrainer) and resumed.async_collection is not None
    got = resume_cases.snapshot(resumed, stats + list(resumed))
    assert got["stats"] == expected["stats"]
    for key, value in expected["policy"].items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(got["policy"][key], value), key
    assert_same_statistics(resumed_norm, whole_norm)


def test_the_worker_updates_a_copy_that_is_kept_or_dropped_with_its_rows() -> None:
    norm = ObservationNormalizer()
    trainer = drift_dqn(norm, async_collection=True)
    runner = trainer.async_collection
    assert runner is not None and runner.act_obs_staging is not None
    assert trainer.train_collector.act_obs_transform is not None
    norm.rms.update(np.full((3, 4), 2.0))
    mean, count = norm.rms.mean.copy(), norm.rms.count
    obs = np.full((NUM_ENVS, 4), 7.0, np.float32)
    for keep in (False, True):
        transform = runner.act_obs_staging.fork()
        out = transform(obs, True)  # what the worker's policy acts on: the copy's view
        np.testing.assert_array_equal(norm.rms.mean, mean)  # the main thread's: untouched
        assert norm.rms.count == count
        runner.act_obs_staging.land(keep)
    assert norm.rms.count == count + NUM_ENVS
    np.testing.assert_array_equal(out, norm.normalize(obs))
    assert not np.array_equal(norm.rms.mean, mean)
