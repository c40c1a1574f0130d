"""Tests of epochtrain.logger.tensorboard: scalars land in event files at the right steps."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from epochtrain.logger import TensorboardLogger
from epochtrain.stats import CollectStats, InfoStats, SequenceSummaryStats, TrainingStats


@dataclass
class FakeDQNStats(TrainingStats):
    """A TrainingStats subclass with one loss field."""

    loss: SequenceSummaryStats = field(
        default_factory=lambda: SequenceSummaryStats.from_sequence([0.5, 1.5])
    )


def read_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {
        tag: [(event.step, event.value) for event in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
    }


def test_event_file_holds_every_scope_at_its_step(tmp_path: Path) -> None:
    train = CollectStats.from_episodes(
        n_steps=10, returns=[2.0, 4.0], lens=[5, 5], collect_time=1.0
    )
    test = CollectStats.from_episodes(n_steps=6, returns=[6.0], lens=[6], collect_time=0.5)
    with TensorboardLogger(tmp_path, update_interval=2) as logger:
        logger.log_train_data(train, env_step=10)
        logger.log_test_data(test, env_step=10)
        for gradient_step in (1, 2, 3):
            logger.log_update_data(FakeDQNStats(smoothed_loss={"loss": 0.75}), gradient_step)
        logger.log_info_data(InfoStats(epoch=1, env_step=10, best_test_return=6.0), epoch=1)

    scalars = read_scalars(tmp_path)
    assert scalars["train/returns_stat/mean"] == [(10, 3.0)]
    assert scalars["train/n_collected_episodes"] == [(10, 2.0)]
    assert scalars["test/returns_stat/mean"] == [(10, 6.0)]
    assert scalars["update/loss"] == [(1, 1.0), (3, 1.0)]
    assert scalars["update/smoothed/loss"] == [(1, 0.75), (3, 0.75)]
    assert scalars["info/best_test_return"] == [(1, 6.0)]
    assert scalars["info/env_step"] == [(1, 10.0)]
    assert "train/returns" not in scalars


def test_resumed_logger_adds_no_duplicate_steps(tmp_path: Path) -> None:
    stats = CollectStats.from_episodes(n_steps=5, returns=[1.0], lens=[5], collect_time=1.0)
    with TensorboardLogger(tmp_path) as first:
        first.log_train_data(stats, 5)
        first.log_train_data(stats, 10)
        state = first.state_dict()
    with TensorboardLogger(tmp_path) as resumed:
        resumed.load_state_dict(state)
        resumed.log_train_data(stats, 10)
        resumed.log_train_data(stats, 15)
    steps = [step for step, _ in read_scalars(tmp_path)["train/returns_stat/mean"]]
    assert sorted(steps) == [5, 10, 15]


def test_close_is_idempotent(tmp_path: Path) -> None:
    logger = TensorboardLogger(tmp_path)
    logger.close()
    logger.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"flush_secs": 0}, "flush_secs must be an int >= 1, got 0"),
        ({"max_queue": 0}, "max_queue must be an int >= 1, got 0"),
        ({"train_interval": 0}, "train_interval must be an int >= 1, got 0"),
    ],
)
def test_invalid_arguments_raise_value_error(
    tmp_path: Path, kwargs: dict[str, int], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        TensorboardLogger(tmp_path, **kwargs)


def test_logdir_must_not_be_a_file(tmp_path: Path) -> None:
    path = tmp_path / "file.txt"
    path.write_text("x")
    with pytest.raises(ValueError, match="logdir must be a directory"):
        TensorboardLogger(path)
    with pytest.raises(ValueError, match="logdir must be a non-empty str"):
        TensorboardLogger("")
