"""LineFileLogger: the base of the loggers that append text lines to one file.

It owns what the JSON Lines and CSV loggers share: path and mode validation, opening in
append mode (cutting a torn last line left by a crash), and, on
:meth:`~LineFileLogger.load_state_dict`, an atomic rewrite of the file without the
records an interrupted run wrote after its checkpoint, since the resumed run writes them
again.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, ClassVar, Literal

from epochtrain.data.io import replace_file
from epochtrain.logger.base import SCOPES, BaseLogger

__all__ = ["LineFileLogger"]


class LineFileLogger(BaseLogger, ABC):
    """A logger writing one text file of records; subclasses choose the line format.

    :param path: the log file; missing parent directories are created.
    :param mode: ``"a"`` (default) appends to an existing file, so a resumed run continues
        it; ``"w"`` starts the file afresh.
    :param train_interval: env steps between training-collect records.
    :param test_interval: env steps between test records.
    :param update_interval: gradient steps between update records.
    :param info_interval: epochs between info records.
    """

    suffix: ClassVar[str] = ".log"
    """File ending shown in error messages."""
    header_lines: ClassVar[int] = 0
    """Lines at the top of the file that are not records (kept on rewrite)."""

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
        if self.mode == "a":
            self._check_existing()
        self._file = open_log_file(self.path, self.mode)
        self._opened()

    def _check_existing(self) -> None:
        """Refuse to append to an existing file of another format (default: accept)."""

    def _opened(self) -> None:
        """Called after the file is (re)opened for writing (default: nothing)."""

    @abstractmethod
    def _scope_and_step(self, line: str) -> tuple[str, float] | None:
        """The scope and step of a record line, or ``None`` if the line is not a record."""

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore the last logged steps and drop the file's records after them."""
        super().load_state_dict(state)
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

    def close(self) -> None:
        """Close the file (every record is already flushed)."""
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


def rewrite_lines(path: Path, keep: Callable[[str], bool], header_lines: int = 0) -> None:
    """Atomically rewrite ``path`` keeping its first ``header_lines`` and lines ``keep`` accepts."""
    if not path.exists():
        return
    with path.open(encoding="utf-8", newline="") as f:
        lines = f.read().splitlines(keepends=True)
    kept = lines[:header_lines] + [line for line in lines[header_lines:] if keep(line)]
    text = "".join(kept)
    replace_file(path, text.encode("utf-8"))
