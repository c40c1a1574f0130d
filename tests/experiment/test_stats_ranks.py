"""The rank-based P(X > Y) of epochtrain.experiment.stats equals the pairwise count it
replaced (every run of X against every run of Y, a tie counting 1/2), ties and all."""

from __future__ import annotations

import numpy as np
import pytest
from benchmarks.pairwise_ranks import pairwise_count  # the O(n_x * n_y) definition

from epochtrain.experiment import pairwise_improvement, probability_of_improvement, stats


@pytest.mark.parametrize(
    ("x_shape", "y_shape", "levels"),
    [
        ((7, 3), (5, 3), 4),  # few distinct values: many ties within and across samples
        ((1, 1), (1, 1), 1),  # one run each, tied
        ((30, 2), (1, 2), 3),
        ((64, 4), (50, 4), 1000),
        ((9, 5, 2), (9, 8, 2), 5),  # a batch of replicates, as the bootstrap passes them
    ],
)
def test_rank_based_improvement_equals_the_pairwise_count_with_ties(
    x_shape: tuple[int, ...], y_shape: tuple[int, ...], levels: int
) -> None:
    rng = np.random.default_rng(sum(x_shape) * 31 + levels)
    for _ in range(20):
        xs = rng.integers(0, levels, size=x_shape).astype(np.float64) / 4.0
        ys = rng.integers(0, levels, size=y_shape).astype(np.float64) / 4.0
        np.testing.assert_allclose(
            stats._improvement(xs, ys), pairwise_count(xs, ys), rtol=1e-15, atol=0
        )


def test_rank_based_improvement_equals_the_pairwise_count_on_continuous_scores() -> None:
    rng = np.random.default_rng(3)
    xs, ys = rng.normal(size=(40, 3)), rng.normal(0.3, size=(25, 3))
    ys[:5] = xs[:5]  # a few exact ties across the samples
    assert probability_of_improvement(xs, ys) == pytest.approx(
        float(pairwise_count(xs, ys)), rel=1e-15
    )


def test_pairwise_improvement_intervals_are_those_of_the_pairwise_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(4)
    scores = {
        "a": rng.integers(0, 6, size=(12, 2)).astype(np.float64),
        "b": rng.integers(0, 6, size=(8, 2)).astype(np.float64),
        "c": rng.normal(2.5, 1.0, size=(10, 2)),
    }
    ranked = pairwise_improvement(scores, reps=300, seed=7)
    monkeypatch.setattr(stats, "_improvement", pairwise_count)
    counted = pairwise_improvement(scores, reps=300, seed=7)
    assert ranked.keys() == counted.keys()
    for pair, est in ranked.items():
        want = counted[pair]
        got_values = (est.estimate, est.ci_low, est.ci_high)
        want_values = (want.estimate, want.ci_low, want.ci_high)
        assert got_values == pytest.approx(want_values, rel=1e-12, abs=1e-15)


def test_the_pairwise_ranks_benchmark_checks_both_formulas_agree(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.benchmark_scripts import load_script

    script = load_script("pairwise_ranks", "pairwise_ranks_bench")
    monkeypatch.setattr("sys.argv", ["pairwise_ranks", "--runs", "30", "--reps", "20"])
    script.main()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all("ratio" in line for line in lines)
