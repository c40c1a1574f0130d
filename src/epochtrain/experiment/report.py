"""The comparison report of an experiment: Markdown tables and, optionally, PNG figures.

:func:`build_report` computes every statistic of :mod:`epochtrain.experiment.stats` on an
:class:`~epochtrain.experiment.Experiment` and returns the Markdown that ``epochtrain
compare`` prints; with ``out_dir`` it also writes ``report.md`` and the figures there
(figures need matplotlib; without it the report says which extra to install). Bad input
(too few replicates, an ``out_dir`` that cannot hold the report) is refused before the
bootstrap starts. An interval over fewer than :data:`MIN_RUNS_FOR_CI` runs is not shown.
Runs that did not end at ``max_epoch`` are named, with why and where they ended, in the
tables' notes (:func:`~epochtrain.experiment.report_notes.run_notes`), whatever the score
and with or without ``out_dir``. With ``out_dir``, the figures and ``report.md`` are
published as one set, ``report.md`` last (:func:`~epochtrain.data.writes.replace_files`):
a write that fails (a full disk) leaves the directory's earlier report as it was, and the
error names the file and the fix.
"""

from __future__ import annotations

import io
import os
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from epochtrain.data.writes import check_writable_dir, replace_files
from epochtrain.experiment.bootstrap import FloatArray, IntervalEstimate
from epochtrain.experiment.curves import (
    CurveEstimate,
    ScoreMethod,
    align_curves,
    carry_forward,
    curve_estimates,
)
from epochtrain.experiment.normalization import (
    NormalizedScores,
    check_reference_scores,
    normalize_scores,
)
from epochtrain.experiment.report_notes import run_notes
from epochtrain.experiment.results import STOPPED_AT_GOAL, Experiment, RunResult
from epochtrain.experiment.stats import (
    aggregate_estimates,
    pairwise_improvement,
    performance_profiles,
    summarize_tasks,
)
from epochtrain.extras import MissingExtraError

__all__ = [
    "FIGURES",
    "MIN_REPS",
    "MIN_RUNS_FOR_CI",
    "REPORT_FILE",
    "build_report",
    "check_out_dir",
    "check_report_reps",
    "check_report_seed",
]

MIN_REPS = 100
"""Fewest bootstrap replicates a report takes: with fewer, the 2.5% and 97.5% percentiles
are one or two replicates each and the interval may not even contain its estimate."""

MIN_RUNS_FOR_CI = 2
"""Fewest runs per (algorithm, env) for an interval: a bootstrap of one run has zero width."""

REPORT_FILE = "report.md"
FIGURES = (
    "sample_efficiency.png",
    "aggregate_intervals.png",
    "performance_profiles.png",
    "probability_of_improvement.png",
)
"""The figures a report may write; those a new report does not draw are removed from
``out_dir`` (a figure of an earlier comparison), no other file is touched."""

_SCORE_TEXT = {
    "final": "final test return",
    "best": "best test return",
    "auc": "area under the test curve per env step (a run that reached stop_at held at its "
    "last test return up to the last test of the longest run on its env)",
}


def _est(est: IntervalEstimate, spec: str, n_runs: int) -> str:
    if n_runs < MIN_RUNS_FOR_CI:
        return f"{est.estimate:{spec}} [CI n/a: {n_runs} run]"
    return format(est, spec)


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
                f"| {env} | {algo} | {_est(s.iqm, '.1f', s.n_runs)} | {s.mean.estimate:.1f} | "
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
        n = norm[algo].shape[0]
        cells = [_est(e, ".3f", n) for e in (agg.iqm, agg.mean, agg.median, agg.optimality_gap)]
        lines.append(f"| {algo} | {' | '.join(cells)} |")
    return lines


def check_out_dir(out_dir: Path, name: str = "out_dir") -> None:
    """Create ``out_dir`` if needed and check that a file can be written in it, else raise
    a one-line ``ValueError`` naming ``name`` (``--out`` from the command line)."""
    check_writable_dir(out_dir, name)
    where = f"{name} {os.fspath(out_dir)!r}"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ValueError(
            f"{where} cannot hold the report ({why}): give a writable directory"
        ) from None


def check_report_reps(reps: int, name: str = "reps") -> int:
    """``reps`` if it is an int of at least :data:`MIN_REPS`, else a ``ValueError`` naming
    ``name`` (``--reps`` from the command line)."""
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < MIN_REPS:
        raise ValueError(
            f"{name} must be an int of at least {MIN_REPS} bootstrap replicates (default "
            f"10000), got {reps!r}: with fewer the 95% interval rests on one or two replicates"
        )
    return reps


def check_report_seed(seed: int, name: str = "seed") -> int:
    """``seed`` if it is an int of at least 0, else a ``ValueError`` naming ``name``
    (``--seed`` from the command line)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(
            f"{name} must be an int >= 0 (the seed of the bootstrap; default 0), got {seed!r}"
        )
    return seed


def _few_runs_note(scores: Mapping[str, FloatArray]) -> list[str]:
    few = [
        f"{algo} ({arr.shape[0]} run)"
        for algo, arr in scores.items()
        if arr.shape[0] < MIN_RUNS_FOR_CI
    ]
    if not few:
        return []
    return [
        f"**Warning:** no confidence interval for {', '.join(few)}: a bootstrap over fewer "
        f"than {MIN_RUNS_FOR_CI} runs per env has zero width, so the tables say `CI n/a` and "
        "the figures show no band; run more seeds (5 or more for useful intervals).",
        "",
    ]


_AUC_SPAN_WARNING = r".* without reaching stop_at; their auc covers their own tests only"
"""The warning :meth:`Experiment.scores` gives for short runs under ``auc``: the report
names those runs itself (:func:`run_notes`), so it is not repeated on stderr."""


def _normalised(
    scores: Mapping[str, FloatArray],
    envs: list[str],
    reference_scores: Mapping[str, float] | None,
    random_scores: Mapping[str, float] | None,
) -> tuple[NormalizedScores | None, str]:
    """The normalised scores, or ``None`` and why not. An env given a reference or random
    score must normalise (else the ``ValueError`` propagates: a value the user gave is
    wrong); an env given neither is skipped when its defaults cannot be found or measured."""
    given = set(reference_scores or {}) | set(random_scores or {})
    refs, rands, skipped = dict(reference_scores or {}), dict(random_scores or {}), []
    for i, env in enumerate(envs):
        column = {algo: arr[:, [i]] for algo, arr in scores.items()}
        try:
            one = normalize_scores(
                column,
                [env],
                reference_scores={env: refs[env]} if env in refs else None,
                random_scores={env: rands[env]} if env in rands else None,
            )
        except ValueError as exc:
            if env in given:
                raise
            skipped.append(str(exc))
            continue
        except Exception as exc:  # an env's own code, run to measure its random score
            skipped.append(
                f"measuring the random score of {env} raised {type(exc).__name__}: {exc} "
                "(give it with --random ENV=SCORE)"
            )
            continue
        refs[env], rands[env] = one.reference_scores[0], one.random_scores[0]
    if skipped:
        return None, f"Skipped, the scores cannot be normalised: {'; '.join(skipped)}"
    return normalize_scores(scores, envs, reference_scores=refs, random_scores=rands), ""


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
    """The Markdown comparison of ``experiment``'s finished runs (module docstring).

    A ``reference_scores`` or ``random_scores`` value that is not finite, names an env not
    compared, or leaves an env's reference at or below its random score raises
    ``ValueError`` before the bootstrap; an env given neither is left out of the aggregates
    (the report says why) when it has no ``reward_threshold`` or its random score cannot be
    measured."""
    check_report_reps(reps)
    check_report_seed(seed)
    check_reference_scores(reference_scores, random_scores, tasks=experiment.envs)
    if out_dir is not None:
        check_out_dir(out_dir)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_AUC_SPAN_WARNING, category=UserWarning)
        scores, envs = experiment.scores(score)
    norm, skipped = _normalised(scores, envs, reference_scores, random_scores)
    notes = run_notes(experiment, score)
    lines = [
        "# Experiment comparison",
        "",
        f"Score of a run: {_SCORE_TEXT[score]}. Intervals: 95% stratified bootstrap over "
        f"runs, {reps} replicates, seed {seed} (Agarwal et al. 2021).",
        "",
        *_few_runs_note(scores),
        *([f"- {note}" for note in notes] + [""] if notes else []),
        "## Per env",
        "",
        *_per_env_table(scores, envs, reps, seed),
        "",
        "## Across envs",
        "",
        *([skipped] if norm is None else _aggregate_table(norm, reps, seed)),
    ]
    if len(scores) > 1:
        lines += [
            "",
            "## Probability of improvement",
            "",
            "| pair | P(X > Y) [95% CI] |",
            "|---|---|",
        ]
        for (x, y), est in pairwise_improvement(scores, reps=reps, seed=seed).items():
            n = min(scores[x].shape[0], scores[y].shape[0])
            lines.append(f"| {x} vs {y} | {_est(est, '.2f', n)} |")
    if out_dir is not None:
        figures, figure_lines = _figures(experiment, norm, scores, reps, seed)
        lines += ["", "## Figures", "", *figure_lines]
        _write_report(out_dir, figures, ("\n".join(lines) + "\n").encode("utf-8"))
    return "\n".join(lines)


def _write_report(out_dir: Path, figures: Mapping[str, bytes], report: bytes) -> None:
    """Publish the figures and ``report.md`` as one set, ``report.md`` last (so it never
    describes figures of another report), then remove an earlier report's figures that
    this one does not draw; a failed write leaves the earlier report as it was."""
    replace_files(
        [
            *((out_dir / name, png) for name, png in figures.items()),
            (out_dir / REPORT_FILE, report),
        ],
        what="report file",
        fix="free space on its disk or give another directory (--out, out_dir in Python); "
        "an earlier report there is left as it was",
    )
    for stale in set(FIGURES) - set(figures):  # an earlier report's figure would mislead
        (out_dir / stale).unlink(missing_ok=True)


def _carried_forward(
    runs: list[RunResult], tested: FloatArray
) -> list[tuple[FloatArray, FloatArray]]:
    """The runs' test curves, each run that reached its goal (``stop_at``) held at its last
    test return at the later env steps of ``tested`` (every test on the env): it solved the
    task and stopped, so its curve is not cut where it stopped, and it spans what the
    scores (:meth:`Experiment.scores`) count."""
    return carry_forward(
        [(run.steps, run.test_returns) for run in runs],
        [run.stop_reason == STOPPED_AT_GOAL for run in runs],
        tested=tested,
    )


def _sample_efficiency(
    experiment: Experiment, reps: int, seed: int
) -> tuple[dict[str, dict[str, CurveEstimate]], list[str]]:
    """``{env: {algo: CurveEstimate}}`` on each algorithm's own grid, its reached-goal runs
    carried forward to the last test on the env (of any algorithm), and notes on curves that
    short runs cut (the runs themselves are named by :func:`run_notes`)."""
    curves: dict[str, dict[str, CurveEstimate]] = {}
    notes: list[str] = []
    for env in experiment.envs:
        curves[env] = {}
        on_env = [r.steps for r in experiment.finished() if r.env_id == env and r.steps.size]
        tested = np.unique(np.concatenate(on_env)) if on_env else np.zeros(0)
        for algo in experiment.algos:
            runs = [
                r
                for r in experiment.finished()
                if r.env_id == env and r.algo == algo and r.test_returns.size
            ]
            if not runs:
                continue
            try:
                grid, values = align_curves(_carried_forward(runs, tested))
            except ValueError as exc:  # runs that share no env steps: no common curve
                notes.append(f"**Warning:** {algo} on {env}: no curve drawn: {exc}.")
                continue
            last = max(float(r.steps[-1]) for r in runs)
            if grid[-1] < last:
                short = [r.run_id for r in runs if r.steps[-1] <= grid[-1]]
                notes.append(
                    f"**Warning:** {algo} on {env}: the curve ends at {grid[-1]:.0f} env steps "
                    f"({grid.size} test{'s' if grid.size > 1 else ''}), where "
                    f"{', '.join(short)} ended without reaching stop_at; its other runs go "
                    f"on to {last:.0f}."
                )
            est = curve_estimates({algo: values}, grid, reps=reps, seed=seed)
            curves[env][algo] = est[algo]
    return {env: per_algo for env, per_algo in curves.items() if per_algo}, notes


def _figures(
    experiment: Experiment,
    norm: NormalizedScores | None,
    scores: Mapping[str, FloatArray],
    reps: int,
    seed: int,
) -> tuple[dict[str, bytes], list[str]]:
    """``({file name: PNG bytes}, the report's lines on them)``; nothing is written here."""
    from epochtrain.experiment import plots

    curves, notes = _sample_efficiency(experiment, reps, seed)
    lines = [f"- {note}" for note in notes] + ([""] if notes else [])
    try:
        figures = {}
        if curves:
            figures["sample_efficiency.png"] = plots.plot_sample_efficiency(curves)
        if norm is not None:
            summaries = aggregate_estimates(norm, reps=reps, seed=seed)
            figures["aggregate_intervals.png"] = plots.plot_aggregate_intervals(summaries)
            profiles = performance_profiles(norm, seed=seed)
            figures["performance_profiles.png"] = plots.plot_performance_profiles(profiles)
        if len(scores) > 1:
            poi = pairwise_improvement(scores, reps=reps, seed=seed)
            figures["probability_of_improvement.png"] = plots.plot_probability_of_improvement(poi)
    except MissingExtraError as exc:
        figures = {}
        lines.append(f"Figures skipped: {exc}")
    pngs = {}
    for name, fig in figures.items():
        png = io.BytesIO()
        fig.savefig(png, dpi=110, format="png")
        pngs[name] = png.getvalue()
    titles = [name.removesuffix(".png").replace("_", " ") for name in pngs]
    return pngs, lines + [f"![{title}]({name})" for name, title in zip(pngs, titles, strict=True)]
