"""Epoch trainers: iterate to train, one ``EpochStats`` per ``next()``."""

from epochtrain.trainer.base import BaseTrainer, StopFn
from epochtrain.trainer.offline import OfflineTrainer
from epochtrain.trainer.offpolicy import OffpolicyTrainer
from epochtrain.trainer.online import OnlineTrainer
from epochtrain.trainer.onpolicy import OnpolicyTrainer

__all__ = [
    "BaseTrainer",
    "OfflineTrainer",
    "OffpolicyTrainer",
    "OnlineTrainer",
    "OnpolicyTrainer",
    "StopFn",
]
