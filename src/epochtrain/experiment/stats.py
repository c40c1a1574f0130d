"""Statistics of many runs with stratified-bootstrap confidence intervals.

The estimators and their intervals follow Agarwal et al. 2021, "Deep Reinforcement Learning
at the Edge of the Statistical Precipice" (NeurIPS), and agree with rliable's:

- per (algorithm, task) over seeds: mean, median and interquartile mean (:func:`summarize_tasks`);
- across tasks, on normalised scores: IQM, mean and median of the task means, optimality gap
  (:func:`aggregate_estimates`), performance profiles (:func:`performance_profiles`);
- probability of improvement of one algorithm over another (:func:`pairwise_improvement`).

Inputs are ``{algorithm: array [n_runs, n_tasks]}`` as in rliable; algorithms may have
different numbers of runs but must share the tasks, in the same column order. Scores of
several tasks are only aggregated once normalised (:func:`~epochtrain.experiment.normalize_scores`),
since raw returns of different envs are on different scales.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import numpy.typing as npt

from epochtrain.experiment.bootstrap import (
    DEFAULT_REPS,
    FloatArray,
    IntervalEstimate,
    SeedLike,
    check_confidence,
    check_reps,
    check_score_dict,
    check_scores,
    interval,
    percentile_interval,
    rng_for,
    stratified_bootstrap,
)
from epochtrain.experiment.normalization import NormalizedScores

__all__ = [
    "PROFILE_REPS",
    "AggregateSummary",
    "PerformanceProfile",
    "TaskSummary",
    "aggregate_estimates",
    "aggregate_iqm",
    "aggregate_mean",
    "aggregate_median",
    "iqm",
    "optimality_gap",
    "pairwise_improvement",
    "performance_profiles",
    "probability_of_improvement",
    "summarize_tasks",
]

PROFILE_REPS = 2_000
"""Bootstrap replicates per performance profile (rliable's default)."""


# Batched estimators: ``x`` is ``[..., n_runs, n_tasks]``, the result drops the last two axes.


def _trimmed_mean_runs(x: FloatArray) -> FloatArray:
    """IQM over runs (axis -2) of each task: the mean after cutting ``floor(n / 4)`` runs
    from each end, as ``scipy.stats.trim_mean(x, 0.25)``."""
    n = x.shape[-2]
    cut = int(0.25 * n)
    return np.asarray(np.sort(x, axis=-2)[..., cut : n - cut, :].mean(axis=-2))


def _iqm(x: FloatArray) -> FloatArray:
    flat = x.reshape(*x.shape[:-2], 1, -1)  # every run of every task in one stratum
    return _trimmed_mean_runs(np.swapaxes(flat, -1, -2))[..., 0]


def _mean(x: FloatArray) -> FloatArray:
    return np.asarray(x.mean(axis=-2).mean(axis=-1))


def _median(x: FloatArray) -> FloatArray:
    return np.asarray(np.median(x.mean(axis=-2), axis=-1))


def _optimality_gap(x: FloatArray, gamma: float) -> FloatArray:
    return np.asarray(gamma - np.minimum(x, gamma).mean(axis=(-2, -1)))


def iqm(values: npt.ArrayLike) -> float:
    """Interquartile mean of all ``values``: the mean of the middle half once sorted.

    ``floor(n / 4)`` values are cut from each end (``scipy.stats.trim_mean(values, 0.25)``):
    ``iqm([1, 2, 3, 4, 100]) == 3.0``. Robust to outlier runs, yet less noisy than the median.
    """
    try:
        flat = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"values must be an array of numbers, got {values!r:.80}") from exc
    check_scores(flat, "values", ndim=1)
    return float(_iqm(flat.reshape(-1, 1)))


def aggregate_iqm(scores: npt.ArrayLike) -> float:
    """IQM over every run of every task of ``scores [n_runs, n_tasks]``."""
    return float(_iqm(check_scores(scores, "scores")))


def aggregate_mean(scores: npt.ArrayLike) -> float:
    """Mean over tasks of each task's mean score, for ``scores [n_runs, n_tasks]``."""
    return float(_mean(check_scores(scores, "scores")))


def aggregate_median(scores: npt.ArrayLike) -> float:
    """Median over tasks of each task's mean score (rliable's definition), for
    ``scores [n_runs, n_tasks]``; with one task it is that task's mean."""
    return float(_median(check_scores(scores, "scores")))


def optimality_gap(scores: npt.ArrayLike, gamma: float = 1.0) -> float:
    """How far runs fall short of ``gamma``: ``gamma - mean(min(score, gamma))``.

    On normalised scores ``gamma=1`` is the reference score; lower is better.
    """
    return float(_optimality_gap(check_scores(scores, "scores"), gamma))


def _check_aggregatable(scores: Mapping[str, FloatArray], normalized: bool, what: str) -> None:
    n_tasks = next(iter(scores.values())).shape[1]
    if n_tasks > 1 and not normalized:
        raise ValueError(
            f"{what} across {n_tasks} tasks needs normalised scores, since raw returns of "
            "different envs are on different scales; pass normalize_scores(scores, tasks) "
            "(or normalized=True if the scores are already normalised), or compare envs "
            "one at a time with summarize_tasks"
        )


@dataclass(frozen=True)
class TaskSummary:
    """Mean, median and IQM of one algorithm's runs on one task, each with its interval."""

    n_runs: int
    mean: IntervalEstimate
    median: IntervalEstimate
    iqm: IntervalEstimate


@dataclass(frozen=True)
class AggregateSummary:
    """One algorithm's aggregate performance across tasks, each with its interval."""

    n_runs: int
    """Runs per task."""
    n_tasks: int
    iqm: IntervalEstimate
    """IQM over every run of every task."""
    mean: IntervalEstimate
    """Mean of the task means."""
    median: IntervalEstimate
    """Median of the task means."""
    optimality_gap: IntervalEstimate
    """``gamma - mean(min(score, gamma))``; lower is better."""


@dataclass(frozen=True)
class PerformanceProfile:
    """Fraction of runs scoring above each threshold ``tau``, with a pointwise band."""

    taus: FloatArray
    fraction: FloatArray
    ci_low: FloatArray
    ci_high: FloatArray


def _task_stats(x: FloatArray) -> FloatArray:
    return np.stack([x.mean(axis=-2), np.median(x, axis=-2), _trimmed_mean_runs(x)], axis=-2)


def summarize_tasks(
    scores: Mapping[str, npt.ArrayLike],
    *,
    tasks: Sequence[str] | None = None,
    reps: int = DEFAULT_REPS,
    confidence: float = 0.95,
    seed: SeedLike = 0,
) -> dict[str, dict[str, TaskSummary]]:
    """Per algorithm and task: mean, median and IQM over runs, with bootstrap intervals.

    ``scores`` is ``{algorithm: [n_runs, n_tasks]}`` of raw or normalised scores; ``tasks``
    names the columns (default ``"0"``, ``"1"``, ...). Returns
    ``{algorithm: {task: TaskSummary}}``. Each task's runs are resampled on their own.
    """
    checked = check_score_dict(scores)
    reps, confidence = check_reps(reps), check_confidence(confidence)
    names = _task_names(tasks, next(iter(checked.values())).shape[1])
    result: dict[str, dict[str, TaskSummary]] = {}
    for algo, arr in checked.items():
        point = _task_stats(arr)
        reps_stats = stratified_bootstrap((arr,), _task_stats, reps=reps, rng=rng_for(seed, algo))
        low, high = percentile_interval(reps_stats, confidence)
        result[algo] = {
            task: TaskSummary(
                arr.shape[0],
                *(interval(point[s, m], low[s, m], high[s, m], confidence) for s in range(3)),
            )
            for m, task in enumerate(names)
        }
    return result


def _task_names(tasks: Sequence[str] | None, n_tasks: int) -> list[str]:
    if tasks is None:
        return [str(m) for m in range(n_tasks)]
    if isinstance(tasks, str) or len(tasks) != n_tasks:
        raise ValueError(
            f"tasks must name each of the {n_tasks} score columns in order, got {tasks!r}"
        )
    return [str(task) for task in tasks]


def aggregate_estimates(
    scores: Mapping[str, npt.ArrayLike],
    *,
    normalized: bool = False,
    gamma: float = 1.0,
    reps: int = DEFAULT_REPS,
    confidence: float = 0.95,
    seed: SeedLike = 0,
) -> dict[str, AggregateSummary]:
    """Per algorithm: IQM, mean, median and optimality gap across tasks, with intervals.

    ``scores`` of several tasks must be :class:`~epochtrain.experiment.NormalizedScores`
    (or ``normalized=True`` when normalised by other means); ``gamma`` is the optimality-gap
    target (1 = the reference score).
    """
    checked = check_score_dict(scores)
    _check_aggregatable(checked, normalized or isinstance(scores, NormalizedScores), "aggregating")
    reps, confidence = check_reps(reps), check_confidence(confidence)

    def stat(x: FloatArray) -> FloatArray:
        return np.stack([_iqm(x), _mean(x), _median(x), _optimality_gap(x, gamma)], axis=-1)

    result = {}
    for algo, arr in checked.items():
        point = stat(arr)
        low, high = percentile_interval(
            stratified_bootstrap((arr,), stat, reps=reps, rng=rng_for(seed, algo)), confidence
        )
        est = [interval(point[k], low[k], high[k], confidence) for k in range(4)]
        result[algo] = AggregateSummary(arr.shape[0], arr.shape[1], *est)
    return result


def performance_profiles(
    scores: Mapping[str, npt.ArrayLike],
    *,
    taus: npt.ArrayLike | None = None,
    normalized: bool = False,
    reps: int = PROFILE_REPS,
    confidence: float = 0.95,
    seed: SeedLike = 0,
) -> dict[str, PerformanceProfile]:
    """Per algorithm: the fraction of runs (of every task) with a score above each ``tau``.

    ``taus`` defaults to 101 points shared by all algorithms, spanning the scores and, for
    normalised scores, at least [0, 1]. Several tasks need normalised scores, as for
    :func:`aggregate_estimates`. The band is a pointwise bootstrap interval.
    """
    checked = check_score_dict(scores)
    is_normalized = normalized or isinstance(scores, NormalizedScores)
    _check_aggregatable(checked, is_normalized, "a performance profile")
    reps, confidence = check_reps(reps), check_confidence(confidence)
    grid = (
        _default_taus(checked, is_normalized)
        if taus is None
        else check_scores(taus, "taus", ndim=1)
    )

    def stat(x: FloatArray) -> FloatArray:
        return np.stack([(x > tau).mean(axis=(-2, -1)) for tau in grid], axis=-1)

    result = {}
    for algo, arr in checked.items():
        low, high = percentile_interval(
            stratified_bootstrap((arr,), stat, reps=reps, rng=rng_for(seed, algo)), confidence
        )
        result[algo] = PerformanceProfile(grid, stat(arr), low, high)
    return result


def _default_taus(scores: Mapping[str, FloatArray], normalized: bool) -> FloatArray:
    low = min(float(arr.min()) for arr in scores.values())
    high = max(float(arr.max()) for arr in scores.values())
    if normalized:
        low, high = min(low, 0.0), max(high, 1.0)
    if high == low:
        low, high = low - 0.5, high + 0.5
    return np.linspace(low, high, 101)


def _improvement(xs: FloatArray, ys: FloatArray) -> FloatArray:
    """P(X > Y) per batch entry, ``xs [..., n_x, n_tasks]``, ``ys [..., n_y, n_tasks]``: the
    Mann-Whitney U statistic over ``n_x * n_y`` (a tie counts 1/2), averaged over tasks.

    U comes from ranks, in O(n log n) per task: the sum of X's ranks in the pooled sample,
    tied values sharing their mean rank, less ``n_x (n_x + 1) / 2``. Ranks are whole or
    half numbers, so U is exact: it equals the count of pairs X > Y plus half the ties.
    """
    n_x, n_y = xs.shape[-2], ys.shape[-2]
    batch = np.broadcast_shapes(xs.shape[:-2], ys.shape[:-2])
    pooled = np.concatenate(
        [
            np.broadcast_to(xs, (*batch, *xs.shape[-2:])),
            np.broadcast_to(ys, (*batch, *ys.shape[-2:])),
        ],
        axis=-2,
    )
    order = np.argsort(pooled, axis=-2, kind="stable")
    ordered = np.take_along_axis(pooled, order, axis=-2)
    n = n_x + n_y
    position = np.arange(n).reshape(n, 1)
    new_value = ordered[..., 1:, :] != ordered[..., :-1, :]
    edge = np.ones((*batch, 1, ordered.shape[-1]), dtype=bool)
    # each position's run of equal values: its first and last position
    first = np.maximum.accumulate(
        np.where(np.concatenate([edge, new_value], axis=-2), position, 0), axis=-2
    )
    is_last = np.concatenate([new_value, edge], axis=-2)
    last = np.flip(
        np.minimum.accumulate(np.flip(np.where(is_last, position, n - 1), axis=-2), axis=-2),
        axis=-2,
    )
    mean_rank = (first + last) / 2.0 + 1.0
    rank_sum = np.where(order < n_x, mean_rank, 0.0).sum(axis=-2)
    u = rank_sum - n_x * (n_x + 1) / 2.0
    return np.asarray((u / (n_x * n_y)).mean(axis=-1))


def probability_of_improvement(scores_x: npt.ArrayLike, scores_y: npt.ArrayLike) -> float:
    """P(X > Y): the chance that a run of X beats a run of Y on the same task, averaged
    over tasks; ties count 1/2. ``scores_x [n_x, n_tasks]``, ``scores_y [n_y, n_tasks]``."""
    checked = check_score_dict({"scores_x": scores_x, "scores_y": scores_y}, "scores")
    return float(_improvement(checked["scores_x"], checked["scores_y"]))


def pairwise_improvement(
    scores: Mapping[str, npt.ArrayLike],
    *,
    pairs: Sequence[tuple[str, str]] | None = None,
    reps: int = DEFAULT_REPS,
    confidence: float = 0.95,
    seed: SeedLike = 0,
) -> dict[tuple[str, str], IntervalEstimate]:
    """P(X > Y) with a bootstrap interval for each pair ``(X, Y)`` of algorithms.

    ``pairs`` defaults to every pair in the order of ``scores`` (``P(Y > X) = 1 - P(X > Y)``).
    X's and Y's runs are resampled independently within each task. Scores need no
    normalisation: runs are only compared within a task.
    """
    checked = check_score_dict(scores)
    reps, confidence = check_reps(reps), check_confidence(confidence)
    chosen = list(combinations(checked, 2)) if pairs is None else list(pairs)
    result = {}
    for x, y in chosen:
        missing = [name for name in (x, y) if name not in checked]
        if missing or x == y:
            raise ValueError(
                f"pairs must hold two different algorithms of scores {sorted(checked)}, "
                f"got {(x, y)!r}"
            )
        point = _improvement(checked[x], checked[y])
        replicates = stratified_bootstrap(
            (checked[x], checked[y]), _improvement, reps=reps, rng=rng_for(seed, f"{x}>{y}")
        )
        low, high = percentile_interval(replicates, confidence)
        result[(x, y)] = interval(float(point), float(low), float(high), confidence)
    return result
