"""After a resume the logged curves continue: no duplicated and no missing point.

The interrupted run logs one more epoch after its checkpoint; the resumed run drops those
points (they are written again) and goes on. The files are read back.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

from epochtrain.logger import BaseLogger, CSVLogger, JSONLLogger, TensorboardLogger
from epochtrain.trainer import UTDRatio
from tests.trainer.tiny import build

Points = dict[str, list[tuple[int, float]]]


def _timing(tag: str) -> bool:
    return tag.endswith("_time") or tag.endswith("_speed")


def read_events(logdir: Path) -> Points:
    """Every scalar point of every event file in ``logdir``, in file order (no dedup).

    Read as written (the parsing ``EventFileLoader`` would migrate them to tensors), and
    each must be a ``simple_value``: the form the legacy ``EventAccumulator.Scalars`` reads.
    """
    points: Points = defaultdict(list)
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        for event in LegacyEventFileLoader(str(path)).Load():
            for value in event.summary.value:
                assert value.WhichOneof("value") == "simple_value", (path, event)
                points[value.tag].append((event.step, value.simple_value))
    return dict(points)


def read_jsonl(path: Path) -> Points:
    points: Points = defaultdict(list)
    for line in path.read_text().splitlines():
        record = json.loads(line)
        for tag, value in record.items():
            if tag not in ("scope", "step"):
                points[tag].append((record["step"], math.nan if value is None else value))
    return dict(points)


def read_csv(path: Path) -> Points:
    points: Points = defaultdict(list)
    for _scope, step, tag, value in (line.split(",") for line in path.read_text().splitlines()[1:]):
        points[tag].append((int(step), float(value)))
    return dict(points)


def train(make_logger: Callable[[], BaseLogger], ckpt: Path | None, interrupted: bool) -> None:
    """Uninterrupted (``ckpt`` None), or 2 epochs + checkpoint + 1 epoch, then a resume."""
    logger = make_logger()
    trainer = build("off", max_epoch=4, logger=logger, hooks=[UTDRatio()])
    if not interrupted:
        trainer.run()
        logger.close()
        return
    assert ckpt is not None
    next(trainer), next(trainer)
    trainer.save_checkpoint(ckpt)
    next(trainer)  # logged, then lost: the process "dies" here
    logger.close()
    logger = make_logger()
    resumed = build("off", max_epoch=4, logger=logger, hooks=[UTDRatio()], resume_from=ckpt)
    resumed.run()
    logger.close()


@pytest.mark.parametrize("kind", ["tensorboard", "jsonl", "csv"])
def test_resumed_curves_continue_without_duplicates_or_gaps(tmp_path: Path, kind: str) -> None:
    def make(run: str) -> Callable[[], BaseLogger]:
        if kind == "tensorboard":
            return lambda: TensorboardLogger(tmp_path / run)
        if kind == "csv":
            return lambda: CSVLogger(tmp_path / run / "log.csv")
        return lambda: JSONLLogger(tmp_path / run / "log.jsonl")

    train(make("full"), None, interrupted=False)
    train(make("resumed"), tmp_path / "ckpt", interrupted=True)
    readers: dict[str, Callable[[Path], Points]] = {
        "tensorboard": read_events,
        "jsonl": lambda d: read_jsonl(d / "log.jsonl"),
        "csv": lambda d: read_csv(d / "log.csv"),
    }
    read = readers[kind]
    full, resumed = read(tmp_path / "full"), read(tmp_path / "resumed")
    assert set(resumed) == set(full)
    assert "train/utd_ratio" in full and "update/loss" in full and "info/epoch" in full
    for tag, points in full.items():
        steps = [step for step, _ in resumed[tag]]
        assert steps == [step for step, _ in points], tag  # same steps, in order, once each
        assert len(set(steps)) == len(steps), tag
        if not _timing(tag):
            values = [value for _, value in resumed[tag]]
            assert values == pytest.approx([value for _, value in points], nan_ok=True), tag
    assert [s for s, _ in full["info/epoch"]] == [1, 2, 3, 4]


def test_tensorboard_trim_keeps_points_up_to_the_restored_position(tmp_path: Path) -> None:
    with TensorboardLogger(tmp_path) as logger:
        for step in (1, 2, 3):
            logger.log_data("update", step, {"update/x": float(step)})
            logger.log_data("train", 10 * step, {"train/y": float(step)})
        logger.log_data("update", 2, {"update/x": 2.0})  # marks nothing new
        state = logger.state_dict()
        logger.log_data("update", 4, {"update/x": 4.0})  # after the "checkpoint"
    state_written = state["written"]
    assert isinstance(state_written, dict) and state_written["update"] == 3
    with TensorboardLogger(tmp_path) as resumed:
        resumed.load_state_dict(state)
    points = read_events(tmp_path)
    assert [s for s, _ in points["update/x"]] == [1, 2, 3, 2]
    assert [s for s, _ in points["train/y"]] == [10, 20, 30]
