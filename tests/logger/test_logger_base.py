"""Tests of epochtrain.logger.base: tag flattening, intervals, state, Lazy/Multi loggers."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from epochtrain.logger import (
    BaseLogger,
    JSONLLogger,
    LazyLogger,
    MultiLogger,
    Scope,
    collect_stats_to_tags,
    flatten_dataclass,
    info_stats_to_tags,
    training_stats_to_tags,
)
from epochtrain.stats import CollectStats, InfoStats, SequenceSummaryStats, TrainingStats


@dataclass
class FakePPOStats(TrainingStats):
    """A TrainingStats subclass as an algorithm would define it."""

    loss: SequenceSummaryStats = field(default_factory=lambda: SequenceSummaryStats.single(1.0))
    loss_clip: SequenceSummaryStats = field(
        default_factory=lambda: SequenceSummaryStats.from_sequence([0.1, 0.3])
    )
    approx_kl: SequenceSummaryStats = field(
        default_factory=lambda: SequenceSummaryStats.single(0.01)
    )
    entropy_coef: float = 0.5
    unused_stat: SequenceSummaryStats | None = None


class RecordingLogger(BaseLogger):
    """Keeps every written record in memory."""

    def __init__(self, **intervals: int) -> None:
        super().__init__(**intervals)
        self.records: list[tuple[Scope, int, dict[str, float]]] = []
        self.closed = False

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        self.records.append((scope, step, dict(data)))

    def steps(self, scope: Scope) -> list[int]:
        return [step for s, step, _ in self.records if s == scope]

    def close(self) -> None:
        self.closed = True


def collect_stats() -> CollectStats:
    return CollectStats.from_episodes(n_steps=8, returns=[1.0, 3.0], lens=[3, 5], collect_time=2.0)


def test_collect_tags_flatten_summaries_and_skip_arrays() -> None:
    tags = collect_stats_to_tags(collect_stats(), "train")
    assert tags == {
        "train/n_collected_steps": 8.0,
        "train/n_collected_episodes": 2.0,
        "train/returns_stat/mean": 2.0,
        "train/returns_stat/std": 1.0,
        "train/returns_stat/min": 1.0,
        "train/returns_stat/max": 3.0,
        "train/lens_stat/mean": 4.0,
        "train/lens_stat/std": 1.0,
        "train/lens_stat/min": 3.0,
        "train/lens_stat/max": 5.0,
        "train/collect_time": 2.0,
        "train/collect_speed": 4.0,
    }
    assert all(isinstance(v, float) for v in tags.values())


def test_collect_tags_skip_none_summaries_when_no_episode_finished() -> None:
    stats = CollectStats.from_episodes(n_steps=4, returns=[], lens=[], collect_time=1.0)
    tags = collect_stats_to_tags(stats, "test")
    assert set(tags) == {
        "test/n_collected_steps",
        "test/n_collected_episodes",
        "test/collect_time",
        "test/collect_speed",
    }


def test_training_tags_use_loss_stats_smoothed_and_scalars() -> None:
    stats = FakePPOStats(
        train_time=0.25,
        n_gradient_steps=4,
        smoothed_loss={"loss": 0.9, "loss/clip": 0.2, "approx_kl": 0.02},
    )
    tags = training_stats_to_tags(stats)
    assert tags == pytest.approx(
        {
            "update/loss": 1.0,
            "update/loss/clip": 0.2,
            "update/approx_kl": 0.01,
            "update/smoothed/loss": 0.9,
            "update/smoothed/loss/clip": 0.2,
            "update/smoothed/approx_kl": 0.02,
            "update/train_time": 0.25,
            "update/n_gradient_steps": 4.0,
            "update/entropy_coef": 0.5,
        }
    )


def test_a_summary_not_measured_gets_no_tag() -> None:
    stats = FakePPOStats(train_time=0.25, loss_clip=SequenceSummaryStats.not_measured())
    tags = training_stats_to_tags(stats)
    assert "update/loss/clip" not in tags and tags["update/loss"] == pytest.approx(1.0)


def test_info_tags_cover_every_numeric_field() -> None:
    info = InfoStats(epoch=3, env_step=300, gradient_step=30, best_test_return=7.5)
    tags = info_stats_to_tags(info)
    assert tags["info/epoch"] == 3.0
    assert tags["info/env_step"] == 300.0
    assert tags["info/best_test_return"] == 7.5
    assert set(tags) == {f"info/{name}" for name in vars(info)}


def test_flatten_dataclass_nests_and_skips_non_numbers() -> None:
    @dataclass
    class Inner:
        x: int = 1
        flag: bool = True
        name: str = "a"

    @dataclass
    class Outer:
        inner: Inner = field(default_factory=Inner)
        d: dict[str, float] = field(default_factory=lambda: {"k": 2.0})
        missing: float | None = None

    assert flatten_dataclass(Outer(), "p") == {"p/inner/x": 1.0, "p/d/k": 2.0}
    with pytest.raises(TypeError, match="dataclass instance"):
        flatten_dataclass(Outer, "p")


def test_first_call_always_logs_then_waits_for_interval_in_env_steps() -> None:
    logger = RecordingLogger(train_interval=100, test_interval=50)
    stats = collect_stats()
    for env_step in (8, 16, 100, 107, 108, 300):
        logger.log_train_data(stats, env_step)
        logger.log_test_data(stats, env_step)
    assert logger.steps("train") == [8, 108, 300]
    assert logger.steps("test") == [8, 100, 300]


def test_update_interval_counts_gradient_steps_and_info_counts_epochs() -> None:
    logger = RecordingLogger(update_interval=10, info_interval=2)
    for gradient_step in range(4, 41, 4):
        logger.log_update_data(FakePPOStats(), gradient_step)
    for epoch in range(1, 6):
        logger.log_info_data(InfoStats(epoch=epoch), epoch)
    assert logger.steps("update") == [4, 16, 28, 40]
    assert logger.steps("info") == [1, 3, 5]


def test_default_intervals_log_every_call() -> None:
    logger = RecordingLogger()
    for step in (1, 2, 3):
        logger.log_update_data(FakePPOStats(), step)
    assert logger.steps("update") == [1, 2, 3]


def test_state_dict_resume_skips_already_logged_steps() -> None:
    first = RecordingLogger(train_interval=10)
    for env_step in (10, 20, 30):
        first.log_train_data(collect_stats(), env_step)
    first.log_info_data(InfoStats(), 1)
    state = first.state_dict()
    position = {"train": 30, "test": None, "update": None, "info": 1}
    assert state == {
        **position,
        "written": position,
        "kind": "RecordingLogger",
        "destination": None,
    }

    resumed = RecordingLogger(train_interval=10)
    resumed.load_state_dict(state)
    for env_step in (30, 35, 40):
        resumed.log_train_data(collect_stats(), env_step)
    resumed.log_info_data(InfoStats(), 1)
    resumed.log_info_data(InfoStats(), 2)
    resumed.log_test_data(collect_stats(), 40)
    assert resumed.steps("train") == [40]
    assert resumed.steps("info") == [2]
    assert resumed.steps("test") == [40]


def test_log_data_ignores_intervals_and_moves_the_position_only() -> None:
    logger = RecordingLogger(train_interval=100)
    logger.log_train_data(collect_stats(), 10)
    logger.log_data("train", 20, {"train/utd_ratio": 0.5})
    assert logger.steps("train") == [10, 20]
    assert logger.last_logged_step("train") == 10  # the interval grid is unchanged
    assert logger.written_step("train") == 20
    logger.log_train_data(collect_stats(), 60)  # not due: 60 - 10 < 100
    assert logger.steps("train") == [10, 20]


def test_state_without_written_takes_last_logged_as_position() -> None:
    logger = RecordingLogger()
    logger.load_state_dict({"train": 5, "test": None, "update": 3, "info": 1})
    assert logger.written_step("train") == 5 and logger.written_step("update") == 3


@pytest.mark.parametrize(
    ("state", "match"),
    [
        ({"train": 1, "test": None, "update": None}, "missing the key 'info'"),
        (
            {"train": 1, "test": None, "update": None, "info": None, "written": 3},
            "'written'] must be a mapping",
        ),
        ({"train": "1", "test": None, "update": None, "info": None}, r"state\['train'\]"),
        ({"train": True, "test": None, "update": None, "info": None}, r"state\['train'\]"),
    ],
)
def test_load_state_dict_rejects_malformed_state(state: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RecordingLogger().load_state_dict(state)


@pytest.mark.parametrize(
    "name", ["train_interval", "test_interval", "update_interval", "info_interval"]
)
@pytest.mark.parametrize("value", [0, -5, 1.5, True, "10"])
def test_invalid_interval_names_parameter_value_and_rule(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"{name} must be an int >= 1, got {value!r}"):
        RecordingLogger(**{name: value})  # invalid on purpose


def test_lazy_logger_records_nothing_and_is_a_context_manager() -> None:
    with LazyLogger() as logger:
        logger.log_train_data(collect_stats(), 1)
        logger.log_update_data(FakePPOStats(), 1)
        logger.log_info_data(InfoStats(), 1)
        logger.log_test_data(collect_stats(), 1)
    nothing = {"train": None, "test": None, "update": None, "info": None}
    assert logger.state_dict() == {
        **nothing,
        "written": nothing,
        "kind": "LazyLogger",
        "destination": None,
    }


def test_multi_logger_fans_out_with_each_loggers_own_intervals() -> None:
    every, sparse = RecordingLogger(), RecordingLogger(update_interval=2)
    with MultiLogger(every, sparse) as multi:
        for step in (1, 2, 3):
            multi.log_update_data(FakePPOStats(), step)
        multi.log_train_data(collect_stats(), 5)
        multi.log_test_data(collect_stats(), 5)
        multi.log_info_data(InfoStats(), 1)
    assert every.steps("update") == [1, 2, 3]
    assert sparse.steps("update") == [1, 3]
    for logger in (every, sparse):
        assert logger.steps("train") == logger.steps("test") == [5]
        assert logger.steps("info") == [1]
        assert logger.closed

    state = multi.state_dict()
    fresh = [RecordingLogger(), RecordingLogger(update_interval=2)]
    restored = MultiLogger(*fresh)
    restored.load_state_dict(state)
    assert [logger.state_dict() for logger in fresh] == [every.state_dict(), sparse.state_dict()]
    added = [RecordingLogger(), RecordingLogger()]  # the second one added on resume
    with pytest.warns(UserWarning, match="RecordingLogger is not among the checkpoint's"):
        MultiLogger(*added).load_state_dict({"loggers": [every.state_dict()]})
    assert added[0].state_dict() == every.state_dict()
    assert added[1].written_step("update") is None


def test_multi_logger_rejects_non_loggers() -> None:
    with pytest.raises(TypeError, match=r"loggers\[1\] must be a BaseLogger"):
        not_a_logger: Any = "tb"  # invalid on purpose
        MultiLogger(LazyLogger(), not_a_logger)


def test_nan_values_pass_through_flattening() -> None:
    stats = FakePPOStats(smoothed_loss={"loss": float("nan")})
    assert math.isnan(training_stats_to_tags(stats)["update/smoothed/loss"])


def test_multilogger_restores_every_logger_even_when_one_refuses(tmp_path: Path) -> None:
    """A sub-logger that cannot take its state does not leave the later ones unrestored."""

    class Refusing(LazyLogger):
        def load_state_dict(self, state: Mapping[str, object]) -> None:
            raise ValueError("not this one")

    saved = MultiLogger(Refusing(), JSONLLogger(tmp_path / "log.jsonl"))
    saved.loggers[1].log_data("train", 10, {"train/x": 1.0})
    state = saved.state_dict()
    saved.loggers[1].log_data("train", 20, {"train/x": 2.0})  # past the checkpoint
    later = JSONLLogger(tmp_path / "log.jsonl")
    with pytest.raises(ValueError, match="not this one"):
        MultiLogger(Refusing(), later).load_state_dict(state)
    assert later.written_step("train") == 10
    assert [json.loads(line)["step"] for line in later.path.read_text().splitlines()] == [10]
