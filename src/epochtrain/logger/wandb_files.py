"""Read W&B's local run files (``wandb/[offline-]run-<time>-<id>/run-<id>.wandb``) back.

W&B writes every record of a run (config, metric definitions, history rows) to a local
``.wandb`` file, online and offline; ``wandb sync`` uploads offline ones. The file is a
LevelDB-style log: a 7-byte file header, then 32 KiB blocks of chunks, each chunk with a
7-byte header (crc32c, little-endian length, type: 1 full, 2 first, 3 middle, 4 last)
holding a serialised ``wandb.proto.wandb_internal_pb2.Record``. The Python ``datastore``
reader that used to parse it left the ``wandb`` package, hence this one.

:class:`~epochtrain.logger.WandbLogger` reads the history of earlier processes of the same
run on resume, to know which steps they already wrote; tests read runs back with it.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epochtrain.extras import require

__all__ = ["LocalRun", "local_run_dirs", "read_local_run", "wandb_records"]

_BLOCK, _HEADER = 32768, 7
_RUN_DIR = re.compile(r"(?:offline-)?run-(?P<time>\d{8}_\d{6})-(?P<id>.+?)(?:-(?P<n>\d+))?")
_FULL, _LAST = 1, 4


def wandb_records(path: Path) -> Iterator[Any]:
    """Every ``Record`` (protobuf) of one ``.wandb`` file, in order; a torn tail is ignored."""
    proto = require("wandb.proto.wandb_internal_pb2", extra="wandb")
    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"path {path} is not a W&B run file (no ':W&B' header)")
    index, parts = _HEADER, []
    while index + _HEADER <= len(data):
        left = _BLOCK - index % _BLOCK
        if left < _HEADER:  # too little room for a chunk header: the block is padded
            index += left
            continue
        _, length, kind = struct.unpack("<IHB", data[index : index + _HEADER])
        index += _HEADER
        if index + length > len(data):
            return  # the writer died mid-chunk
        parts.append(data[index : index + length])
        index += length
        if kind in (_FULL, _LAST):
            record = proto.Record()
            record.ParseFromString(b"".join(parts))
            parts = []
            yield record


@dataclass
class LocalRun:
    """The records of one local run directory."""

    run_id: str
    """W&B run id (several directories share it when a run was resumed)."""
    config: dict[str, Any] = field(default_factory=dict)
    """The run's config: as given to ``wandb.init``, with later ``run.config`` updates."""
    step_metrics: dict[str, str] = field(default_factory=dict)
    """``define_metric`` globs and their step metric, e.g. ``{"train/*": "train/env_step"}``."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """Every ``run.log`` row, in order, W&B's own keys (``_step``, ...) included."""


def read_local_run(run_dir: Path) -> LocalRun:
    """Parse ``run_dir/run-<id>.wandb`` into a :class:`LocalRun`."""
    files = sorted(Path(run_dir).glob("run-*.wandb"))
    if len(files) != 1:
        raise ValueError(f"run_dir must hold exactly one run-<id>.wandb file: {run_dir}")
    run = LocalRun(run_id=files[0].stem.removeprefix("run-"))
    for record in wandb_records(files[0]):
        kind = record.WhichOneof("record_type")
        if kind in ("run", "config"):  # the config given to init, then run.config updates
            items = record.run.config.update if kind == "run" else record.config.update
            for item in items:
                run.config[item.key] = json.loads(item.value_json)
        elif kind == "metric" and record.metric.step_metric:
            run.step_metrics[record.metric.glob_name] = record.metric.step_metric
        elif kind == "history":
            row: dict[str, Any] = {}
            for item in record.history.item:
                _set_nested(row, [item.key] if item.key else list(item.nested_key), item)
            run.history.append(row)
    return run


def _set_nested(row: dict[str, Any], keys: list[str], item: Any) -> None:
    """``row[k0][k1]... = value``: a media entry (``wandb.Video``) is a dict of fields."""
    for key in keys[:-1]:
        row = row.setdefault(key, {})
    row[keys[-1]] = json.loads(item.value_json)


def local_run_dirs(wandb_dir: Path, run_id: str | None = None) -> list[Path]:
    """Run directories (online and offline) under ``wandb_dir`` (the ``wandb/`` folder),
    oldest first; only those of ``run_id`` if given.

    A directory is ``[offline-]run-<YYYYmmdd_HHMMSS>-<id>``, with ``-<n>`` appended when
    a process of the same run started within the same second.
    """
    found = []
    for path in wandb_dir.glob("*run-*"):
        match = _RUN_DIR.fullmatch(path.name)
        if match and path.is_dir() and (run_id is None or match["id"] == run_id):
            found.append((match["time"], int(match["n"] or 0), path))
    return [path for *_, path in sorted(found)]
