"""Epoch trainers: iterate to train, one ``EpochStats`` per ``next()``; hooks and built-ins."""

from epochtrain.trainer.base import BaseTrainer, StopFn
from epochtrain.trainer.builtin_hooks import (
    ClearCudaCache,
    EarlyStopping,
    GradClip,
    LogScalar,
    LRScheduler,
    TargetNetUpdater,
    UTDRatio,
)
from epochtrain.trainer.data_hooks import (
    BatchSubSampler,
    ObservationNormalizer,
    RewardNormalizer,
    RunningMeanStd,
)
from epochtrain.trainer.hooks import HOOK_POINTS, TrainerHook
from epochtrain.trainer.offline import OfflineTrainer
from epochtrain.trainer.offpolicy import OffpolicyTrainer
from epochtrain.trainer.online import OnlineTrainer
from epochtrain.trainer.onpolicy import OnpolicyTrainer
from epochtrain.trainer.params import (
    OfflineParams,
    OffpolicyParams,
    OnlineParams,
    OnpolicyParams,
    TrainerParams,
)
from epochtrain.trainer.video import VideoRecorder, record_video

__all__ = [
    "HOOK_POINTS",
    "BaseTrainer",
    "BatchSubSampler",
    "ClearCudaCache",
    "EarlyStopping",
    "GradClip",
    "LRScheduler",
    "LogScalar",
    "ObservationNormalizer",
    "OfflineParams",
    "OfflineTrainer",
    "OffpolicyParams",
    "OffpolicyTrainer",
    "OnlineParams",
    "OnlineTrainer",
    "OnpolicyParams",
    "OnpolicyTrainer",
    "RewardNormalizer",
    "RunningMeanStd",
    "StopFn",
    "TargetNetUpdater",
    "TrainerHook",
    "TrainerParams",
    "UTDRatio",
    "VideoRecorder",
    "record_video",
]
