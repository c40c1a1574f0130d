"""Tests of epochtrain.experiment.report: notes on intervals and curves, checks before the
bootstrap, and the files a report writes into its directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochtrain.experiment import report
from epochtrain.experiment.report import build_report
from epochtrain.experiment.results import Experiment, RunResult

RANDOM = {"CartPole-v1": 20.0}


def run(
    seed: int, returns: list[float], stop_reason: str = "max_epoch", algo: str = "ppo"
) -> RunResult:
    steps = 512.0 * np.arange(1, len(returns) + 1)
    return RunResult(
        run_id=f"{algo}-CartPole-v1-s{seed}",
        algo=algo,
        env_id="CartPole-v1",
        seed=seed,
        status="finished",
        steps=steps,
        test_returns=np.asarray(returns, dtype=np.float64),
        stop_reason=stop_reason,
    )


def no_bootstrap(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the bootstrap started before the input was checked")


def drawn_curves(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The curves the report hands to plot_sample_efficiency, recorded as it draws them."""
    from epochtrain.experiment import plots

    seen: list[Any] = []
    draw = plots.plot_sample_efficiency

    def record(curves: Any, **kwargs: Any) -> Any:
        seen.append(curves)
        return draw(curves, **kwargs)

    monkeypatch.setattr(plots, "plot_sample_efficiency", record)
    return seen


def test_a_run_that_reached_stop_at_counts_at_its_last_return_over_the_later_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib", reason="the figures need the optional extra epochtrain[plot]")
    seen = drawn_curves(monkeypatch)
    experiment = Experiment(
        (
            run(0, [183.5], stop_reason="stop_fn"),
            run(1, [64.0, 50.5, 164.5], stop_reason="stop_fn"),
            run(2, [101.5, 76.0, 59.0, 68.5]),
            run(3, [37.0, 59.0, 124.0, 109.5]),
        )
    )
    text = build_report(experiment, reps=100, seed=0, random_scores=RANDOM, out_dir=tmp_path)
    curve = seen[0]["CartPole-v1"]["ppo"]
    assert curve.env_steps.tolist() == [512.0, 1024.0, 1536.0, 2048.0]  # not cut at 512
    assert curve.n_runs == 4
    # at 2048 the solved runs hold 183.5 and 164.5: the IQM of the middle two runs
    assert curve.estimate[-1] == pytest.approx((109.5 + 164.5) / 2)
    assert "ppo-CartPole-v1-s0, ppo-CartPole-v1-s1 reached stop_at and count at their" in text
    assert "Warning" not in text


def test_a_run_cut_short_without_reaching_stop_at_is_a_warning_in_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib", reason="the figures need the optional extra epochtrain[plot]")
    seen = drawn_curves(monkeypatch)
    experiment = Experiment((run(0, [50.0], stop_reason="nonfinite"), run(1, [30.0, 60.0, 90.0])))
    text = build_report(experiment, reps=100, seed=0, random_scores=RANDOM, out_dir=tmp_path)
    assert seen[0]["CartPole-v1"]["ppo"].env_steps.tolist() == [512.0]
    assert (
        "**Warning:** ppo on CartPole-v1: the curve ends at 512 env steps (1 test), where "
        "ppo-CartPole-v1-s0 ended without reaching stop_at; its other runs go on to 1536."
    ) in text


def test_one_run_per_algorithm_has_no_interval_and_the_report_says_so() -> None:
    experiment = Experiment(
        (run(0, [35.0]), run(0, [20.0, 40.0], algo="a2c"), run(1, [30.0], algo="a2c"))
    )
    text = build_report(experiment, reps=100, seed=0, random_scores=RANDOM)
    assert "| CartPole-v1 | ppo | 35.0 [CI n/a: 1 run] |" in text
    assert "[35.0, 35.0]" not in text
    assert "**Warning:** no confidence interval for ppo (1 run)" in text
    assert "| ppo vs a2c | " in text and "[CI n/a: 1 run] |" in text.split("ppo vs a2c")[1]
    a2c_row = next(line for line in text.splitlines() if line.startswith("| CartPole-v1 | a2c"))
    assert "n/a" not in a2c_row  # two runs: an interval


@pytest.mark.parametrize("reps", [0, 1, 99])
def test_too_few_replicates_are_refused_before_the_bootstrap(
    reps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report, "summarize_tasks", no_bootstrap)
    experiment = Experiment((run(0, [35.0]), run(1, [30.0])))
    with pytest.raises(ValueError, match=rf"^reps must be an int of at least 100 .* got {reps}:"):
        build_report(experiment, reps=reps, seed=0)


def test_an_out_dir_that_is_a_file_or_under_one_is_refused_before_the_bootstrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report, "summarize_tasks", no_bootstrap)
    experiment = Experiment((run(0, [35.0]), run(1, [30.0])))
    afile = tmp_path / "afile"
    afile.write_text("mine")
    with pytest.raises(ValueError, match=r"out_dir '.*afile' is a file: choose a directory"):
        build_report(experiment, reps=100, seed=0, out_dir=afile)
    with pytest.raises(ValueError, match=r"afile/report' is under '.*afile', a file: choose"):
        build_report(experiment, reps=100, seed=0, out_dir=afile / "report")
    assert afile.read_text() == "mine"


def test_a_new_report_removes_an_earlier_reports_figures_and_leaves_other_files(
    tmp_path: Path,
) -> None:
    pytest.importorskip("matplotlib", reason="the figures need the optional extra epochtrain[plot]")
    two = Experiment(
        (run(0, [35.0]), run(1, [30.0]), run(0, [20.0], algo="a2c"), run(1, [25.0], algo="a2c"))
    )
    build_report(two, reps=100, seed=0, random_scores=RANDOM, out_dir=tmp_path)
    assert (tmp_path / "probability_of_improvement.png").is_file()
    (tmp_path / "notes.txt").write_text("mine")
    one = Experiment((run(0, [35.0]), run(1, [30.0])))
    build_report(one, reps=100, seed=0, random_scores=RANDOM, out_dir=tmp_path)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert "probability_of_improvement.png" not in left
    assert "notes.txt" in left and "report.md" in left and "sample_efficiency.png" in left
    for name in left:
        if name.endswith(".png"):
            assert f"]({name})" in (tmp_path / "report.md").read_text()
