"""JSON Lines logger: one JSON object per record, flushed line by line.

Each line is ``{"scope": "train", "step": 1000, "train/returns_stat/mean": 21.5, ...}``:
the scope, the step in the scope's unit (see :class:`~epochtrain.logger.base.BaseLogger`)
and every tag of the record under its full name. The output is strict JSON: NaN and ±inf
are written as ``null``. Every line is flushed as it is written, so a crash loses at most
the line being written; a torn last line is cut off when the file is reopened to append.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Literal

from epochtrain.logger.base import (
    BaseLogger,
    Scope,
    _check_file_mode,
    _check_log_path,
    _finite_or_none,
    _logged_after_restore,
    _open_log_file,
    _rewrite_lines,
)

__all__ = ["JSONLLogger"]


class JSONLLogger(BaseLogger):
    """Append records as JSON lines to ``path``.

    :param path: the ``.jsonl`` file; missing parent directories are created.
    :param mode: ``"a"`` (default) appends to an existing file, so a resumed run continues
        it; ``"w"`` starts the file afresh.
    :param train_interval: see :class:`~epochtrain.logger.base.BaseLogger` (env steps).
    :param test_interval: env steps between test records.
    :param update_interval: gradient steps between update records.
    :param info_interval: epochs between info records.

    :meth:`load_state_dict` removes the records written after the restored steps (by the
    run that was interrupted after its checkpoint), since the resumed run writes them again.
    """

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
        self.path = _check_log_path("path", path, ".jsonl")
        self.mode = _check_file_mode(mode)
        self._file = _open_log_file(self.path, self.mode)

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Write one line holding ``scope``, ``step`` and every tag of ``data``."""
        record: dict[str, object] = {"scope": scope, "step": step}
        for tag, value in data.items():
            record[tag] = _finite_or_none(value)
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore the last logged steps and drop the file's records after them."""
        super().load_state_dict(state)
        self._file.close()
        _rewrite_lines(self.path, self._keep_line)
        self._file = _open_log_file(self.path, "a")

    def _keep_line(self, line: str) -> bool:
        try:
            record = json.loads(line)
            scope, step = record["scope"], record["step"]
        except (ValueError, KeyError, TypeError):
            return False
        return isinstance(scope, str) and not _logged_after_restore(self, scope, step)

    def close(self) -> None:
        """Close the file (it is already flushed)."""
        self._file.close()
