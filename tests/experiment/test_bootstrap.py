"""Tests of epochtrain.experiment.bootstrap: stratification, seeding, formatting."""

from __future__ import annotations

import numpy as np
import pytest

from epochtrain.experiment.bootstrap import (
    IntervalEstimate,
    percentile_interval,
    rng_for,
    stratified_bootstrap,
)
from epochtrain.experiment.stats import PROFILE_REPS


def test_every_replicate_keeps_each_tasks_runs_within_that_task() -> None:
    # task 0 holds 0..3, task 1 holds 100..103: a stratified replicate never mixes them
    scores = np.stack([np.arange(4.0), 100 + np.arange(4.0)], axis=1)
    seen = stratified_bootstrap((scores,), lambda x: x, reps=200, rng=rng_for(0))
    assert seen.shape == (200, 4, 2)
    assert set(np.unique(seen[:, :, 0])) <= set(range(4))
    assert set(np.unique(seen[:, :, 1])) <= set(range(100, 104))
    assert len(np.unique(seen[:, :, 0])) == 4  # every run is drawn at some point


def test_tasks_are_resampled_independently() -> None:
    scores = np.stack([np.arange(5.0), np.arange(5.0)], axis=1)
    seen = stratified_bootstrap((scores,), lambda x: x, reps=100, rng=rng_for(0))
    assert not np.array_equal(seen[:, :, 0], seen[:, :, 1])


def test_replicates_do_not_depend_on_the_chunk_size(monkeypatch: pytest.MonkeyPatch) -> None:
    scores = np.random.default_rng(0).normal(size=(6, 3))

    def run() -> np.ndarray:
        return stratified_bootstrap(
            (scores,), lambda x: x.mean(axis=(-2, -1)), reps=50, rng=rng_for(1)
        )

    whole = run()
    monkeypatch.setattr("epochtrain.experiment.bootstrap._CHUNK_ELEMENTS", 18 * 7)
    np.testing.assert_array_equal(run(), whole)


def test_rng_for_gives_each_key_its_own_reproducible_stream() -> None:
    assert rng_for(3, "ppo").random() == rng_for(3, "ppo").random()
    assert rng_for(3, "ppo").random() != rng_for(3, "a2c").random()
    assert rng_for(3, "ppo").random() != rng_for(4, "ppo").random()
    gen = np.random.default_rng(0)
    assert rng_for(gen, "ppo") is gen


def test_global_numpy_random_state_is_left_alone() -> None:
    state = np.random.get_state()
    stratified_bootstrap((np.ones((3, 1)),), lambda x: x, reps=PROFILE_REPS, rng=rng_for(0))
    after = np.random.get_state()
    assert state[0] == after[0] and np.array_equal(state[1], after[1]) and state[2:] == after[2:]


def test_percentile_interval_takes_the_tails_of_the_replicates() -> None:
    low, high = percentile_interval(np.arange(1001.0), 0.95)
    assert (float(low), float(high)) == pytest.approx((25.0, 975.0))


def test_interval_estimate_formats_all_three_numbers() -> None:
    est = IntervalEstimate(12.345, 10.0, 14.25)
    assert format(est, ".1f") == "12.3 [10.0, 14.2]"
    assert str(est) == "12.35 [10, 14.25]"
