"""The notes of a comparison report on runs that ended early or stopped at their goal.

A run that did not end at ``max_epoch`` (it reached ``stop_at``, ended on another
``stop_reason``, or before the last test on its env) is scored differently from one that
ran its whole budget; :func:`run_notes` names each such run, with why and where it ended
and how the score counts it, for :func:`~epochtrain.experiment.report.build_report`.
"""

from __future__ import annotations

from epochtrain.experiment.curves import ScoreMethod
from epochtrain.experiment.results import STOPPED_AT_GOAL, Experiment, RunResult

__all__ = ["FULL_BUDGET", "run_notes"]

FULL_BUDGET = "max_epoch"
"""The ``stop_reason`` of a run that ran every epoch it was given."""


def run_notes(experiment: Experiment, score: ScoreMethod = "final") -> list[str]:
    """One line per finished run that did not end at ``max_epoch``, or ended before the last
    test on its env, saying which run, why (its ``stop_reason``), at what step and how
    ``score`` counts it: a run that reached ``stop_at`` is held at its last test return
    (:meth:`Experiment.scores`); any other run is scored on its own tests only."""
    lines: list[str] = []
    for env in experiment.envs:
        runs = [r for r in experiment.finished() if r.env_id == env and r.steps.size]
        if not runs:
            continue
        span_end = max(float(r.steps[-1]) for r in runs)
        for algo in experiment.algos:
            own = [r for r in runs if r.algo == algo]
            goal = [r for r in own if r.stop_reason == STOPPED_AT_GOAL]
            carried = [r for r in goal if r.steps[-1] < span_end]
            if carried:
                at = ", ".join(f"{r.steps[-1]:g}" for r in carried)
                they = ("count at their", "they") if len(carried) > 1 else ("counts at its", "it")
                lines.append(
                    f"{algo} on {env}: {', '.join(r.run_id for r in carried)} reached stop_at "
                    f"and {they[0]} last test return after {they[1]} stopped (at step {at}; "
                    f"the last test on {env} is at step {span_end:g})."
                )
            lines += [note for r in own if (note := _early_end_note(r, span_end, score))]
    return lines


def _early_end_note(run: RunResult, span_end: float, score: ScoreMethod) -> str:
    """A warning naming ``run`` if it stopped for a reason other than ``stop_at`` before
    ``span_end`` (the last test on its env) or before its ``max_epoch``, else ``""``."""
    end = float(run.steps[-1])
    if run.stop_reason == STOPPED_AT_GOAL or (run.stop_reason == FULL_BUDGET and end >= span_end):
        return ""
    if run.stop_reason == FULL_BUDGET:
        why = "it ran its max_epoch"
    else:
        why = f"stop_reason {run.stop_reason!r}" if run.stop_reason else "no stop_reason recorded"
    where = f", before the last test on {run.env_id} at step {span_end:g}" if end < span_end else ""
    return (
        f"**Warning:** {run.run_id} ({run.algo} on {run.env_id}) ended at step {end:g} "
        f"({why}){where}; {_SHORT_RUN_SCORE[score]}."
    )


_SHORT_RUN_SCORE = {
    "final": "its score is its last test return, what it would have done later is unknown",
    "best": "its score is its best test return up to there, what it would have done later "
    "is unknown",
    "auc": "its auc covers its own tests only, so it is not comparable with longer runs'",
}
