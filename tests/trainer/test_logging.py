"""What the trainer hands to its logger, in which units, and when."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from epochtrain.logger import BaseLogger, Scope, TensorboardLogger
from tests.trainer.tiny import build


class RecordingLogger(BaseLogger):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[str, int, dict[str, float]]] = []

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        self.records.append((scope, step, dict(data)))

    def of(self, scope: str) -> list[tuple[int, dict[str, float]]]:
        return [(step, data) for s, step, data in self.records if s == scope]


def test_trainer_logs_every_scope_in_its_units() -> None:
    logger = RecordingLogger()
    trainer = build("off", max_epoch=2, step_per_epoch=40, step_per_collect=10, logger=logger)
    trainer.run()
    train_steps = [step for step, _ in logger.of("train")]
    assert train_steps == list(range(10, 90, 10))  # env steps after each collect
    test = logger.of("test")
    assert [step for step, _ in test] == [40, 80]
    assert "test/returns_stat/mean" in test[0][1]
    update_steps = [step for step, _ in logger.of("update")]
    assert update_steps == list(range(5, 45, 5))  # gradient steps after each update
    assert [step for step, _ in logger.of("info")] == [1, 2]  # epochs
    assert logger.of("info")[-1][1]["info/env_step"] == 80


def test_smoothed_losses_reach_the_logger() -> None:
    logger = RecordingLogger()
    values = [2.0, float("nan"), 4.0]  # on_nonfinite="skip": train on past the NaN (default: raise)
    trainer = build("off", max_epoch=1, logger=logger, loss_values=values, on_nonfinite="skip")
    trainer.run()
    step, last = logger.of("update")[-1]
    cycle = {0: 2.0, 2: 4.0}  # position 1 is the NaN, which smoothing drops
    values = [cycle[i % 3] for i in range(step) if i % 3 != 1]
    assert last["update/smoothed/loss"] == sum(values) / len(values)
    assert "update/loss" in last and "update/smoothed/loss/extra" in last


def test_tensorboard_points_reach_disk_each_epoch_without_close(tmp_path: Path) -> None:
    logger = TensorboardLogger(tmp_path, flush_secs=3600)
    trainer = build("off", max_epoch=1, logger=logger)
    trainer.run()  # the logger is deliberately not closed
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "test/returns_stat/mean" in tags and "info/env_step" in tags
    assert [e.step for e in acc.Scalars("info/epoch")] == [1]
    logger.close()
