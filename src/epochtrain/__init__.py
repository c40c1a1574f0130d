"""epochtrain: iterator-style epoch trainers for deep reinforcement learning.

``for stats in trainer:`` runs one epoch per step and yields a typed ``EpochStats``;
``trainer.run()`` trains to the end; ``zip(trainer_a, trainer_b)`` compares runs in
lock-step. ``make_trainer(algo, env_id)`` builds a ready-to-run trainer.
"""

from epochtrain.algorithms import (
    BC,
    DQN,
    PPO,
    BCTrainingStats,
    DQNTrainingStats,
    Policy,
    PPOTrainingStats,
)
from epochtrain.data import Batch, Collector, ReplayBuffer
from epochtrain.factory import make_trainer
from epochtrain.logger import (
    BaseLogger,
    CSVLogger,
    JSONLLogger,
    LazyLogger,
    MultiLogger,
    TensorboardLogger,
)
from epochtrain.stats import (
    CollectStats,
    EpochStats,
    InfoStats,
    MovAvg,
    SequenceSummaryStats,
    TrainingStats,
)
from epochtrain.trainer import (
    BaseTrainer,
    OfflineTrainer,
    OffpolicyTrainer,
    OnpolicyTrainer,
)

__version__ = "0.1.0"

__all__ = [
    "BC",
    "DQN",
    "PPO",
    "BCTrainingStats",
    "BaseLogger",
    "BaseTrainer",
    "Batch",
    "CSVLogger",
    "CollectStats",
    "Collector",
    "DQNTrainingStats",
    "EpochStats",
    "InfoStats",
    "JSONLLogger",
    "LazyLogger",
    "MovAvg",
    "MultiLogger",
    "OfflineTrainer",
    "OffpolicyTrainer",
    "OnpolicyTrainer",
    "PPOTrainingStats",
    "Policy",
    "ReplayBuffer",
    "SequenceSummaryStats",
    "TensorboardLogger",
    "TrainingStats",
    "__version__",
    "make_trainer",
]
