"""JSON Lines logger: one JSON object per record, flushed line by line.

Each line is ``{"scope": "train", "step": 1000, "train/returns_stat/mean": 21.5, ...}``:
the scope, the step in the scope's unit (see :class:`~epochtrain.logger.base.BaseLogger`)
and every tag of the record under its full name. The output is strict JSON: NaN and ±inf
are written as ``null``. Every line is flushed as it is written, so a crash loses at most
the line being written; a torn last line is cut off when the file is reopened to append.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import ClassVar

from epochtrain.logger.file import LineFileLogger
from epochtrain.logger.tags import Scope, video_scope

__all__ = ["JSONLLogger"]


class JSONLLogger(LineFileLogger):
    """Append records as JSON lines to ``path`` (parameters: :class:`LineFileLogger`).

    :meth:`load_state_dict` removes the records written after the restored steps (by the
    run that was interrupted after its checkpoint), since the resumed run writes them again.
    """

    suffix: ClassVar[str] = ".jsonl"

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Write one line holding ``scope``, ``step`` and every tag of ``data``."""
        record: dict[str, object] = {"scope": scope, "step": step}
        for tag, value in data.items():
            record[tag] = value if math.isfinite(value) else None  # strict JSON has no NaN
        with self._writing():
            self._file.write(json.dumps(record, allow_nan=False) + "\n")
            self._file.flush()

    def log_video(
        self, path: str | os.PathLike[str], step: int, *, tag: str = "test/video"
    ) -> None:
        """Write one line ``{"scope": "test", "step": step, "test/video": "<path>"}`` (the
        only record whose tag holds a string)."""
        scope = video_scope(tag)
        self._begin()
        record = {"scope": scope, "step": step, tag: os.fspath(path)}
        with self._writing():
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()
        self._mark_written(scope, step)

    def _scope_and_step(self, line: str) -> tuple[str, float] | None:
        try:
            record = json.loads(line)
            scope, step = record["scope"], record["step"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(scope, str) or not isinstance(step, int | float):
            return None
        return scope, float(step)
