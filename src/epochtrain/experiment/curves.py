"""Test curves: a run's score from its curve, curves aligned on env steps, and their IQM band.

A test curve is the mean test return after each epoch, against the env steps collected so
far. Runs tested at different env steps (another ``step_per_epoch``, a run cut short) are
put on one grid of env steps by **linear interpolation between a run's own tests, never
extrapolated**: the default grid is every env step at which any run was tested, within the
range every run covers (from the latest first test to the earliest last test). Curves that
share their test steps are thus left exactly as they are.

A run that stopped because it reached its goal (``stop_at``: it solved the task) is first
**carried forward** (:func:`carry_forward`): held at its last test return at the later tests
of the runs it is compared with, so neither a curve nor a score is cut where it stopped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt

from epochtrain.experiment.bootstrap import (
    DEFAULT_REPS,
    FloatArray,
    SeedLike,
    check_confidence,
    check_reps,
    check_scores,
    percentile_interval,
    rng_for,
    stratified_bootstrap,
)
from epochtrain.experiment.stats import _trimmed_mean_runs

__all__ = [
    "SCORE_METHODS",
    "CurveEstimate",
    "CurveStatistic",
    "ScoreMethod",
    "align_curves",
    "carry_forward",
    "curve_estimates",
    "run_score",
]

ScoreMethod = Literal["final", "best", "auc"]
SCORE_METHODS: tuple[str, ...] = get_args(ScoreMethod)
"""How a run's test curve becomes one score: its last test return (``final``, the default),
its highest (``best``, optimistic: the maximum of noisy tests), or the area under the curve
divided by the env steps it spans (``auc``: the time-averaged return, which rewards learning
early). Only ``auc`` depends on the span: holding a curve at its last return
(:func:`carry_forward`) leaves ``final`` and ``best`` as they are."""

CurveStatistic = Literal["iqm", "mean", "median"]


def _check_curve(
    env_steps: npt.ArrayLike, returns: npt.ArrayLike, name: str
) -> tuple[FloatArray, FloatArray]:
    steps = check_scores(env_steps, f"{name} env_steps", ndim=1)
    values = check_scores(returns, f"{name} returns", ndim=1)
    if steps.shape != values.shape:
        raise ValueError(
            f"{name} has {steps.size} env_steps but {values.size} returns: one return per test"
        )
    if np.any(np.diff(steps) <= 0):
        raise ValueError(f"{name} env_steps must increase strictly, got {steps.tolist()}")
    return steps, values


def run_score(
    env_steps: npt.ArrayLike, returns: npt.ArrayLike, method: ScoreMethod = "final"
) -> float:
    """One run's score from its test curve (``returns`` measured after ``env_steps``).

    ``method`` is one of :data:`SCORE_METHODS`. ``auc`` is the trapezoidal area divided by
    ``env_steps[-1] - env_steps[0]``, in return units; a one-test curve scores its return.
    The curve is scored as given: :meth:`Experiment.scores
    <epochtrain.experiment.Experiment.scores>` first carries forward the runs that reached
    their goal (:func:`carry_forward`), so that their ``auc`` spans what the others' does.
    """
    steps, values = _check_curve(env_steps, returns, "the curve")
    if method == "final":
        return float(values[-1])
    if method == "best":
        return float(values.max())
    if method == "auc":
        if steps.size == 1:
            return float(values[0])
        area = float(np.sum(np.diff(steps) * (values[1:] + values[:-1]) / 2.0))
        return area / float(steps[-1] - steps[0])
    raise ValueError(f"method must be one of {SCORE_METHODS}, got {method!r}")


def carry_forward(
    curves: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]],
    reached_goal: Sequence[bool],
    *,
    tested: npt.ArrayLike | None = None,
) -> list[tuple[FloatArray, FloatArray]]:
    """The test curves ``[(env_steps, returns), ...]`` with each run that reached its goal
    (``reached_goal[i]``: it stopped at ``stop_at``, having solved the task) held at its last
    test return at every later env step of ``tested``: by default the env steps at which
    any of ``curves`` was tested, so the span of the curves becomes the longest one's (pass
    the tests of more runs, e.g. every algorithm's on the env, to extend to theirs).

    A run that ended early for another reason (a shorter budget, a non-finite loss) is left
    as it is: it is not known what it would have done, so it is not extended.
    """
    if isinstance(curves, Mapping) or len(curves) != len(reached_goal):
        raise ValueError(
            f"curves and reached_goal must be sequences of the same length, got "
            f"{len(curves)} curves and {len(reached_goal)} flags"
        )
    checked = [_check_curve(s, r, f"curves[{i}]") for i, (s, r) in enumerate(curves)]
    if not checked:
        return []
    if tested is None:
        steps_tested = np.unique(np.concatenate([steps for steps, _ in checked]))
    else:
        steps_tested = np.unique(check_scores(tested, "tested", ndim=1))
    carried = []
    for (steps, returns), goal in zip(checked, reached_goal, strict=True):
        if goal:
            later = steps_tested[steps_tested > steps[-1]]
            steps = np.concatenate([steps, later])
            returns = np.concatenate([returns, np.full(later.size, returns[-1])])
        carried.append((steps, returns))
    return carried


def align_curves(
    curves: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]],
    *,
    grid: npt.ArrayLike | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Put runs' test curves ``[(env_steps, returns), ...]`` on one grid of env steps.

    Returns ``(grid, values [n_runs, len(grid)])``. ``grid`` defaults to every tested step
    within the range all runs cover (module docstring); a given ``grid`` must lie within
    each run's tested range, since curves are interpolated, never extrapolated.
    """
    if isinstance(curves, Mapping) or len(curves) == 0:
        raise ValueError(
            f"curves must be a non-empty sequence of (env_steps, returns) pairs, got {curves!r:.80}"
        )
    checked = [_check_curve(s, r, f"curves[{i}]") for i, (s, r) in enumerate(curves)]
    start = max(float(steps[0]) for steps, _ in checked)
    stop = min(float(steps[-1]) for steps, _ in checked)
    if grid is None:
        if start > stop:
            raise ValueError(
                f"curves do not overlap in env steps (latest first test {start}, earliest "
                f"last test {stop}); pass a grid, or compare runs of similar length"
            )
        union = np.unique(np.concatenate([steps for steps, _ in checked]))
        points = union[(union >= start) & (union <= stop)]
    else:
        points = check_scores(grid, "grid", ndim=1)
        if np.any(np.diff(points) <= 0):
            raise ValueError(f"grid must increase strictly, got {points.tolist()}")
        for i, (steps, _) in enumerate(checked):
            if points[0] < steps[0] or points[-1] > steps[-1]:
                raise ValueError(
                    f"grid spans env steps [{points[0]}, {points[-1]}] but curves[{i}] was "
                    f"tested on [{steps[0]}, {steps[-1]}] only; curves are not extrapolated, "
                    f"so keep the grid within [{start}, {stop}]"
                )
    values = np.stack([np.interp(points, steps, returns) for steps, returns in checked])
    return points, values


@dataclass(frozen=True)
class CurveEstimate:
    """A statistic of runs at each env step of a grid, with a pointwise interval band."""

    env_steps: FloatArray
    estimate: FloatArray
    ci_low: FloatArray
    ci_high: FloatArray
    n_runs: int


def curve_estimates(
    values: Mapping[str, npt.ArrayLike],
    env_steps: npt.ArrayLike,
    *,
    statistic: CurveStatistic = "iqm",
    reps: int = DEFAULT_REPS,
    confidence: float = 0.95,
    seed: SeedLike = 0,
) -> dict[str, CurveEstimate]:
    """Sample-efficiency curves: per algorithm, ``statistic`` over runs at each env step.

    ``values`` is ``{algorithm: [n_runs, len(env_steps)]}`` on one grid (:func:`align_curves`
    of all runs of one env). A bootstrap replicate resamples whole runs (curves), and the
    band is the pointwise percentile interval.
    """
    if statistic not in get_args(CurveStatistic):
        raise ValueError(f"statistic must be one of {get_args(CurveStatistic)}, got {statistic!r}")
    if not isinstance(values, Mapping) or not values:
        raise ValueError(
            f"values must be a non-empty mapping {{algorithm: [n_runs, n_points]}}, "
            f"got {values!r:.80}"
        )
    reps, confidence = check_reps(reps), check_confidence(confidence)
    steps = check_scores(env_steps, "env_steps", ndim=1)

    def stat(x: FloatArray) -> FloatArray:  # x: [..., n_runs, 1, n_points]
        runs = x[..., 0, :]
        if statistic == "mean":
            return np.asarray(runs.mean(axis=-2))
        if statistic == "median":
            return np.asarray(np.median(runs, axis=-2))
        return _trimmed_mean_runs(runs)

    result = {}
    for algo, raw in values.items():
        arr = check_scores(raw, f"values[{algo!r}]")
        if arr.shape[1] != steps.size:
            raise ValueError(
                f"values[{algo!r}] has {arr.shape[1]} points per run but env_steps has "
                f"{steps.size}; align the curves first with align_curves"
            )
        runs = arr[:, None, :]
        replicates = stratified_bootstrap((runs,), stat, reps=reps, rng=rng_for(seed, algo))
        low, high = percentile_interval(replicates, confidence)
        result[str(algo)] = CurveEstimate(steps, stat(runs), low, high, arr.shape[0])
    return result
