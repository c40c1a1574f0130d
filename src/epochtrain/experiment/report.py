"""The comparison report of an experiment: Markdown tables and, optionally, PNG figures.

:func:`build_report` computes every statistic of :mod:`epochtrain.experiment.stats` on an
:class:`~epochtrain.experiment.Experiment` and returns the Markdown that ``epochtrain
compare`` prints; with ``out_dir`` it also writes ``report.md`` and the figures there
(figures need matplotlib; without it the report says which extra to install).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path

from epochtrain.data.io import replace_file
from epochtrain.experiment.bootstrap import FloatArray
from epochtrain.experiment.curves import (
    CurveEstimate,
    ScoreMethod,
    align_curves,
    curve_estimates,
)
from epochtrain.experiment.normalization import NormalizedScores, normalize_scores
from epochtrain.experiment.results import Experiment
from epochtrain.experiment.stats import (
    aggregate_estimates,
    pairwise_improvement,
    performance_profiles,
    summarize_tasks,
)
from epochtrain.extras import MissingExtraError

__all__ = ["build_report"]

_SCORE_TEXT = {
    "final": "final test return",
    "best": "best test return",
    "auc": "area under the test curve per env step",
}


def _per_env_table(
    scores: Mapping[str, FloatArray], envs: list[str], reps: int, seed: int
) -> list[str]:
    summary = summarize_tasks(scores, tasks=envs, reps=reps, seed=seed)
    lines = [
        "| env | algorithm | IQM [95% CI] | mean | median | runs |",
        "|---|---|---|---|---|---|",
    ]
    for env in envs:
        for algo, per_env in summary.items():
            s = per_env[env]
            lines.append(
                f"| {env} | {algo} | {s.iqm:.1f} | {s.mean.estimate:.1f} | "
                f"{s.median.estimate:.1f} | {s.n_runs} |"
            )
    return lines


def _aggregate_table(norm: NormalizedScores, reps: int, seed: int) -> list[str]:
    lines = [
        "Normalised score: (R - R_random) / (R_reference - R_random).",
        "",
        "| env | random | reference |",
        "|---|---|---|",
    ]
    for env, rand, ref in zip(norm.tasks, norm.random_scores, norm.reference_scores, strict=True):
        lines.append(f"| {env} | {rand:.1f} | {ref:.1f} |")
    lines += [
        "",
        "| algorithm | IQM [95% CI] | mean [95% CI] | median [95% CI] | optimality gap [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for algo, agg in aggregate_estimates(norm, reps=reps, seed=seed).items():
        lines.append(
            f"| {algo} | {agg.iqm:.3f} | {agg.mean:.3f} | {agg.median:.3f} | "
            f"{agg.optimality_gap:.3f} |"
        )
    return lines


def build_report(
    experiment: Experiment,
    *,
    score: ScoreMethod = "final",
    reps: int,
    seed: int,
    reference_scores: Mapping[str, float] | None = None,
    random_scores: Mapping[str, float] | None = None,
    out_dir: Path | None = None,
) -> str:
    """The Markdown comparison of ``experiment``'s finished runs (module docstring)."""
    scores, envs = experiment.scores(score)
    lines = [
        "# Experiment comparison",
        "",
        f"Score of a run: {_SCORE_TEXT[score]}. Intervals: 95% stratified bootstrap over "
        f"runs, {reps} replicates, seed {seed} (Agarwal et al. 2021).",
        "",
        "## Per env",
        "",
        *_per_env_table(scores, envs, reps, seed),
        "",
        "## Across envs",
        "",
    ]
    norm: NormalizedScores | None = None
    try:
        norm = normalize_scores(
            scores, envs, reference_scores=reference_scores, random_scores=random_scores
        )
        lines += _aggregate_table(norm, reps, seed)
    except ValueError as exc:
        lines.append(f"Skipped, the scores cannot be normalised: {exc}")
    if len(scores) > 1:
        lines += [
            "",
            "## Probability of improvement",
            "",
            "| pair | P(X > Y) [95% CI] |",
            "|---|---|",
        ]
        for (x, y), est in pairwise_improvement(scores, reps=reps, seed=seed).items():
            lines.append(f"| {x} vs {y} | {est:.2f} |")
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        lines += ["", "## Figures", "", *_figures(experiment, norm, scores, reps, seed, out_dir)]
        replace_file(out_dir / "report.md", ("\n".join(lines) + "\n").encode("utf-8"))
    return "\n".join(lines)


def _figures(
    experiment: Experiment,
    norm: NormalizedScores | None,
    scores: Mapping[str, FloatArray],
    reps: int,
    seed: int,
    out_dir: Path,
) -> list[str]:
    from epochtrain.experiment import plots

    written: list[tuple[str, str]] = []
    try:
        curves: dict[str, dict[str, CurveEstimate]] = {}
        for env in experiment.envs:
            curves[env] = {}
            for algo, runs in experiment.curves(env).items():
                # each algorithm on the grid of its own runs: its line spans all its tests
                grid, values = align_curves(runs)
                est = curve_estimates({algo: values}, grid, reps=reps, seed=seed)
                curves[env][algo] = est[algo]
        figures = {"sample_efficiency.png": plots.plot_sample_efficiency(curves)}
        if norm is not None:
            summaries = aggregate_estimates(norm, reps=reps, seed=seed)
            figures["aggregate_intervals.png"] = plots.plot_aggregate_intervals(summaries)
            profiles = performance_profiles(norm, seed=seed)
            figures["performance_profiles.png"] = plots.plot_performance_profiles(profiles)
        if len(scores) > 1:
            poi = pairwise_improvement(scores, reps=reps, seed=seed)
            figures["probability_of_improvement.png"] = plots.plot_probability_of_improvement(poi)
    except MissingExtraError as exc:
        return [f"Figures skipped: {exc}"]
    for name, fig in figures.items():
        png = io.BytesIO()
        fig.savefig(png, dpi=110, format="png")
        replace_file(out_dir / name, png.getvalue())
        written.append((name, name.removesuffix(".png").replace("_", " ")))
    return [f"![{title}]({name})" for name, title in written]
