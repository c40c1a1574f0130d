"""Tests of epochtrain.experiment.progress: the overall bar counts the epochs left."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochtrain.experiment import grid
from epochtrain.experiment.prepare import prepare_runs
from epochtrain.experiment.progress import Progress
from tests.experiment.settings import FAST


def test_a_restarted_run_counts_the_epochs_after_its_checkpoint_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], terminal: None
) -> None:
    run_dirs = prepare_runs(
        grid(["ppo"], ["CartPole-v1"], [0, 1], **{**FAST, "max_epoch": 10}), tmp_path
    )
    a, b = run_dirs
    with Progress(run_dirs, run_dirs, enabled=True) as progress:
        overall = progress._overall
        assert overall is not None and overall.total == 20
        progress.start(a, 0)
        progress.start(b, 0)
        progress.epoch(a, 4)  # a's worker dies after epoch 4; its checkpoint is epoch 3's
        progress.restart(a, "a worker process of the sweep died")
        assert a not in progress._bars and progress._slots.count(None) == 1
        progress.start(a, 3)
        assert progress._bars[a].n == 3 and progress._slots.count(None) == 0  # slot reused
        assert (overall.n, overall.total) == (4, 21)  # epoch 4 is run again
        progress.epoch(a, 10)
        progress.epoch(b, 10)
        assert overall.n == overall.total == 21
    assert "a worker process of the sweep died; starting it again" in capsys.readouterr().out


def test_without_a_terminal_there_are_no_bars_and_a_line_per_run_that_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dirs = prepare_runs(grid(["ppo"], ["CartPole-v1"], [0, 1], **FAST), tmp_path)
    a, b = run_dirs
    with Progress(run_dirs, run_dirs, enabled=True) as progress:
        progress.start(a, 0)
        progress.epoch(a, 1)
        assert progress._overall is None and not progress._bars
        progress.restart(a, "its worker died")
        progress.end(a, failed=True)
        progress.end(b, failed=True)
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.splitlines() == [
        f"{a.name}: its worker died; starting it again from its latest checkpoint",
        f"[1/2] {a.name}: failed",
        f"[2/2] {b.name}: failed",
    ]
