"""Figures of an experiment's statistics, drawn headless with matplotlib's Agg canvas.

Each function takes the result of a statistic of :mod:`epochtrain.experiment` and returns a
:class:`matplotlib.figure.Figure` (save it with ``fig.savefig("out.png")``). Figures are
built without ``pyplot``, so nothing is registered globally, no window opens and no display
is needed. matplotlib is the optional extra ``plot``: without it each function raises
:class:`~epochtrain.extras.MissingExtraError` naming ``pip install 'epochtrain[plot]'``.
An algorithm keeps its colour across figures when the inputs list algorithms in one order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from epochtrain.experiment.bootstrap import IntervalEstimate
from epochtrain.experiment.curves import CurveEstimate
from epochtrain.experiment.stats import AggregateSummary, PerformanceProfile
from epochtrain.extras import require

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "AggregateMetric",
    "plot_aggregate_intervals",
    "plot_performance_profiles",
    "plot_probability_of_improvement",
    "plot_sample_efficiency",
]

AggregateMetric = Literal["iqm", "mean", "median", "optimality_gap"]
_METRIC_TITLES: dict[str, str] = {
    "iqm": "IQM",
    "mean": "Mean",
    "median": "Median",
    "optimality_gap": "Optimality gap",
}
_BAND_ALPHA = 0.25


def _figure(width: float, height: float) -> Figure:
    require("matplotlib", extra="plot")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _colors(names: Sequence[str]) -> dict[str, tuple[float, float, float, float]]:
    require("matplotlib", extra="plot")
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {name: cmap(i % 10) for i, name in enumerate(names)}


def _check_nonempty(value: object, name: str, expected: str) -> None:
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"{name} must be a non-empty mapping {expected}, got {value!r:.80}")


def plot_sample_efficiency(
    curves: Mapping[str, Mapping[str, CurveEstimate]],
    *,
    ylabel: str = "IQM test return",
    ncols: int = 3,
) -> Figure:
    """One panel per env, one line per algorithm with its interval band, against env steps.

    ``curves`` is ``{env_id: {algorithm: CurveEstimate}}``, e.g.
    ``{env: curve_estimates(values, steps)}`` for each env.
    """
    _check_nonempty(curves, "curves", "{env_id: {algorithm: CurveEstimate}}")
    if isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be a positive int, got {ncols!r}")
    algos = list(dict.fromkeys(algo for per_env in curves.values() for algo in per_env))
    colors = _colors(algos)
    cols = min(ncols, len(curves))
    rows = math.ceil(len(curves) / cols)
    fig = _figure(4.5 * cols, 3.4 * rows)
    for i, (env_id, per_algo) in enumerate(curves.items()):
        ax = fig.add_subplot(rows, cols, i + 1)
        for algo, curve in per_algo.items():
            _line_with_band(ax, curve.env_steps, curve.estimate, curve.ci_low, curve.ci_high,
                            colors[algo], algo)  # fmt: skip
        ax.set_title(env_id)
        ax.set_xlabel("env steps")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
        ax.legend(loc="best", fontsize="small")
    return fig


def _interval_row(
    ax: Axes, y: int, est: IntervalEstimate, color: tuple[float, float, float, float]
) -> None:
    ax.barh(y, est.ci_high - est.ci_low, left=est.ci_low, height=0.6, color=color, alpha=0.6)
    ax.vlines(est.estimate, y - 0.3, y + 0.3, color="black", linewidth=1.5)


def plot_aggregate_intervals(
    summaries: Mapping[str, AggregateSummary],
    *,
    metrics: Sequence[AggregateMetric] = ("median", "iqm", "mean", "optimality_gap"),
    xlabel: str = "normalised score",
) -> Figure:
    """One panel per metric, one row per algorithm: the interval as a bar, the estimate as
    a black tick (the layout of Agarwal et al. 2021, figure 9)."""
    _check_nonempty(summaries, "summaries", "{algorithm: AggregateSummary}")
    unknown = [m for m in metrics if m not in _METRIC_TITLES]
    if not metrics or unknown:
        raise ValueError(
            f"metrics must be a non-empty subset of {list(_METRIC_TITLES)}, got {metrics!r}"
        )
    algos = list(summaries)
    colors = _colors(algos)
    fig = _figure(2.8 * len(metrics), 0.9 + 0.45 * len(algos))
    for k, metric in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), k + 1)
        for y, algo in enumerate(algos):
            est: IntervalEstimate = getattr(summaries[algo], metric)
            _interval_row(ax, y, est, colors[algo])
        ax.set_yticks(range(len(algos)), algos if k == 0 else [""] * len(algos))
        ax.set_ylim(-0.6, len(algos) - 0.4)
        ax.invert_yaxis()
        ax.set_title(_METRIC_TITLES[metric])
        ax.set_xlabel(xlabel)
        ax.grid(axis="x", alpha=0.3)
    return fig


def plot_performance_profiles(
    profiles: Mapping[str, PerformanceProfile],
    *,
    xlabel: str = r"normalised score $\tau$",
) -> Figure:
    """The fraction of runs scoring above tau against tau, one line and band per algorithm."""
    _check_nonempty(profiles, "profiles", "{algorithm: PerformanceProfile}")
    colors = _colors(list(profiles))
    fig = _figure(5.5, 3.8)
    ax = fig.add_subplot(1, 1, 1)
    for algo, profile in profiles.items():
        _line_with_band(ax, profile.taus, profile.fraction, profile.ci_low, profile.ci_high,
                        colors[algo], algo)  # fmt: skip
    ax.set_xlabel(xlabel)
    ax.set_ylabel(r"fraction of runs with score $> \tau$")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    return fig


def plot_probability_of_improvement(
    probabilities: Mapping[tuple[str, str], IntervalEstimate],
) -> Figure:
    """One row per pair ``(X, Y)``: P(X > Y) with its interval; 0.5 (no difference) dashed."""
    _check_nonempty(probabilities, "probabilities", "{(X, Y): IntervalEstimate}")
    pairs = list(probabilities)
    colors = _colors(list(dict.fromkeys(x for x, _ in pairs)))
    fig = _figure(5.5, 1.0 + 0.45 * len(pairs))
    ax = fig.add_subplot(1, 1, 1)
    for y, (x_algo, y_algo) in enumerate(pairs):
        _interval_row(ax, y, probabilities[(x_algo, y_algo)], colors[x_algo])
    ax.set_yticks(range(len(pairs)), [f"P({x} > {y})" for x, y in pairs])
    ax.set_ylim(-0.6, len(pairs) - 0.4)
    ax.invert_yaxis()
    ax.axvline(0.5, color="gray", linestyle="--", linewidth=1)
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("probability of improvement")
    ax.grid(axis="x", alpha=0.3)
    return fig


def _line_with_band(
    ax: Any, x: Any, estimate: Any, low: Any, high: Any, color: Any, label: str
) -> None:
    """The estimate as a line and its confidence interval as a shaded band around it."""
    single = len(estimate) == 1  # a one-point line is invisible without a marker
    ax.plot(x, estimate, color=color, label=label, marker="o" if single else None)
    ax.fill_between(x, low, high, color=color, alpha=_BAND_ALPHA, linewidth=0)
