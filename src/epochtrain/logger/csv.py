"""CSV logger: long-format ``scope,step,tag,value`` rows, one per tag, flushed per record.

Long format keeps the header fixed whatever tags an algorithm produces, so runs of
different algorithms can be concatenated and pivoted (``pandas.read_csv(path).pivot_table(
index="step", columns="tag", values="value")``). Values are written with ``repr`` so they
read back exactly; NaN and ±inf appear as ``nan``, ``inf`` and ``-inf``, which ``float``
parses.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Mapping
from typing import ClassVar

from epochtrain.logger.file import LineFileLogger
from epochtrain.logger.tags import Scope

__all__ = ["CSV_HEADER", "CSVLogger"]

CSV_HEADER: tuple[str, str, str, str] = ("scope", "step", "tag", "value")
"""The header row, written once at the top of the file."""

_HEADER_LINE = ",".join(CSV_HEADER)


class CSVLogger(LineFileLogger):
    """Append ``scope,step,tag,value`` rows to ``path``.

    :param path: the ``.csv`` file; missing parent directories are created.
    :param mode: what a new run (a logger not restored with :meth:`load_state_dict`) does
        with a file that already holds rows: ``"a"`` (default) refuses it with
        :class:`~epochtrain.logger.ExistingRecordsError` before writing; ``"w"`` empties it
        at the first record. A resumed run continues the file in either mode, whose header
        must be ``scope,step,tag,value``. The header is written when the file is new or
        empty.
    :param train_interval: env steps between training-collect records.
    :param test_interval: env steps between test records.
    :param update_interval: gradient steps between update records.
    :param info_interval: epochs between info records.

    :meth:`load_state_dict` removes the rows written after the restored steps (by the run
    that was interrupted after its checkpoint), since the resumed run writes them again.
    """

    suffix: ClassVar[str] = ".csv"
    header_lines: ClassVar[int] = 1
    record_lines: ClassVar[str] = "rows"

    def _check_existing(self) -> None:
        _check_header(self.path)

    def _opened(self) -> None:
        self._writer = csv.writer(self._file, lineterminator="\n")
        if self._file.tell() == 0:
            self._writer.writerow(CSV_HEADER)
            self._file.flush()

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Write one row per tag of ``data`` and flush."""
        with self._writing():
            self._writer.writerows((scope, step, tag, repr(float(v))) for tag, v in data.items())
            self._file.flush()

    def _scope_and_step(self, line: str) -> tuple[str, float] | None:
        row = next(csv.reader(io.StringIO(line)), [])
        if len(row) != len(CSV_HEADER):
            return None
        try:
            return row[0], float(row[1])
        except ValueError:
            return None


def _check_header(path: os.PathLike[str]) -> None:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            first = f.readline()
    except FileNotFoundError:
        return
    # A first line without newline is torn and gets cut off on open; nothing to check.
    if first.endswith("\n") and first.rstrip("\r\n") != _HEADER_LINE:
        raise ValueError(
            f"path {os.fspath(path)!r} exists with header {first.rstrip()!r}; CSVLogger appends "
            f"only to files whose header is {_HEADER_LINE!r} (use mode='w' to overwrite)"
        )
