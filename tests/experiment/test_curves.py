"""Tests of epochtrain.experiment.curves: run scores, alignment and curve bands."""

from __future__ import annotations

import numpy as np
import pytest

from epochtrain.experiment import SCORE_METHODS, align_curves, curve_estimates, run_score


def test_run_score_final_best_and_area_under_the_curve() -> None:
    steps, returns = [0, 10, 20], [0.0, 10.0, 6.0]
    assert run_score(steps, returns) == 6.0  # final by default
    assert run_score(steps, returns, "best") == 10.0
    assert run_score(steps, returns, "auc") == pytest.approx((50.0 + 80.0) / 20.0)
    assert run_score([5], [3.0], "auc") == 3.0
    assert SCORE_METHODS == ("final", "best", "auc")


def test_curves_with_the_same_test_steps_are_left_as_they_are() -> None:
    a, b = ([1, 2, 3], [1.0, 5.0, 2.0]), ([1, 2, 3], [0.0, 4.0, 9.0])
    grid, values = align_curves([a, b])
    np.testing.assert_array_equal(grid, [1, 2, 3])
    np.testing.assert_array_equal(values, [a[1], b[1]])


def test_curves_of_different_cadences_are_interpolated_on_the_common_range() -> None:
    a = ([0, 10, 20], [0.0, 10.0, 20.0])
    b = ([0, 5, 15, 25], [0.0, 10.0, 10.0, 0.0])
    grid, values = align_curves([a, b])
    np.testing.assert_array_equal(grid, [0, 5, 10, 15, 20])  # stops at a's last test
    np.testing.assert_allclose(values[0], [0, 5, 10, 15, 20])
    np.testing.assert_allclose(values[1], [0, 10, 10, 10, 5])


def test_a_given_grid_must_stay_within_every_run() -> None:
    a, b = ([0, 10], [0.0, 1.0]), ([0, 20], [0.0, 2.0])
    _, values = align_curves([a, b], grid=[0, 5, 10])
    np.testing.assert_allclose(values, [[0, 0.5, 1.0], [0, 0.5, 1.0]])
    with pytest.raises(ValueError, match=r"curves\[0\] was tested on \[0.0, 10.0\] only"):
        align_curves([a, b], grid=[0, 15])


def test_bad_curves_raise_value_errors_naming_them() -> None:
    with pytest.raises(ValueError, match="non-empty sequence"):
        align_curves([])
    with pytest.raises(ValueError, match="do not overlap"):
        align_curves([([0, 1], [0.0, 1.0]), ([5, 6], [0.0, 1.0])])
    with pytest.raises(ValueError, match="must increase strictly"):
        run_score([0, 0], [1.0, 2.0])
    with pytest.raises(ValueError, match="2 env_steps but 3 returns"):
        run_score([0, 1], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="method must be one of"):
        run_score([0], [1.0], "last")


def test_curve_band_resamples_whole_runs_and_holds_the_estimate() -> None:
    rng = np.random.default_rng(0)
    steps = np.array([0.0, 1.0, 2.0])
    values = {"a": np.array([1.0, 2.0, 3.0]) + rng.normal(scale=0.1, size=(8, 3))}
    for statistic in ("iqm", "mean", "median"):
        curve = curve_estimates(values, steps, statistic=statistic, reps=300)["a"]
        assert curve.n_runs == 8 and curve.estimate.shape == (3,)
        assert np.all(curve.ci_low <= curve.estimate) and np.all(curve.estimate <= curve.ci_high)
    mean = curve_estimates(values, steps, statistic="mean", reps=300)["a"]
    np.testing.assert_allclose(mean.estimate, values["a"].mean(axis=0))
    constant = curve_estimates({"c": np.ones((4, 3))}, steps, reps=50)["c"]
    np.testing.assert_array_equal(constant.ci_low, constant.ci_high)
    with pytest.raises(ValueError, match="align the curves first"):
        curve_estimates(values, [0.0, 1.0])
    with pytest.raises(ValueError, match="statistic must be one of"):
        curve_estimates(values, steps, statistic="max")
