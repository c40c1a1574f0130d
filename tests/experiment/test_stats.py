"""Tests of epochtrain.experiment.stats on hand-computed data, coverage and determinism."""

from __future__ import annotations

import numpy as np
import pytest

from epochtrain.experiment import (
    NormalizedScores,
    aggregate_estimates,
    aggregate_iqm,
    aggregate_mean,
    aggregate_median,
    iqm,
    optimality_gap,
    pairwise_improvement,
    performance_profiles,
    probability_of_improvement,
    summarize_tasks,
)

REPS = 500  # enough for the checks below, fast on a shared CPU


def test_iqm_averages_the_middle_half_of_sorted_values() -> None:
    assert iqm([1.0, 2.0, 3.0, 4.0, 100.0]) == pytest.approx(3.0)  # cut one from each end
    assert iqm([8, 1, 7, 2, 6, 3, 5, 4]) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert iqm([5.0, 1.0, 9.0]) == pytest.approx(5.0)  # fewer than 4 values: nothing is cut


def test_iqm_ignores_one_outlier_run_where_the_mean_does_not() -> None:
    runs = [10.0, 11.0, 12.0, 13.0, 1000.0]
    assert iqm(runs) == pytest.approx(12.0)
    assert np.mean(runs) > 200


def test_aggregate_iqm_pools_every_run_of_every_task() -> None:
    scores = np.array([[1.0, 5.0], [2.0, 6.0], [3.0, 7.0], [4.0, 8.0]])
    assert aggregate_iqm(scores) == pytest.approx(4.5)


def test_aggregate_mean_and_median_are_over_task_means() -> None:
    scores = np.array([[1.0, 10.0, 100.0], [3.0, 20.0, 200.0]])  # task means 2, 15, 150
    assert aggregate_mean(scores) == pytest.approx((2 + 15 + 150) / 3)
    assert aggregate_median(scores) == pytest.approx(15.0)


def test_optimality_gap_counts_only_the_shortfall_below_gamma() -> None:
    scores = np.array([[0.5, 1.5], [1.0, 0.0]])  # clipped at 1: 0.5, 1, 1, 0
    assert optimality_gap(scores) == pytest.approx(1.0 - 0.625)
    assert optimality_gap(scores, gamma=2.0) == pytest.approx(2.0 - 0.75)


def test_probability_of_improvement_of_separated_samples_is_one_or_zero() -> None:
    high, low = np.array([[3.0], [4.0], [5.0]]), np.array([[1.0], [2.0]])
    assert probability_of_improvement(high, low) == 1.0
    assert probability_of_improvement(low, high) == 0.0


def test_probability_of_improvement_of_identical_samples_is_one_half() -> None:
    scores = np.random.default_rng(0).normal(size=(7, 3))
    assert probability_of_improvement(scores, scores.copy()) == pytest.approx(0.5)
    constant = np.ones((4, 2))  # every comparison a tie
    assert probability_of_improvement(constant, constant) == pytest.approx(0.5)


def test_probability_of_improvement_counts_ties_as_half_and_averages_tasks() -> None:
    x = np.array([[1.0, 3.0], [2.0, 4.0]])
    y = np.array([[2.0, 1.0], [3.0, 2.0]])
    # task 0: of (1,2) (1,3) (2,2) (2,3) only the tie counts, 1/2 of 4 pairs; task 1: 1
    assert probability_of_improvement(x, y) == pytest.approx((0.5 / 4 + 1.0) / 2)
    assert probability_of_improvement(y, x) == pytest.approx(1 - (0.5 / 4 + 1.0) / 2)


def test_pairwise_improvement_interval_of_separated_samples_is_degenerate_at_one() -> None:
    scores = {"a": np.array([[5.0], [6.0], [7.0]]), "b": np.array([[1.0], [2.0], [3.0]])}
    est = pairwise_improvement(scores, reps=REPS)[("a", "b")]
    assert (est.estimate, est.ci_low, est.ci_high) == (1.0, 1.0, 1.0)


def test_pairwise_improvement_covers_every_pair_once_or_the_pairs_asked() -> None:
    rng = np.random.default_rng(3)
    scores = {name: rng.normal(size=(5, 2)) for name in ("a", "b", "c")}
    assert list(pairwise_improvement(scores, reps=50)) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert list(pairwise_improvement(scores, pairs=[("c", "a")], reps=50)) == [("c", "a")]


def test_summarize_tasks_estimates_each_task_on_its_own_runs() -> None:
    scores = {"ppo": np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [10.0, 40.0]])}
    summary = summarize_tasks(scores, tasks=["CartPole-v1", "Acrobot-v1"], reps=REPS)["ppo"]
    cart, acro = summary["CartPole-v1"], summary["Acrobot-v1"]
    assert cart.n_runs == 4
    assert cart.mean.estimate == pytest.approx(4.0)
    assert cart.median.estimate == pytest.approx(2.5)
    assert cart.iqm.estimate == pytest.approx(2.5)  # mean of 2 and 3
    assert acro.mean.estimate == pytest.approx(25.0)
    for est in (cart.mean, cart.median, cart.iqm, acro.iqm):
        assert est.ci_low <= est.estimate <= est.ci_high
    assert cart.mean.ci_low >= 1.0 and cart.mean.ci_high <= 10.0  # within the runs' range
    assert acro.iqm.ci_low >= 10.0 and acro.iqm.ci_high <= 40.0


def test_bootstrap_interval_covers_the_true_mean_about_95_percent_of_the_time() -> None:
    true_means = np.array([0.2, 0.5, 0.9])  # three tasks; aggregate mean = their mean
    rng = np.random.default_rng(12345)
    repeats, hits, widths = 300, 0, []
    for i in range(repeats):
        scores = true_means + rng.normal(scale=0.3, size=(10, 3))
        est = aggregate_estimates({"a": scores}, normalized=True, reps=400, seed=i)["a"].mean
        hits += est.ci_low <= true_means.mean() <= est.ci_high
        widths.append(est.ci_high - est.ci_low)
    coverage = hits / repeats
    # percentile intervals run slightly narrow at 10 runs per task; 300 repeats give a
    # binomial standard error of about 1.3 points
    assert 0.88 <= coverage <= 0.99, coverage
    # the mean of 3 task means of 10 runs each has standard deviation 0.3 / sqrt(30)
    expected = 2 * 1.96 * 0.3 / np.sqrt(30)
    assert 0.8 * expected <= np.mean(widths) <= 1.1 * expected


def test_bootstrap_interval_of_the_iqm_covers_the_centre_of_a_symmetric_distribution() -> None:
    rng = np.random.default_rng(7)
    repeats, hits = 200, 0
    for i in range(repeats):
        scores = {"a": 3.0 + rng.standard_t(df=3, size=(20, 1))}  # heavy tails, centre 3
        est = summarize_tasks(scores, reps=400, seed=i)["a"]["0"].iqm
        hits += est.ci_low <= 3.0 <= est.ci_high
    assert 0.88 <= hits / repeats <= 0.995


def test_same_seed_gives_the_same_interval_and_another_seed_another() -> None:
    scores = {"a": np.random.default_rng(0).normal(size=(8, 2))}
    first = aggregate_estimates(scores, normalized=True, reps=REPS, seed=4)
    assert aggregate_estimates(scores, normalized=True, reps=REPS, seed=4) == first
    assert aggregate_estimates(scores, normalized=True, reps=REPS, seed=5) != first
    gen = aggregate_estimates(scores, normalized=True, reps=REPS, seed=np.random.default_rng(4))
    assert gen["a"].iqm.estimate == first["a"].iqm.estimate


def test_an_algorithms_interval_does_not_change_when_another_joins() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(6, 2)), rng.normal(size=(6, 2))
    alone = aggregate_estimates({"a": a}, normalized=True, reps=REPS)["a"]
    assert aggregate_estimates({"b": b, "a": a}, normalized=True, reps=REPS)["a"] == alone


def test_performance_profile_counts_runs_above_each_tau() -> None:
    scores = NormalizedScores(
        {"a": np.array([[0.0, 0.5], [1.0, 2.0]])},
        tasks=["x", "y"],
        random_scores=[0.0, 0.0],
        reference_scores=[1.0, 1.0],
    )
    profile = performance_profiles(scores, taus=[-1.0, 0.25, 0.75, 1.5, 3.0], reps=REPS)["a"]
    np.testing.assert_allclose(profile.fraction, [1.0, 0.75, 0.5, 0.25, 0.0])
    assert np.all(profile.ci_low <= profile.fraction) and np.all(
        profile.fraction <= profile.ci_high
    )
    assert profile.ci_low[0] == profile.ci_high[0] == 1.0  # every replicate is above -1


def test_default_profile_grid_is_shared_and_spans_zero_to_one_when_normalised() -> None:
    scores = {"a": np.array([[0.2], [0.4]]), "b": np.array([[0.3], [1.4]])}
    profiles = performance_profiles(scores, normalized=True, reps=50)
    np.testing.assert_array_equal(profiles["a"].taus, profiles["b"].taus)
    assert profiles["a"].taus[0] == 0.0 and profiles["a"].taus[-1] == pytest.approx(1.4)


def test_aggregating_several_raw_envs_is_refused_with_the_fix() -> None:
    scores = {"a": np.array([[500.0, -100.0], [450.0, -90.0]])}
    for call in (aggregate_estimates, performance_profiles):
        with pytest.raises(ValueError, match="normalize_scores"):
            call(scores, reps=10)
    # one env needs no normalisation, and summaries per env never do
    assert aggregate_estimates({"a": scores["a"][:, :1]}, reps=10)["a"].n_tasks == 1
    assert set(summarize_tasks(scores, reps=10)["a"]) == {"0", "1"}


@pytest.mark.parametrize(
    ("scores", "match"),
    [
        ({}, "non-empty mapping"),
        ({"a": np.zeros((0, 2))}, r"scores\['a'\] is empty"),
        ({"a": np.array([[1.0, np.nan]])}, r"NaN or infinite .* index \(0, 1\)"),
        ({"a": np.ones(4)}, r"reshape\(-1, 1\)"),
        ({"a": np.ones((3, 2)), "b": np.ones((3, 1))}, "same number of tasks"),
        ({"a": [["x"]]}, "array of numbers"),
    ],
)
def test_bad_scores_raise_a_value_error_naming_them(scores: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        summarize_tasks(scores, reps=10)


def test_bad_parameters_raise_a_value_error_naming_them() -> None:
    scores = {"a": np.ones((3, 1)), "b": np.zeros((3, 1))}
    with pytest.raises(ValueError, match="reps must be a positive int"):
        aggregate_estimates(scores, reps=0)
    with pytest.raises(ValueError, match="confidence must lie strictly between 0 and 1"):
        aggregate_estimates(scores, confidence=95)
    with pytest.raises(ValueError, match="seed must be"):
        aggregate_estimates(scores, seed=-1)
    with pytest.raises(ValueError, match="tasks must name each of the 1"):
        summarize_tasks(scores, tasks=["x", "y"])
    with pytest.raises(ValueError, match=r"pairs must hold two different .* \('a', 'c'\)"):
        pairwise_improvement(scores, pairs=[("a", "c")])
    with pytest.raises(ValueError, match="values is empty"):
        iqm([])
