"""Tests of epochtrain.logger.csv: long-format round-trip, header handling and resume."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest

from epochtrain.logger import CSV_HEADER, CSVLogger
from epochtrain.stats import CollectStats, InfoStats, TrainingStats


def collect_stats() -> CollectStats:
    return CollectStats.from_episodes(n_steps=3, returns=[0.1, 0.2], lens=[1, 2], collect_time=0.3)


def read(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


def test_round_trip_rows_read_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    stats = collect_stats()
    with CSVLogger(path) as logger:
        logger.log_test_data(stats, 3)
        logger.log_info_data(InfoStats(epoch=1), 1)
    header, *rows = read(path)
    assert tuple(header) == CSV_HEADER
    values = {(scope, int(step), tag): float(value) for scope, step, tag, value in rows}
    assert stats.returns_stat is not None
    assert values[("test", 3, "test/returns_stat/mean")] == stats.returns_stat.mean
    assert values[("test", 3, "test/collect_speed")] == stats.collect_speed
    assert values[("info", 1, "info/epoch")] == 1.0
    assert values[("info", 1, "info/best_test_return")] == -math.inf


def test_a_resumed_logger_writes_the_header_once_and_keeps_old_rows(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    with CSVLogger(path) as logger:
        logger.log_update_data(TrainingStats(n_gradient_steps=1), 1)
        state = logger.state_dict()
    with CSVLogger(path) as logger:
        logger.load_state_dict(state)
        logger.log_update_data(TrainingStats(n_gradient_steps=1), 2)
    rows = read(path)
    assert sum(row == list(CSV_HEADER) for row in rows) == 1
    assert sorted({int(row[1]) for row in rows[1:]}) == [1, 2]


def test_append_refuses_a_file_with_another_header(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="header"):
        CSVLogger(path)
    with CSVLogger(path, mode="w") as logger:
        logger.log_info_data(InfoStats(), 1)
    assert read(path)[0] == list(CSV_HEADER)


def test_resume_drops_rows_after_checkpoint_and_continues(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    with CSVLogger(path, update_interval=2) as first:
        first.log_update_data(TrainingStats(), 2)
        checkpoint = first.state_dict()
        first.log_update_data(TrainingStats(), 4)  # after the checkpoint, then a crash
    with path.open("a") as f:
        f.write("update,6,update/train_ti")  # torn row

    with CSVLogger(path, update_interval=2) as resumed:
        resumed.load_state_dict(checkpoint)
        for gradient_step in (2, 3, 4, 6):
            resumed.log_update_data(TrainingStats(), gradient_step)
    _header, *rows = read(path)
    steps = sorted({int(row[1]) for row in rows})
    assert steps == [2, 4, 6]
    per_step = [sum(int(row[1]) == s for row in rows) for s in steps]
    assert len(set(per_step)) == 1, "each step holds one set of tags, none duplicated"


def test_invalid_arguments_raise_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode must be 'a'"):
        mode: Any = "r"  # invalid on purpose
        CSVLogger(tmp_path / "run.csv", mode=mode)
    with pytest.raises(ValueError, match="test_interval must be an int >= 1, got -1"):
        CSVLogger(tmp_path / "run.csv", test_interval=-1)
    with pytest.raises(ValueError, match="path must be a file path"):
        CSVLogger(tmp_path)
