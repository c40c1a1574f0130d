"""Loggers that record the trainers' stats to TensorBoard, JSON Lines, CSV, or nowhere.

See ``docs/logging.md`` for the interval units and the table of every tag.
"""

from epochtrain.logger.base import (
    SCOPES,
    BaseLogger,
    LazyLogger,
    MultiLogger,
    Scope,
    collect_stats_to_tags,
    flatten_dataclass,
    info_stats_to_tags,
    training_stats_to_tags,
)
from epochtrain.logger.csv import CSV_HEADER, CSVLogger
from epochtrain.logger.file import LineFileLogger
from epochtrain.logger.jsonl import JSONLLogger
from epochtrain.logger.tensorboard import TensorboardLogger

__all__ = [
    "CSV_HEADER",
    "SCOPES",
    "BaseLogger",
    "CSVLogger",
    "JSONLLogger",
    "LazyLogger",
    "LineFileLogger",
    "MultiLogger",
    "Scope",
    "TensorboardLogger",
    "collect_stats_to_tags",
    "flatten_dataclass",
    "info_stats_to_tags",
    "training_stats_to_tags",
]
