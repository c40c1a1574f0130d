"""TensorBoard logger: writes every record as scalars through torch's ``SummaryWriter``.

Each tag (``train/returns_stat/mean``, ``update/loss/actor``, ...) is one scalar series;
its x-axis is the record's step in the unit of its scope (env steps for ``train/`` and
``test/``, gradient steps for ``update/``, epochs for ``info/``).

Resuming: :meth:`TensorboardLogger.load_state_dict` rewrites the event files already in
the log directory without the points past the restored position (those an interrupted
run wrote after its checkpoint), atomically per file, before the resumed run writes its
first point; so every curve continues with no duplicated and no missing point. The kept
records are copied byte for byte, so legacy readers (``EventAccumulator.Scalars``) still
see the earlier points as the ``simple_value`` scalars they were written as. The
scopes count steps in different units, so TensorBoard's single ``purge_step`` could not
express this.

A new run (a logger not restored) refuses a ``logdir`` whose event files already hold
another run's points, with :class:`~epochtrain.logger.ExistingRecordsError` before its
first point: TensorBoard draws every event file of a directory as one run, so the two
runs' steps would zig-zag in one curve.
"""

from __future__ import annotations

import importlib
import io
import os
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.record_writer import RecordWriter
from torch.utils.tensorboard import SummaryWriter

from epochtrain.data.writes import replace_file
from epochtrain.logger.base import BaseLogger
from epochtrain.logger.tags import SCOPES, Scope, video_scope

__all__ = ["TensorboardLogger"]


class TensorboardLogger(BaseLogger):
    """Write records as TensorBoard scalars into ``logdir``.

    :param logdir: directory of the event files; created if missing. A resumed run adds a
        new event file to the same directory, and TensorBoard shows both as one run; a new
        run needs a directory without another run's points (a subdirectory per run, as
        Tianshou and SB3 make, keeps runs apart).
    :param train_interval: env steps between training-collect records.
    :param test_interval: env steps between test records.
    :param update_interval: gradient steps between update records.
    :param info_interval: epochs between info records.
    :param flush_secs: seconds between background flushes of the event file (``close``
        always flushes).
    :param max_queue: records (scalars) buffered before a flush is forced; 1 flushes
        every scalar, which is slow but loses nothing on a crash.

    The event file is created with the first point. :meth:`load_state_dict` removes the
    points an interrupted run wrote after its checkpoint (see the module docstring).
    """

    def __init__(
        self,
        logdir: str | os.PathLike[str],
        *,
        train_interval: int = 1,
        test_interval: int = 1,
        update_interval: int = 1,
        info_interval: int = 1,
        flush_secs: int = 120,
        max_queue: int = 10,
    ) -> None:
        super().__init__(train_interval, test_interval, update_interval, info_interval)
        if not isinstance(logdir, (str, os.PathLike)) or str(logdir) == "":
            raise ValueError(f"logdir must be a non-empty str or os.PathLike, got {logdir!r}")
        if Path(logdir).exists() and not Path(logdir).is_dir():
            raise ValueError(f"logdir must be a directory, got the existing file {logdir!r}")
        for name, value in (("flush_secs", flush_secs), ("max_queue", max_queue)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self._max_queue, self._flush_secs = max_queue, flush_secs
        self._writer: SummaryWriter | None = None
        self._records: _GuardedRecords | None = None

    @property
    def writer(self) -> SummaryWriter:
        """torch's ``SummaryWriter``, created (with its event file) on first use."""
        if self._writer is None:
            self.check_open()  # a closed logger opens no second event file
            self._writer = SummaryWriter(
                log_dir=os.fspath(self.logdir),
                max_queue=self._max_queue,
                flush_secs=self._flush_secs,
            )
            self._records = _guard_records(self._writer)
            # a logger dropped unclosed (a trainer never closed) ends its writer's thread
            weakref.finalize(self, self._writer.close)
        return self._writer

    def _raise_failed(self) -> None:
        """Raise the ``OSError`` of a write the writer's thread could not make (a full
        disk), naming the event file, instead of the thread printing it."""
        failed = None if self._records is None else self._records.error
        if failed is not None:
            raise OSError(
                failed.errno,
                f"{failed.strerror} (TensorBoard logdir {os.fspath(self.logdir)!r})",
                failed.filename or self._records_path(),
            ) from failed

    def _records_path(self) -> str | None:
        own = self._own_event_file()
        return None if own is None else os.fspath(own)

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Add every tag of ``data`` as a scalar at ``global_step=step``."""
        writer = self.writer
        for tag, value in data.items():
            writer.add_scalar(tag, value, global_step=step)
        self._raise_failed()

    def log_video(
        self, path: str | os.PathLike[str], step: int, *, tag: str = "test/video"
    ) -> None:
        """Write the video's path as text and, with the ``video`` extra installed, its
        frames as an animated GIF image (Images tab), both under ``tag`` at ``step``.

        TensorBoard's own ``add_video`` needs moviepy, which epochtrain does not install;
        the GIF is at most 240 px wide and 150 frames (frames are skipped evenly).
        """
        scope = video_scope(tag)
        self._begin()
        writer = self.writer
        writer.add_text(tag, os.fspath(path), global_step=step)
        image = _gif_image(Path(path))
        if image is not None and writer.file_writer is not None:
            summary = Summary(value=[Summary.Value(tag=tag, image=image)])
            writer.file_writer.add_summary(summary, global_step=step)
        self._mark_written(scope, step)

    @property
    def destination(self) -> str:
        """The logdir."""
        return os.fspath(self.logdir)

    def _restore(self, state: Mapping[str, object]) -> None:
        """Restore the position and drop the event files' points past it."""
        super()._restore(state)
        if self._writer is not None:
            self._writer.flush()
        own = self._own_event_file()
        for path in sorted(self.logdir.glob("events.out.tfevents.*")):
            if path != own and path.is_file():
                self._trim(path)

    def _earlier_records(self) -> tuple[str, str] | None:
        own = self._own_event_file()
        for path in sorted(self.logdir.glob("events.out.tfevents.*")):
            if path != own and path.is_file() and _holds_points(path):
                return (
                    f"logdir {os.fspath(self.logdir)!r} already holds points ({path.name})",
                    " of an earlier run, and this logger was not restored from a checkpoint: "
                    "TensorBoard would draw both runs as one, their steps interleaved. Log "
                    "this run to another logdir (e.g. a subdirectory per run), move the "
                    "earlier event files away, or resume the earlier run from its checkpoint "
                    "(resume_from=...), which continues the logdir",
                )
        return None

    def _own_event_file(self) -> Path | None:
        file_writer = None if self._writer is None else self._writer.file_writer
        if file_writer is None:
            return None
        return Path(file_writer.event_writer._file_name)

    def _keep(self, event: Any) -> bool:
        """False for a scalar event past the restored position of its tag's scope."""
        if not event.HasField("summary"):
            return True
        for value in event.summary.value:
            scope = value.tag.split("/", 1)[0]
            for known in SCOPES:
                if known == scope:
                    last = self.written_step(known)
                    if last is None or event.step > last:
                        return False
        return True

    def _trim(self, path: Path) -> None:
        # The raw records are copied as they are: TensorBoard's parsing loader migrates
        # ``simple_value`` scalars and images to tensors, which the legacy
        # ``EventAccumulator.Scalars``/``Images`` no longer see.
        records = list(RawEventFileLoader(os.fspath(path)).Load())
        kept = [record for record in records if self._keep(Event.FromString(record))]
        if len(kept) == len(records):
            return

        def write(f: BinaryIO) -> None:
            writer = RecordWriter(f)
            for record in kept:
                writer.write(record)

        replace_file(path, write)

    def flush(self) -> None:
        """Write buffered scalars to disk now (no-op once closed or before the first point)."""
        if not self._closed and self._writer is not None:
            self._writer.flush()
            self._raise_failed()

    def close(self) -> None:
        """Flush and close the event file; safe to call more than once."""
        if not self._closed:
            super().close()
            if self._writer is not None:
                reported = self._records is not None and self._records.error is not None
                self._writer.close()
                if not reported:  # a failure write() or flush() raised is not raised again
                    self._raise_failed()


class _GuardedRecords:
    """Stands between TensorBoard's writer thread and its ``RecordWriter``: a write the
    machine refuses (a full disk) is kept for the logger to raise once, naming the logdir,
    instead of ending the thread with a traceback of its own ("Exception in thread") and
    failing again in the finaliser at exit. Later writes are dropped."""

    def __init__(self, records: Any) -> None:
        self._records = records
        self.error: OSError | None = None

    def _call(self, method: str, *args: object) -> None:
        if self.error is None:
            try:
                getattr(self._records, method)(*args)
            except OSError as exc:
                self.error = exc

    def write(self, data: bytes) -> None:
        self._call("write", data)

    def flush(self) -> None:
        self._call("flush")

    def close(self) -> None:
        self._call("close")


def _guard_records(writer: SummaryWriter) -> _GuardedRecords | None:
    """Put a :class:`_GuardedRecords` between ``writer``'s thread and its ``RecordWriter``
    (TensorBoard's private attributes: ``None`` where they are not as expected)."""
    file_writer = writer.file_writer
    async_writer = getattr(getattr(file_writer, "event_writer", None), "_async_writer", None)
    worker = getattr(async_writer, "_worker", None)
    if async_writer is None or worker is None or not hasattr(worker, "_record_writer"):
        return None
    guarded = _GuardedRecords(async_writer._writer)
    async_writer._writer = worker._record_writer = guarded
    return guarded


def _holds_points(path: Path) -> bool:
    """Whether the event file at ``path`` holds any summary (a scalar, text or image)."""
    for record in RawEventFileLoader(os.fspath(path)).Load():
        if Event.FromString(record).HasField("summary"):
            return True
    return False


def _gif_image(path: Path, max_width: int = 240, max_frames: int = 150) -> Any:
    """The mp4 at ``path`` as a ``Summary.Image`` holding an animated GIF, or ``None``
    without imageio (the ``video`` extra)."""
    try:
        iio = importlib.import_module("imageio.v3")
        pil = importlib.import_module("PIL.Image")
    except ImportError:
        return None
    frames = list(iio.imiter(path))
    if not frames:
        return None
    fps = float(iio.immeta(path).get("fps") or 30.0)
    every = -(-len(frames) // max_frames)
    height, width = frames[0].shape[:2]
    scale = min(1.0, max_width / width)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    images = [pil.fromarray(frame).resize(size) for frame in frames[::every]]
    buffer = io.BytesIO()
    images[0].save(
        buffer,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=round(1000 * every / fps),
        loop=0,
    )
    return Summary.Image(
        height=size[1], width=size[0], colorspace=3, encoded_image_string=buffer.getvalue()
    )
