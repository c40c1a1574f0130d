"""Data layer: Batch, the replay buffers and Collector (imports nothing else from epochtrain)."""

from epochtrain.data.batch import EXTRA_FIELDS, ActResult, Batch, Obs, obs_map
from epochtrain.data.buffer import ReplayBuffer
from epochtrain.data.collector import Actor, Collector
from epochtrain.data.minari import load_minari_buffer, write_minari
from epochtrain.data.prioritized import PrioritizedReplayBuffer
from epochtrain.data.sum_tree import SumTree

__all__ = [
    "EXTRA_FIELDS",
    "ActResult",
    "Actor",
    "Batch",
    "Collector",
    "Obs",
    "PrioritizedReplayBuffer",
    "ReplayBuffer",
    "SumTree",
    "load_minari_buffer",
    "obs_map",
    "write_minari",
]
