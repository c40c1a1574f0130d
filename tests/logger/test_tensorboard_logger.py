"""Tests of epochtrain.logger.tensorboard: scalars land in event files at the right steps,
and a resume trims them without changing the form of the points it keeps."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pytest
from tensorboard.backend.event_processing import plugin_event_accumulator
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.summary.writer.record_writer import RecordWriter
from tensorboard.util import tensor_util

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


# Both runs of a test start within one second in one process, so the name order of their
# event files (``...<seconds>.<host>.<pid>.<counter>``, the order readers load them in) is
# not their age order: the points are compared sorted by step, which still shows a duplicate.
POINTS_AFTER_RESUME = {
    "update/x": [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0)],
    "train/y": [(10, 1.0), (20, 2.0), (30, 3.0), (40, 4.0)],
}


def interrupted_then_resumed(logdir: Path) -> tuple[Path, list[bytes]]:
    """Steps 1-3 of ``update/x`` and 10-30 of ``train/y``, a checkpoint, two lost points
    (``update`` 4, ``train`` 40), then a resume that logs ``update`` 4-5 and ``train`` 40
    again with new values. Returns the first run's event file and its records as they were
    before the resume."""
    with TensorboardLogger(logdir) as first:
        for step in (1, 2, 3):
            first.log_data("update", step, {"update/x": float(step)})
            first.log_data("train", 10 * step, {"train/y": float(step)})
        state = first.state_dict()
        first.log_data("update", 4, {"update/x": -4.0})
        first.log_data("train", 40, {"train/y": -4.0})
    (path,) = logdir.glob("events.out.tfevents.*")
    records = list(RawEventFileLoader(str(path)).Load())
    with TensorboardLogger(logdir) as resumed:
        resumed.load_state_dict(state)
        resumed.log_data("update", 4, {"update/x": 4.0})
        resumed.log_data("update", 5, {"update/x": 5.0})
        resumed.log_data("train", 40, {"train/y": 4.0})
    return path, records


def test_trimmed_scalars_stay_simple_values_for_the_legacy_reader(tmp_path: Path) -> None:
    interrupted_then_resumed(tmp_path)
    scalars = read_scalars(tmp_path)
    assert {tag: sorted(points) for tag, points in scalars.items()} == POINTS_AFTER_RESUME


def test_trimmed_scalars_are_seen_once_by_the_tensor_reader(tmp_path: Path) -> None:
    interrupted_then_resumed(tmp_path)
    acc = plugin_event_accumulator.EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    acc.Reload()
    points = {
        tag: sorted(
            (e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)
        )
        for tag in acc.Tags()["tensors"]
    }
    assert points == POINTS_AFTER_RESUME


def test_trim_copies_the_kept_records_byte_for_byte(tmp_path: Path) -> None:
    path, original = interrupted_then_resumed(tmp_path)
    lost = [Event.FromString(record) for record in original[-2:]]
    assert [(e.step, e.summary.value[0].tag) for e in lost] == [(4, "update/x"), (40, "train/y")]
    assert list(RawEventFileLoader(str(path)).Load()) == original[:-2]
    assert path.read_bytes() == b"".join(frame(record) for record in original[:-2])


def frame(record: bytes) -> bytes:
    """``record`` framed as in a TFRecord file: length, checksums, data."""
    buffer = io.BytesIO()
    RecordWriter(buffer).write(record)
    return buffer.getvalue()


def test_trim_keeps_a_videos_text_and_image_in_their_original_form(tmp_path: Path) -> None:
    iio = pytest.importorskip("imageio.v3")
    video = tmp_path / "v.mp4"
    iio.imwrite(video, np.zeros((4, 16, 24, 3), dtype=np.uint8), fps=10)
    logdir = tmp_path / "tb"
    with TensorboardLogger(logdir) as first:
        first.log_video(video, 10)
        state = first.state_dict()
        first.log_video(video, 20)  # lost
    (path,) = logdir.glob("events.out.tfevents.*")
    original = list(RawEventFileLoader(str(path)).Load())
    with TensorboardLogger(logdir) as resumed:
        resumed.load_state_dict(state)
        resumed.log_video(video, 20)
    assert list(RawEventFileLoader(str(path)).Load()) == original[:-2]  # text + image at 20
    acc = EventAccumulator(str(logdir), size_guidance={"images": 0, "tensors": 0})
    acc.Reload()
    images = sorted(acc.Images("test/video"), key=lambda image: image.step)
    assert [image.step for image in images] == [10, 20]
    assert all(image.encoded_image_string.startswith(b"GIF89a") for image in images)
    texts = sorted(acc.Tensors("test/video/text_summary"), key=lambda text: text.step)
    assert [(t.step, t.tensor_proto.string_val) for t in texts] == [
        (10, [str(video).encode()]),
        (20, [str(video).encode()]),
    ]


def test_an_interrupted_trim_leaves_the_event_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TensorboardLogger(tmp_path) as first:
        for step in (1, 2, 3):
            first.log_data("update", step, {"update/x": float(step)})
        state = first.state_dict()
        first.log_data("update", 4, {"update/x": 4.0})
    (path,) = tmp_path.glob("events.out.tfevents.*")
    original = path.read_bytes()

    class DyingRecordWriter:
        """A ``RecordWriter`` killed (Ctrl-C) at its first record, after the file is open."""

        def __init__(self, file: BinaryIO) -> None:
            file.write(b"partial")

        def write(self, data: bytes) -> None:
            raise KeyboardInterrupt

    monkeypatch.setattr("epochtrain.logger.tensorboard.RecordWriter", DyingRecordWriter)
    with pytest.raises(KeyboardInterrupt):
        TensorboardLogger(tmp_path).load_state_dict(state)
    assert path.read_bytes() == original
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left


def test_a_logger_dropped_unclosed_ends_its_writer_thread_and_keeps_its_points(
    tmp_path: Path,
) -> None:
    import gc
    import threading

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    before = threading.active_count()
    for i in range(3):
        logger = TensorboardLogger(tmp_path / str(i))
        logger.write("train", 1, {"train/x": float(i)})
        del logger  # never closed, as a trainer a script forgot to close
    gc.collect()
    assert threading.active_count() == before
    for i in range(3):
        events = EventAccumulator(str(tmp_path / str(i)))
        events.Reload()
        assert [e.value for e in events.Scalars("train/x")] == [float(i)]
