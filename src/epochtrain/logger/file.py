"""LineFileLogger: the base of the loggers that append text lines to one file.

It owns what the JSON Lines and CSV loggers share: path and mode validation, opening in
append mode (cutting a torn last line left by a crash), and, on
:meth:`~LineFileLogger.load_state_dict`, an atomic rewrite of the file without the
records an interrupted run wrote after its checkpoint, since the resumed run writes them
again. A new run (a logger not restored) refuses a file that already holds records in
``mode="a"`` and empties it in ``mode="w"``, both at its first record.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, ClassVar, Literal

from epochtrain.data.writes import replace_file
from epochtrain.logger.base import BaseLogger
from epochtrain.logger.tags import SCOPES

__all__ = ["LineFileLogger"]


class LineFileLogger(BaseLogger, ABC):
    """A logger writing one text file of records; subclasses choose the line format.

    :param path: the log file; missing parent directories are created.
    :param mode: what a *new* run (a logger not restored with :meth:`load_state_dict`) does
        with a file that already holds records: ``"a"`` (default) refuses it with
        :class:`~epochtrain.logger.ExistingRecordsError` at the first record, before
        writing anything; ``"w"`` empties it at the first record. A resumed run continues
        the file in either mode (the records past the checkpoint are dropped).
    :param train_interval: env steps between training-collect records.
    :param test_interval: env steps between test records.
    :param update_interval: gradient steps between update records.
    :param info_interval: epochs between info records.
    """

    suffix: ClassVar[str] = ".log"
    """File ending shown in error messages."""
    header_lines: ClassVar[int] = 0
    """Lines at the top of the file that are not records (kept on rewrite)."""
    record_lines: ClassVar[str] = "records"
    """What a record line is called in error messages."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        mode: Literal["a", "w"] = "a",
        train_interval: int = 1,
        test_interval: int = 1,
        update_interval: int = 1,
        info_interval: int = 1,
    ) -> None:
        super().__init__(train_interval, test_interval, update_interval, info_interval)
        self.path = check_log_path("path", path, self.suffix)
        self.mode = check_file_mode(mode)
        self._write_failed = False  # a write raised: close() does not raise it again
        if self.mode == "a":
            self._check_existing()
        # "w" empties the file only when a new run writes: a resume keeps its records
        self._file = open_log_file(self.path, "a")
        self._opened()

    def _check_existing(self) -> None:
        """Refuse to append to an existing file of another format (default: accept)."""

    def _opened(self) -> None:
        """Called after the file is (re)opened for writing (default: nothing)."""

    @abstractmethod
    def _scope_and_step(self, line: str) -> tuple[str, float] | None:
        """The scope and step of a record line, or ``None`` if the line is not a record."""

    @property
    def destination(self) -> str:
        """The log file's path."""
        return os.fspath(self.path)

    def _earlier_records(self) -> tuple[str, str] | None:
        if self.mode == "w":
            return None  # emptied by _start_new_run
        self._file.flush()
        count = count_lines(self.path, lambda line: self._scope_and_step(line) is not None)
        if count == 0:
            return None
        return (
            f"path {os.fspath(self.path)!r} already holds {count} "
            f"{self.record_lines.removesuffix('s') if count == 1 else self.record_lines}",
            " of an earlier run, and this logger was not restored from a checkpoint, so this run's "
            "steps would follow that run's in the same file. Log this run to another path, "
            "pass mode='w' to overwrite the file, or resume the earlier run from its "
            "checkpoint (resume_from=...), which continues the file",
        )

    def _start_new_run(self) -> None:
        if self.mode == "w":
            self._file.close()
            self._file = open_log_file(self.path, "w")
            self._opened()

    def _restore(self, state: Mapping[str, object]) -> None:
        """Restore the last logged steps and drop the file's records after them."""
        self._check_existing()
        super()._restore(state)
        self._file.close()
        rewrite_lines(self.path, self._keep_line, header_lines=self.header_lines)
        self._file = open_log_file(self.path, "a")
        self._opened()

    def _keep_line(self, line: str) -> bool:
        parsed = self._scope_and_step(line)
        if parsed is None:
            return False
        scope, step = parsed
        for known in SCOPES:
            if known == scope:
                last = self.written_step(known)
                return last is not None and step <= last
        return True  # records of an unknown scope are kept

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Name the file in an ``OSError`` of a write (a full disk says only ``[Errno 28]``)."""
        try:
            yield
        except OSError as exc:
            self._write_failed = True
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, os.fspath(self.path)) from exc

    def close(self) -> None:
        """Close the file (every record is already flushed; after a write that failed, the
        rest of its line is dropped: that error was raised already)."""
        super().close()
        if self._write_failed:
            with suppress(OSError):
                self._file.close()
            return
        with self._writing():
            self._file.close()


def check_log_path(name: str, path: object, suffix_hint: str) -> Path:
    """Validate a log file path: a ``str``/``PathLike`` that is not a directory.

    Missing parent directories are created. ``suffix_hint`` only appears in the error.
    """
    if not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise ValueError(f"{name} must be a non-empty str or os.PathLike, got {path!r}")
    resolved = Path(path)
    if resolved.is_dir():
        raise ValueError(
            f"{name} must be a file path (e.g. run{suffix_hint}), got directory {path!r}"
        )
    resolved.parent.mkdir(parents=True, exist_ok=True)
    return resolved


def check_file_mode(mode: object) -> Literal["a", "w"]:
    """Validate ``mode``: ``"a"`` appends to an existing file, ``"w"`` starts a new one."""
    if mode == "a":
        return "a"
    if mode == "w":
        return "w"
    raise ValueError(f"mode must be 'a' (append) or 'w' (overwrite), got {mode!r}")


def open_log_file(path: Path, mode: Literal["a", "w"]) -> IO[str]:
    """Open a line-based log for writing; in append mode drop a torn last line first.

    A crash while a line was half written leaves it without its newline; cutting it off
    keeps the file parseable once new lines are appended.
    """
    if mode == "a" and path.exists():
        with path.open("rb+") as raw:
            content = raw.read()
            if content and not content.endswith(b"\n"):
                raw.truncate(content.rfind(b"\n") + 1)
    return path.open(mode, encoding="utf-8", newline="")


def count_lines(path: Path, accept: Callable[[str], bool]) -> int:
    """How many lines of ``path`` ``accept`` takes (0 for a missing file)."""
    if not path.exists():
        return 0
    with path.open(encoding="utf-8", newline="") as f:
        return sum(1 for line in f if accept(line))


def rewrite_lines(path: Path, keep: Callable[[str], bool], header_lines: int = 0) -> None:
    """Atomically rewrite ``path`` keeping its first ``header_lines`` and lines ``keep`` accepts."""
    if not path.exists():
        return
    with path.open(encoding="utf-8", newline="") as f:
        lines = f.read().splitlines(keepends=True)
    kept = lines[:header_lines] + [line for line in lines[header_lines:] if keep(line)]
    text = "".join(kept)
    replace_file(path, text.encode("utf-8"))
