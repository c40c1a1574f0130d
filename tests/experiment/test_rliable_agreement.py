"""Cross-check against rliable (optional): the same estimates, intervals within noise.

rliable draws from numpy's global random state, so its intervals are compared with ours
within a fraction of the interval's width, not exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import numpy as np
import pytest

from epochtrain.experiment import (
    aggregate_estimates,
    pairwise_improvement,
    performance_profiles,
    probability_of_improvement,
)


def _rliable() -> tuple[ModuleType, ModuleType]:
    try:  # rliable's pinned `arch` breaks on some pandas releases at import time
        from rliable import library, metrics
    except Exception as exc:  # any import failure means: not usable here
        pytest.skip(f"rliable is not installed or not importable: {exc}")
    return library, metrics


@pytest.fixture
def global_seed() -> Iterator[None]:
    state = np.random.get_state()
    np.random.seed(0)
    yield
    np.random.set_state(state)


SCORES = {
    "a": np.random.default_rng(1).normal(1.0, 0.3, size=(10, 3)),
    "b": np.random.default_rng(2).normal(0.8, 0.3, size=(7, 3)),
}


def test_aggregate_estimates_agree_with_rliable(global_seed: None) -> None:
    library, metrics = _rliable()

    def rliable_stats(x: np.ndarray) -> np.ndarray:
        return np.array(
            [
                metrics.aggregate_iqm(x),
                metrics.aggregate_mean(x),
                metrics.aggregate_median(x),
                metrics.aggregate_optimality_gap(x),
            ]
        )

    points, intervals = library.get_interval_estimates(SCORES, rliable_stats, reps=1000)
    ours = aggregate_estimates(SCORES, normalized=True, reps=1000)
    for algo, summary in ours.items():
        ests = [summary.iqm, summary.mean, summary.median, summary.optimality_gap]
        for k, est in enumerate(ests):
            assert est.estimate == pytest.approx(points[algo][k], abs=1e-12)
            width = est.ci_high - est.ci_low
            assert est.ci_low == pytest.approx(intervals[algo][0, k], abs=0.15 * width)
            assert est.ci_high == pytest.approx(intervals[algo][1, k], abs=0.15 * width)


def test_probability_of_improvement_agrees_with_rliable(global_seed: None) -> None:
    library, metrics = _rliable()
    assert probability_of_improvement(SCORES["a"], SCORES["b"]) == pytest.approx(
        metrics.probability_of_improvement(SCORES["a"], SCORES["b"]), abs=1e-12
    )
    points, intervals = library.get_interval_estimates(
        {"ab": [SCORES["a"], SCORES["b"]]}, metrics.probability_of_improvement, reps=500
    )
    ours = pairwise_improvement(SCORES, reps=2000)[("a", "b")]
    width = ours.ci_high - ours.ci_low
    assert ours.estimate == pytest.approx(float(points["ab"]), abs=1e-12)
    assert ours.ci_low == pytest.approx(float(intervals["ab"][0, 0]), abs=0.15 * width)
    assert ours.ci_high == pytest.approx(float(intervals["ab"][1, 0]), abs=0.15 * width)


def test_performance_profiles_agree_with_rliable(global_seed: None) -> None:
    library, _ = _rliable()
    taus = np.linspace(0.0, 2.0, 21)
    points, intervals = library.create_performance_profile(SCORES, taus, reps=500)
    ours = performance_profiles(SCORES, taus=taus, normalized=True, reps=500)
    for algo, profile in ours.items():
        np.testing.assert_allclose(profile.fraction, points[algo], atol=1e-12)
        np.testing.assert_allclose(profile.ci_low, intervals[algo][0], atol=0.05)
        np.testing.assert_allclose(profile.ci_high, intervals[algo][1], atol=0.05)
