"""A log write the machine refuses (a full disk) inside an epoch: one error naming the
file, carrying the last checkpoint; TensorBoard's writer thread prints no traceback."""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import pytest

from epochtrain.errors import LAST_CHECKPOINT_NOTE
from epochtrain.logger import JSONLLogger, TensorboardLogger
from epochtrain.stats import InfoStats
from tests.trainer.tiny import build


class _FullDisk:
    """A text stream that refuses every write, as a full disk does."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def close(self) -> None:
        self._stream.close()


def test_a_log_write_failing_mid_epoch_names_the_file_and_the_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logger = JSONLLogger(tmp_path / "log.jsonl")
    trainer = build("off", max_epoch=3, logger=logger, checkpoint_dir=tmp_path / "ck")
    next(trainer)
    monkeypatch.setattr(logger, "_file", _FullDisk(logger._file))
    with pytest.raises(OSError, match="No space left on device") as info:
        next(trainer)  # its first train record fails, mid-epoch
    assert info.value.filename == str(tmp_path / "log.jsonl")
    notes = getattr(info.value, "__notes__", [])
    assert notes == [LAST_CHECKPOINT_NOTE + str(tmp_path / "ck" / "epoch_000001")]
    logger.close()  # the failed write was raised once: closing does not raise it again


def test_a_failed_tensorboard_write_is_one_error_naming_the_logdir_and_no_thread_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread_errors: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    logger = TensorboardLogger(tmp_path)
    logger.log_info_data(InfoStats(epoch=1), 1)
    logger.flush()
    records = logger._records
    assert records is not None

    def refuse(data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(records._records, "write", refuse)
    with pytest.raises(OSError, match=r"No space left on device \(TensorBoard logdir") as info:
        logger.log_info_data(InfoStats(epoch=2), 2)  # the thread's error: here or at the flush
        logger.flush()
    assert info.value.errno == errno.ENOSPC
    assert str(tmp_path) in str(info.value)
    logger.close()  # raised once: not again
    assert thread_errors == []
