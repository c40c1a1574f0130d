"""Tests of what a comparison report says about its inputs: runs that did not end at
max_epoch named for every score, normalisation values refused before the bootstrap, the
bootstrap seed, and a report directory that cannot be written (a full disk)."""

from __future__ import annotations

import errno
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pytest

from epochtrain.data import writes
from epochtrain.experiment import normalization, report
from epochtrain.experiment.report import build_report
from epochtrain.experiment.results import Experiment, RunResult

RANDOM = {"CartPole-v1": 20.0}


def run(seed: int, returns: list[float], stop_reason: str | None = "max_epoch") -> RunResult:
    return RunResult(
        run_id=f"ppo-CartPole-v1-s{seed}",
        algo="ppo",
        env_id="CartPole-v1",
        seed=seed,
        status="finished",
        steps=512.0 * np.arange(1, len(returns) + 1, dtype=np.float64),
        test_returns=np.asarray(returns, dtype=np.float64),
        stop_reason=stop_reason,
    )


def no_bootstrap(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the bootstrap started before the input was checked")


MIXED_ENDS = Experiment(
    (
        run(0, [480.0], stop_reason="stop_fn"),
        run(1, [30.0, 60.0, 90.0]),
        run(2, [50.0], stop_reason="nonfinite"),
        run(3, [40.0, 70.0], stop_reason="hook asked to stop"),
    )
)


@pytest.mark.parametrize("score", ["final", "best", "auc"])
def test_runs_that_did_not_end_at_max_epoch_are_named_in_the_printed_tables_for_every_score(
    score: Any,
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the report names them: no stray warning on stderr
        text = build_report(MIXED_ENDS, score=score, reps=100, seed=0, random_scores=RANDOM)
    notes = text.split("## Per env")[0]
    assert (
        "ppo on CartPole-v1: ppo-CartPole-v1-s0 reached stop_at and counts at its last test "
        "return after it stopped (at step 512; the last test on CartPole-v1 is at step 1536)."
    ) in notes
    assert (
        "**Warning:** ppo-CartPole-v1-s2 (ppo on CartPole-v1) ended at step 512 (stop_reason "
        "'nonfinite'), before the last test on CartPole-v1 at step 1536;"
    ) in notes
    assert "ppo-CartPole-v1-s3 (ppo on CartPole-v1) ended at step 1024 (stop_reason 'hook " in notes
    assert "ppo-CartPole-v1-s1" not in notes  # ran its max_epoch to the end
    assert ("auc covers its own tests only" in notes) == (score == "auc")


def test_report_md_names_the_same_runs_as_the_printed_tables(tmp_path: Path) -> None:
    text = build_report(
        MIXED_ENDS, score="auc", reps=100, seed=0, random_scores=RANDOM, out_dir=tmp_path
    )
    written = (tmp_path / "report.md").read_text()
    assert written.startswith(text.split("## Per env")[0])
    assert "stop_reason 'nonfinite'" in written and "stop_reason 'hook asked to stop'" in written
    assert written.count("reached stop_at and count") == 1  # once, not again under Figures


def test_a_measured_random_score_of_nan_is_blamed_on_the_env_not_the_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(normalization, "random_score", lambda *args, **kwargs: float("nan"))
    with pytest.raises(
        ValueError,
        match=r"env 'CartPole-v1': its random score \(measured over 100 episodes of random "
        r"actions\) is nan, .*pass random_scores=\{'CartPole-v1'",
    ):
        normalization.normalize_scores({"ppo": np.ones((2, 1))}, ["CartPole-v1"])


@pytest.mark.parametrize(
    ("reference", "random", "match"),
    [
        ({"CartPole-v1": 5.0}, {"CartPole-v1": 10.0}, r"reference score 5 \(--reference\) is not "),
        ({"CartPole-v1": 10.0}, {"CartPole-v1": 10.0}, r"10 \(--reference\) is equal to its rand"),
        ({"Pendulm-v1": -150.0}, {}, r"--reference names tasks \['Pendulm-v1'\] that are not"),
        ({}, {"CartPole-v1": float("inf")}, r"--random\['CartPole-v1'\] must be a finite number"),
    ],
)
def test_check_reference_scores_refuses_given_values_naming_the_option(
    reference: dict[str, float], random: dict[str, float], match: str
) -> None:
    from epochtrain.experiment.normalization import check_reference_scores

    with pytest.raises(ValueError, match=match):
        check_reference_scores(
            reference,
            random,
            tasks=["CartPole-v1"],
            reference_name="--reference",
            random_name="--random",
        )


def test_a_reference_below_the_random_score_is_refused_before_the_bootstrap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(report, "summarize_tasks", no_bootstrap)
    monkeypatch.setattr(normalization, "random_score", lambda *args, **kwargs: 22.0)
    experiment = Experiment((run(0, [35.0]), run(1, [30.0])))
    with pytest.raises(ValueError, match=r"reference score 10 \(reference_scores\) is not above "):
        build_report(experiment, reps=100, seed=0, reference_scores={"CartPole-v1": 10.0})
    with pytest.raises(ValueError, match=r"reference score 10 .* equal to its random score 10"):
        build_report(
            experiment,
            reps=100,
            seed=0,
            reference_scores={"CartPole-v1": 10.0},
            random_scores={"CartPole-v1": 10.0},
        )


def test_an_env_given_no_values_is_still_skipped_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(normalization, "random_score", lambda *args, **kwargs: float("nan"))
    text = build_report(Experiment((run(0, [35.0]), run(1, [30.0]))), reps=100, seed=0)
    assert "Skipped, the scores cannot be normalised: env 'CartPole-v1': its random score" in text


def test_a_negative_seed_is_refused_naming_the_seed_before_the_bootstrap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(report, "summarize_tasks", no_bootstrap)
    experiment = Experiment((run(0, [35.0]), run(1, [30.0])))
    with pytest.raises(ValueError, match=r"^seed must be an int >= 0 .*got -1$"):
        build_report(experiment, reps=100, seed=-1, random_scores=RANDOM)


def test_a_full_disk_names_the_file_and_leaves_the_earlier_report_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib", reason="the figures need the optional extra epochtrain[plot]")
    experiment = Experiment((run(0, [35.0, 40.0]), run(1, [30.0, 45.0])))
    build_report(experiment, reps=100, seed=0, random_scores=RANDOM, out_dir=tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert "report.md" in before and "sample_efficiency.png" in before
    write = writes._write_synced

    def full_at_report(path: Path, mode: Any, fill: Callable[[BinaryIO], object]) -> None:
        if "report.md" in path.name:
            raise OSError(errno.ENOSPC, "No space left on device")
        write(path, mode, fill)

    monkeypatch.setattr(writes, "_write_synced", full_at_report)
    changed = Experiment((run(0, [135.0, 140.0]), run(1, [130.0, 145.0])))
    with pytest.raises(
        ValueError,
        match=r"cannot write report file '.*report\.md': No space left on device; free space",
    ):
        build_report(changed, reps=100, seed=0, random_scores=RANDOM, out_dir=tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
