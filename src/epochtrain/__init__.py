"""epochtrain: iterator-style epoch trainers for deep reinforcement learning.

``for stats in trainer:`` runs one epoch per step and yields a typed ``EpochStats``;
``trainer.run()`` trains to the end; ``zip(trainer_a, trainer_b)`` compares runs in
lock-step. ``make_trainer(algo, env_id)`` builds a ready-to-run trainer.

``import epochtrain`` is cheap: each name of ``__all__`` is imported from its submodule on
first use (``from epochtrain import PPO``, ``epochtrain.PPO``: PEP 562), and so is a
submodule (``epochtrain.trainer``). Most of them import torch, which takes a second or
more: were it imported with the package, a Ctrl-C then would end ``python -m epochtrain``
with a traceback before its code could run, instead of the command's one line and 130.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names of _EXPORTS, for type checkers and editors ("X as X" exports X)
    from epochtrain.algorithms import A2C as A2C
    from epochtrain.algorithms import BC as BC
    from epochtrain.algorithms import CQL as CQL
    from epochtrain.algorithms import DDPG as DDPG
    from epochtrain.algorithms import DQN as DQN
    from epochtrain.algorithms import PG as PG
    from epochtrain.algorithms import PPO as PPO
    from epochtrain.algorithms import SAC as SAC
    from epochtrain.algorithms import TD3 as TD3
    from epochtrain.algorithms import TD3BC as TD3BC
    from epochtrain.algorithms import A2CConfig as A2CConfig
    from epochtrain.algorithms import A2CTrainingStats as A2CTrainingStats
    from epochtrain.algorithms import BCConfig as BCConfig
    from epochtrain.algorithms import BCTrainingStats as BCTrainingStats
    from epochtrain.algorithms import CQLConfig as CQLConfig
    from epochtrain.algorithms import CQLTrainingStats as CQLTrainingStats
    from epochtrain.algorithms import DDPGConfig as DDPGConfig
    from epochtrain.algorithms import DDPGTrainingStats as DDPGTrainingStats
    from epochtrain.algorithms import DQNConfig as DQNConfig
    from epochtrain.algorithms import DQNTrainingStats as DQNTrainingStats
    from epochtrain.algorithms import PGConfig as PGConfig
    from epochtrain.algorithms import PGTrainingStats as PGTrainingStats
    from epochtrain.algorithms import Policy as Policy
    from epochtrain.algorithms import PPOConfig as PPOConfig
    from epochtrain.algorithms import PPOTrainingStats as PPOTrainingStats
    from epochtrain.algorithms import SACConfig as SACConfig
    from epochtrain.algorithms import SACTrainingStats as SACTrainingStats
    from epochtrain.algorithms import TD3BCConfig as TD3BCConfig
    from epochtrain.algorithms import TD3BCTrainingStats as TD3BCTrainingStats
    from epochtrain.algorithms import TD3Config as TD3Config
    from epochtrain.algorithms import TD3TrainingStats as TD3TrainingStats
    from epochtrain.checkpoint import CheckpointError as CheckpointError
    from epochtrain.checkpoint import CheckpointVersionWarning as CheckpointVersionWarning
    from epochtrain.config import Config as Config
    from epochtrain.data import Batch as Batch
    from epochtrain.data import Collector as Collector
    from epochtrain.data import PrioritizedReplayBuffer as PrioritizedReplayBuffer
    from epochtrain.data import ReplayBuffer as ReplayBuffer
    from epochtrain.factory import UnusedSettingWarning as UnusedSettingWarning
    from epochtrain.factory import make_trainer as make_trainer
    from epochtrain.logger import BaseLogger as BaseLogger
    from epochtrain.logger import CSVLogger as CSVLogger
    from epochtrain.logger import JSONLLogger as JSONLLogger
    from epochtrain.logger import LazyLogger as LazyLogger
    from epochtrain.logger import MultiLogger as MultiLogger
    from epochtrain.logger import TensorboardLogger as TensorboardLogger
    from epochtrain.presets import PRESETS as PRESETS
    from epochtrain.presets import Preset as Preset
    from epochtrain.registry import ALGORITHMS as ALGORITHMS
    from epochtrain.registry import register as register
    from epochtrain.spec import BufferSpec as BufferSpec
    from epochtrain.spec import LogSpec as LogSpec
    from epochtrain.spec import RunSpec as RunSpec
    from epochtrain.stats import CollectStats as CollectStats
    from epochtrain.stats import EpochStats as EpochStats
    from epochtrain.stats import InfoStats as InfoStats
    from epochtrain.stats import MovAvg as MovAvg
    from epochtrain.stats import RunState as RunState
    from epochtrain.stats import SequenceSummaryStats as SequenceSummaryStats
    from epochtrain.stats import TrainingStats as TrainingStats
    from epochtrain.trainer import BaseTrainer as BaseTrainer
    from epochtrain.trainer import BatchSubSampler as BatchSubSampler
    from epochtrain.trainer import ClearCudaCache as ClearCudaCache
    from epochtrain.trainer import EarlyStopping as EarlyStopping
    from epochtrain.trainer import GradClip as GradClip
    from epochtrain.trainer import LogScalar as LogScalar
    from epochtrain.trainer import LRScheduler as LRScheduler
    from epochtrain.trainer import ObservationNormalizer as ObservationNormalizer
    from epochtrain.trainer import OfflineParams as OfflineParams
    from epochtrain.trainer import OfflineTrainer as OfflineTrainer
    from epochtrain.trainer import OffpolicyParams as OffpolicyParams
    from epochtrain.trainer import OffpolicyTrainer as OffpolicyTrainer
    from epochtrain.trainer import OnpolicyParams as OnpolicyParams
    from epochtrain.trainer import OnpolicyTrainer as OnpolicyTrainer
    from epochtrain.trainer import RewardNormalizer as RewardNormalizer
    from epochtrain.trainer import TargetNetUpdater as TargetNetUpdater
    from epochtrain.trainer import TrainerHook as TrainerHook
    from epochtrain.trainer import TrainerParams as TrainerParams
    from epochtrain.trainer import UTDRatio as UTDRatio
    from epochtrain.trainer import VideoRecorder as VideoRecorder

__version__ = "0.1.0"

_EXPORTS: dict[str, tuple[str, ...]] = {
    "algorithms": (
        "A2C",
        "BC",
        "CQL",
        "DDPG",
        "DQN",
        "PG",
        "PPO",
        "SAC",
        "TD3",
        "TD3BC",
        "A2CConfig",
        "A2CTrainingStats",
        "BCConfig",
        "BCTrainingStats",
        "CQLConfig",
        "CQLTrainingStats",
        "DDPGConfig",
        "DDPGTrainingStats",
        "DQNConfig",
        "DQNTrainingStats",
        "PGConfig",
        "PGTrainingStats",
        "Policy",
        "PPOConfig",
        "PPOTrainingStats",
        "SACConfig",
        "SACTrainingStats",
        "TD3BCConfig",
        "TD3BCTrainingStats",
        "TD3Config",
        "TD3TrainingStats",
    ),
    "checkpoint": ("CheckpointError", "CheckpointVersionWarning"),
    "config": ("Config",),
    "data": ("Batch", "Collector", "PrioritizedReplayBuffer", "ReplayBuffer"),
    "factory": ("UnusedSettingWarning", "make_trainer"),
    "logger": (
        "BaseLogger",
        "CSVLogger",
        "JSONLLogger",
        "LazyLogger",
        "MultiLogger",
        "TensorboardLogger",
    ),
    "presets": ("PRESETS", "Preset"),
    "registry": ("ALGORITHMS", "register"),
    "spec": ("BufferSpec", "LogSpec", "RunSpec"),
    "stats": (
        "CollectStats",
        "EpochStats",
        "InfoStats",
        "MovAvg",
        "RunState",
        "SequenceSummaryStats",
        "TrainingStats",
    ),
    "trainer": (
        "BaseTrainer",
        "BatchSubSampler",
        "ClearCudaCache",
        "EarlyStopping",
        "GradClip",
        "LogScalar",
        "LRScheduler",
        "ObservationNormalizer",
        "OfflineParams",
        "OfflineTrainer",
        "OffpolicyParams",
        "OffpolicyTrainer",
        "OnpolicyParams",
        "OnpolicyTrainer",
        "RewardNormalizer",
        "TargetNetUpdater",
        "TrainerHook",
        "TrainerParams",
        "UTDRatio",
        "VideoRecorder",
    ),
}
"""The public names by the submodule that defines them: what ``__getattr__`` imports."""

_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted([*_MODULE_OF, "__version__"])


def _import_on_first_use(name: str) -> object:
    """Module ``__getattr__`` (PEP 562): a public name from its submodule, or a submodule.

    The value is then stored in the package's namespace: a later use does not come here.
    """
    module = _MODULE_OF.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value
    # `epochtrain.trainer` after `import epochtrain` works, as when the package imported it;
    # not for a dunder (`__main__` would run the command) nor a module that does not exist
    submodule = name.isidentifier() and not name.startswith("__")
    if submodule and importlib.util.find_spec(f"{__name__}.{name}"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The names imported so far and every public one."""
    return sorted({*globals(), *__all__})


if not TYPE_CHECKING:  # mypy would give its return type to any misspelt name
    __getattr__ = _import_on_first_use
