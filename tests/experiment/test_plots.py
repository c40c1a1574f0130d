"""Tests of epochtrain.experiment.plots: figures, their panels and lines, headless PNGs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from epochtrain.experiment import (
    CurveEstimate,
    aggregate_estimates,
    curve_estimates,
    pairwise_improvement,
    performance_profiles,
    plot_aggregate_intervals,
    plot_performance_profiles,
    plot_probability_of_improvement,
    plot_sample_efficiency,
)
from epochtrain.extras import MissingExtraError

RNG = np.random.default_rng(0)
SCORES = {
    "ppo": RNG.normal(0.9, 0.2, size=(5, 2)),
    "a2c": RNG.normal(0.6, 0.2, size=(5, 2)),
    "dqn": RNG.normal(0.7, 0.3, size=(5, 2)),
}
STEPS = np.linspace(0, 10_000, 6)


def curves() -> dict[str, dict[str, CurveEstimate]]:
    per_env = {}
    for env in ("CartPole-v1", "Acrobot-v1"):
        values = {algo: np.cumsum(RNG.random((4, STEPS.size)), axis=1) for algo in ("ppo", "a2c")}
        per_env[env] = curve_estimates(values, STEPS, reps=50)
    return per_env


def test_sample_efficiency_has_a_panel_per_env_and_a_line_and_band_per_algorithm(
    tmp_path: Path,
) -> None:
    pytest.importorskip("matplotlib", reason="plots need the optional extra epochtrain[plot]")
    fig = plot_sample_efficiency(curves())
    assert [ax.get_title() for ax in fig.axes] == ["CartPole-v1", "Acrobot-v1"]
    for ax in fig.axes:
        assert [line.get_label() for line in ax.get_lines()] == ["ppo", "a2c"]
        assert len(ax.collections) == 2  # one band per algorithm
    fig.savefig(tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_aggregate_intervals_have_a_panel_per_metric_and_a_bar_per_algorithm() -> None:
    pytest.importorskip("matplotlib", reason="plots need the optional extra epochtrain[plot]")
    summaries = aggregate_estimates(SCORES, normalized=True, reps=100)
    fig = plot_aggregate_intervals(summaries)
    assert [ax.get_title() for ax in fig.axes] == ["Median", "IQM", "Mean", "Optimality gap"]
    iqm_ax = fig.axes[1]
    bars = iqm_ax.patches
    assert len(bars) == 3
    ppo = summaries["ppo"].iqm
    assert bars[0].get_x() == pytest.approx(ppo.ci_low)
    assert bars[0].get_width() == pytest.approx(ppo.ci_high - ppo.ci_low)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["ppo", "a2c", "dqn"]
    assert len(plot_aggregate_intervals(summaries, metrics=["iqm"]).axes) == 1
    with pytest.raises(ValueError, match="metrics must be a non-empty subset"):
        plot_aggregate_intervals(summaries, metrics=["max"])


def test_performance_profiles_draw_one_line_and_band_per_algorithm() -> None:
    pytest.importorskip("matplotlib", reason="plots need the optional extra epochtrain[plot]")
    profiles = performance_profiles(SCORES, normalized=True, reps=50)
    (ax,) = plot_performance_profiles(profiles).axes
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["ppo", "a2c", "dqn"]
    np.testing.assert_array_equal(lines[0].get_ydata(), profiles["ppo"].fraction)
    assert len(ax.collections) == 3


def test_probability_of_improvement_draws_a_row_per_pair_around_one_half() -> None:
    pytest.importorskip("matplotlib", reason="plots need the optional extra epochtrain[plot]")
    probabilities = pairwise_improvement(SCORES, reps=100)
    (ax,) = plot_probability_of_improvement(probabilities).axes
    assert len(ax.patches) == 3
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["P(ppo > a2c)", "P(ppo > dqn)", "P(a2c > dqn)"]
    assert ax.get_xlim() == (0.0, 1.0)


def test_empty_inputs_are_refused_before_drawing() -> None:
    pytest.importorskip("matplotlib", reason="plots need the optional extra epochtrain[plot]")
    with pytest.raises(ValueError, match="curves must be a non-empty mapping"):
        plot_sample_efficiency({})


def test_without_matplotlib_a_plot_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    profiles = performance_profiles(SCORES, normalized=True, reps=10)
    with pytest.raises(MissingExtraError, match=r"pip install 'epochtrain\[plot\]'"):
        plot_performance_profiles(profiles)


def test_importing_the_experiment_package_imports_neither_matplotlib_nor_scipy() -> None:
    code = (
        "import sys, epochtrain.experiment; "
        "print(sorted(m for m in ('matplotlib', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_one_point_curve_is_drawn_as_a_marker_not_an_invisible_line() -> None:
    pytest.importorskip("matplotlib", reason="plots need the optional extra epochtrain[plot]")
    values = {"ppo": np.array([[1.0], [2.0]]), "a2c": np.cumsum(RNG.random((2, 3)), axis=1)}
    one = curve_estimates({"ppo": values["ppo"]}, [512.0], reps=50)
    many = curve_estimates({"a2c": values["a2c"]}, [512.0, 1024.0, 1536.0], reps=50)
    fig = plot_sample_efficiency({"CartPole-v1": {**one, **many}})
    markers = {line.get_label(): line.get_marker() for line in fig.axes[0].get_lines()}
    assert markers["ppo"] == "o" and markers["a2c"] in ("None", "", None)
