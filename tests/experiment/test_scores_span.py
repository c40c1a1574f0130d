"""Scores over a common span: a run that reached its goal (stop_at) is scored, and drawn, as
if held at its last test return up to the last test of the longest run on its env."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from epochtrain.experiment import carry_forward, run_score
from epochtrain.experiment.report import build_report
from epochtrain.experiment.results import Experiment, RunResult
from tests.experiment.test_report import drawn_curves

ENV = "CartPole-v1"


def run(
    algo: str, seed: int, steps: list[float], returns: list[float], stop_reason: str
) -> RunResult:
    return RunResult(
        run_id=f"{algo}-{ENV}-s{seed}",
        algo=algo,
        env_id=ENV,
        seed=seed,
        status="finished",
        steps=np.asarray(steps, dtype=np.float64),
        test_returns=np.asarray(returns, dtype=np.float64),
        stop_reason=stop_reason,
    )


SOLVED = [1000.0, 2000.0, 3000.0, 4000.0], [20.0, 180.0, 340.0, 500.0]
LEVELLED = [1000.0 * i for i in range(1, 11)], [20.0, 150.0, 280.0] + [400.0] * 7


def solved_vs_levelled(seeds: int = 3) -> Experiment:
    """PPO solves the env at 4,000 env steps (500); DQN levels at 400 over 10,000."""
    return Experiment(
        tuple(run("ppo", s, *SOLVED, "stop_fn") for s in range(seeds))
        + tuple(run("dqn", s, *LEVELLED, "max_epoch") for s in range(seeds))
    )


def test_a_run_that_reached_its_goal_scores_its_auc_held_at_its_last_return_to_the_span() -> None:
    scores, _ = solved_vs_levelled().scores("auc")
    # 3 trapezoids (780,000) then 500 held over 6,000 env steps, over 9,000 env steps
    assert scores["ppo"][:, 0] == pytest.approx([(780_000 + 6_000 * 500) / 9_000] * 3)
    assert scores["dqn"][:, 0] == pytest.approx([run_score(*LEVELLED, "auc")] * 3)
    assert scores["ppo"].min() > scores["dqn"].max()


def test_final_and_best_are_those_of_the_runs_own_curves() -> None:
    experiment = solved_vs_levelled()
    for method in ("final", "best"):
        scores, _ = experiment.scores(method)
        for run_result in experiment.runs:
            row = run_result.seed
            assert scores[run_result.algo][row, 0] == run_result.score(method)


def test_a_run_cut_short_without_reaching_its_goal_is_not_extended_and_auc_warns() -> None:
    short = run("dqn", 1, *(x[:4] for x in LEVELLED), "nonfinite")
    experiment = Experiment(
        (run("dqn", 0, *LEVELLED, "max_epoch"), short, run("ppo", 0, *SOLVED, "stop_fn"))
    )
    with pytest.warns(UserWarning, match=r"dqn-CartPole-v1-s1 ended before 10000 steps"):
        scores, _ = experiment.scores("auc")
    assert scores["dqn"][1, 0] == pytest.approx(short.score("auc"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # final does not depend on the span: no warning
        experiment.scores("final")


def test_the_report_ranks_the_run_that_reached_its_goal_above_the_one_that_levelled() -> None:
    text = build_report(
        solved_vs_levelled(), score="auc", reps=100, seed=0, random_scores={ENV: 22.0}
    )
    assert "| ppo vs dqn | 1.00 [1.00, 1.00] |" in text
    assert "held at its last test return up to the last test of the longest run" in text


def test_carry_forward_holds_only_the_goal_runs_at_the_later_tests() -> None:
    curves = carry_forward([SOLVED, LEVELLED], [True, False])
    assert curves[0][0].tolist() == LEVELLED[0]
    assert curves[0][1].tolist() == SOLVED[1] + [500.0] * 6
    assert curves[1][1].tolist() == LEVELLED[1]
    ((held, _),) = carry_forward([SOLVED], [True], tested=[500.0, 4000.0, 4500.0])
    assert held.tolist() == [*SOLVED[0], 4500.0]
    with pytest.raises(ValueError, match="same length"):
        carry_forward([SOLVED], [True, False])


def test_the_drawn_curve_of_an_algorithm_whose_runs_all_solved_spans_the_other_algorithms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib", reason="the figures need the optional extra epochtrain[plot]")
    seen = drawn_curves(monkeypatch)
    text = build_report(
        solved_vs_levelled(),
        score="auc",
        reps=100,
        seed=0,
        random_scores={ENV: 22.0},
        out_dir=tmp_path,
    )
    ppo = seen[0][ENV]["ppo"]
    assert ppo.env_steps.tolist() == LEVELLED[0]
    assert ppo.estimate[-1] == 500.0
    assert "ppo-CartPole-v1-s0, ppo-CartPole-v1-s1, ppo-CartPole-v1-s2 reached stop_at" in text
