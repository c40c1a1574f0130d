"""Data layer: Batch, ReplayBuffer and Collector (imports nothing else from epochtrain)."""

from epochtrain.data.batch import EXTRA_FIELDS, ActResult, Batch, Obs, obs_map
from epochtrain.data.buffer import ReplayBuffer
from epochtrain.data.collector import Actor, Collector

__all__ = [
    "EXTRA_FIELDS",
    "ActResult",
    "Actor",
    "Batch",
    "Collector",
    "Obs",
    "ReplayBuffer",
    "obs_map",
]
