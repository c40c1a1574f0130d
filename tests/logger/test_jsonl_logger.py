"""Tests of epochtrain.logger.jsonl: round-trip, strict JSON, crash tolerance and resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from epochtrain.logger import JSONLLogger
from epochtrain.stats import CollectStats, InfoStats, TrainingStats


def collect_stats() -> CollectStats:
    return CollectStats.from_episodes(n_steps=4, returns=[1.5, 2.5], lens=[2, 2], collect_time=0.5)


def read(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_round_trip_one_line_per_record(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "run.jsonl"
    with JSONLLogger(path) as logger:
        logger.log_train_data(collect_stats(), 4)
        logger.log_update_data(TrainingStats(train_time=0.1, n_gradient_steps=2), 2)
        logger.log_info_data(InfoStats(epoch=1), 1)
    records = read(path)
    assert [(r["scope"], r["step"]) for r in records] == [("train", 4), ("update", 2), ("info", 1)]
    assert records[0]["train/returns_stat/mean"] == 2.0
    assert records[0]["train/n_collected_steps"] == 4.0
    assert records[1]["update/n_gradient_steps"] == 2.0
    assert records[2]["info/epoch"] == 1.0


def test_non_finite_values_become_null(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with JSONLLogger(path) as logger:
        logger.log_info_data(InfoStats(), 1)  # best_test_return starts at -inf
        logger.log_update_data(TrainingStats(smoothed_loss={"loss": float("nan")}), 1)
    text = path.read_text()
    assert "Infinity" not in text and "NaN" not in text
    info, update = read(path)
    assert info["info/best_test_return"] is None
    assert update["update/smoothed/loss"] is None


def test_each_line_is_flushed_before_close(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    logger = JSONLLogger(path)
    logger.log_train_data(collect_stats(), 4)
    assert len(read(path)) == 1
    logger.close()


def test_append_mode_cuts_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"scope": "train", "step": 4}\n{"scope": "tra')
    with JSONLLogger(path) as logger:
        logger.load_state_dict({"train": 4, "test": None, "update": None, "info": None})
        logger.log_train_data(collect_stats(), 8)
    assert [r["step"] for r in read(path)] == [4, 8]


def test_write_mode_starts_afresh(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"scope": "train", "step": 4}\n')
    with JSONLLogger(path, mode="w") as logger:
        logger.log_train_data(collect_stats(), 1)
    assert [r["step"] for r in read(path)] == [1]


def test_resume_continues_file_and_drops_records_after_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with JSONLLogger(path) as first:
        first.log_train_data(collect_stats(), 4)
        first.log_info_data(InfoStats(epoch=1), 1)
        checkpoint = first.state_dict()
        # Logged after the checkpoint by the run that then crashed:
        first.log_train_data(collect_stats(), 8)
        first.log_info_data(InfoStats(epoch=2), 2)
        first.log_test_data(collect_stats(), 8)

    with JSONLLogger(path) as resumed:
        resumed.load_state_dict(checkpoint)
        for env_step in (4, 8, 12):
            resumed.log_train_data(collect_stats(), env_step)
        resumed.log_info_data(InfoStats(epoch=2), 2)
    steps = [(r["scope"], r["step"]) for r in read(path)]
    assert steps == [("train", 4), ("info", 1), ("train", 8), ("train", 12), ("info", 2)]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "x"}, "mode must be 'a' .* or 'w' .*, got 'x'"),
        ({"info_interval": 0}, "info_interval must be an int >= 1, got 0"),
    ],
)
def test_invalid_arguments_raise_value_error(
    tmp_path: Path, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        JSONLLogger(tmp_path / "run.jsonl", **kwargs)  # invalid on purpose


def test_path_must_be_a_file_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="path must be a file path"):
        JSONLLogger(tmp_path)
    with pytest.raises(ValueError, match=r"path must be a non-empty str or os\.PathLike, got 3"):
        not_a_path: Any = 3  # invalid on purpose
        JSONLLogger(not_a_path)
