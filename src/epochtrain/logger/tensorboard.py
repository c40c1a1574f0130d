"""TensorBoard logger: writes every record as scalars through torch's ``SummaryWriter``.

Each tag (``train/returns_stat/mean``, ``update/loss/actor``, ...) is one scalar series;
its x-axis is the record's step in the unit of its scope (env steps for ``train/`` and
``test/``, gradient steps for ``update/``, epochs for ``info/``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter

from epochtrain.logger.base import BaseLogger, Scope

__all__ = ["TensorboardLogger"]


class TensorboardLogger(BaseLogger):
    """Write records as TensorBoard scalars into ``logdir``.

    :param logdir: directory of the event files; created if missing. A resumed run adds a
        new event file to the same directory, and TensorBoard shows both as one run.
    :param train_interval: env steps between training-collect records.
    :param test_interval: env steps between test records.
    :param update_interval: gradient steps between update records.
    :param info_interval: epochs between info records.
    :param flush_secs: seconds between background flushes of the event file (``close``
        always flushes).
    :param max_queue: records (scalars) buffered before a flush is forced; 1 flushes
        every scalar, which is slow but loses nothing on a crash.

    Unlike the JSONL and CSV loggers, this one cannot remove points that an interrupted
    run wrote after its last checkpoint; a seeded resume writes the same values again at
    the same steps.
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
        self.writer = SummaryWriter(
            log_dir=os.fspath(logdir), max_queue=max_queue, flush_secs=flush_secs
        )
        self._closed = False

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Add every tag of ``data`` as a scalar at ``global_step=step``."""
        for tag, value in data.items():
            self.writer.add_scalar(tag, value, global_step=step)

    def flush(self) -> None:
        """Write buffered scalars to disk now (no-op once closed)."""
        if not self._closed:
            self.writer.flush()

    def close(self) -> None:
        """Flush and close the event file; safe to call more than once."""
        if not self._closed:
            self.writer.close()
            self._closed = True
