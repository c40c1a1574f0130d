"""Experiments: many runs compared with seeded, stratified-bootstrap statistics, and plots.

Scores are ``{algorithm: array [n_runs, n_tasks]}``. Per env: :func:`summarize_tasks`
(mean, median, IQM over seeds). Across envs, on :func:`normalize_scores` output:
:func:`aggregate_estimates` (IQM, mean, median, optimality gap) and
:func:`performance_profiles`. :func:`pairwise_improvement` gives P(X > Y). Test curves
become scores with :func:`run_score` and sample-efficiency curves with :func:`align_curves`
and :func:`curve_estimates` (runs that reached their goal held at their last return by
:func:`carry_forward`). The ``plot_*`` functions (matplotlib, extra ``plot``) return
figures. Every interval is reproducible: the same input and ``seed`` give the same interval.
Runs: :func:`grid` enumerates ``RunSpec``s, :func:`run_experiment` runs them resumably into
run directories, :func:`load_experiment` reads them back. See ``docs/experiments.md``.
"""

from epochtrain.experiment.bootstrap import DEFAULT_REPS, IntervalEstimate, SeedLike
from epochtrain.experiment.curves import (
    SCORE_METHODS,
    CurveEstimate,
    CurveStatistic,
    ScoreMethod,
    align_curves,
    carry_forward,
    curve_estimates,
    run_score,
)
from epochtrain.experiment.normalization import (
    NormalizedScores,
    check_reference_scores,
    normalize_scores,
    random_score,
    reference_score,
)
from epochtrain.experiment.plots import (
    AggregateMetric,
    plot_aggregate_intervals,
    plot_performance_profiles,
    plot_probability_of_improvement,
    plot_sample_efficiency,
)
from epochtrain.experiment.results import Experiment, RunResult, RunStatus, load_experiment
from epochtrain.experiment.runner import BACKENDS, Backend, grid, run_experiment
from epochtrain.experiment.stats import (
    PROFILE_REPS,
    AggregateSummary,
    PerformanceProfile,
    TaskSummary,
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

__all__ = [
    "BACKENDS",
    "DEFAULT_REPS",
    "PROFILE_REPS",
    "SCORE_METHODS",
    "AggregateMetric",
    "AggregateSummary",
    "Backend",
    "CurveEstimate",
    "CurveStatistic",
    "Experiment",
    "IntervalEstimate",
    "NormalizedScores",
    "PerformanceProfile",
    "RunResult",
    "RunStatus",
    "ScoreMethod",
    "SeedLike",
    "TaskSummary",
    "aggregate_estimates",
    "aggregate_iqm",
    "aggregate_mean",
    "aggregate_median",
    "align_curves",
    "carry_forward",
    "check_reference_scores",
    "curve_estimates",
    "grid",
    "iqm",
    "load_experiment",
    "normalize_scores",
    "optimality_gap",
    "pairwise_improvement",
    "performance_profiles",
    "plot_aggregate_intervals",
    "plot_performance_profiles",
    "plot_probability_of_improvement",
    "plot_sample_efficiency",
    "probability_of_improvement",
    "random_score",
    "reference_score",
    "run_experiment",
    "run_score",
    "summarize_tasks",
]
