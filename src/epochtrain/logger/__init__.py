"""Loggers that record the trainers' stats to TensorBoard, JSON Lines, CSV, W&B, MLflow, or nowhere.

See ``docs/logging.md`` for the interval units and the table of every tag, and
``docs/integrations.md`` for W&B and MLflow. Importing this package never imports
``wandb`` or ``mlflow``: their loggers import them when built.
"""

from epochtrain.logger.base import (
    BaseLogger,
    ExistingRecordsError,
    LazyLogger,
    LoggerClosedError,
    LoggerResumeError,
)
from epochtrain.logger.csv import CSV_HEADER, CSVLogger
from epochtrain.logger.file import LineFileLogger
from epochtrain.logger.jsonl import JSONLLogger
from epochtrain.logger.mlflow import MLflowLogger
from epochtrain.logger.multi import MultiLogger
from epochtrain.logger.tags import (
    SCOPES,
    Scope,
    collect_stats_to_tags,
    flatten_dataclass,
    info_stats_to_tags,
    training_stats_to_tags,
    video_scope,
)
from epochtrain.logger.tensorboard import TensorboardLogger
from epochtrain.logger.wandb import WandbLogger

__all__ = [
    "CSV_HEADER",
    "SCOPES",
    "BaseLogger",
    "CSVLogger",
    "ExistingRecordsError",
    "JSONLLogger",
    "LazyLogger",
    "LineFileLogger",
    "LoggerClosedError",
    "LoggerResumeError",
    "MLflowLogger",
    "MultiLogger",
    "Scope",
    "TensorboardLogger",
    "WandbLogger",
    "collect_stats_to_tags",
    "flatten_dataclass",
    "info_stats_to_tags",
    "training_stats_to_tags",
    "video_scope",
]
