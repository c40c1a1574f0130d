"""Reference algorithms; each module implements one paper: its config, policy and stats."""

from epochtrain.algorithms.a2c import A2C, A2CConfig, A2CTrainingStats
from epochtrain.algorithms.actor_critic import (
    ActorCriticConfig,
    ActorCriticPolicy,
    AdvantageConfig,
)
from epochtrain.algorithms.base import (
    TRAINER_KINDS,
    NStepReplay,
    Policy,
    TrainerKind,
    resolve_config,
)
from epochtrain.algorithms.bc import BC, BCConfig, BCTrainingStats
from epochtrain.algorithms.cql import CQL, CQLConfig, CQLTrainingStats
from epochtrain.algorithms.ddpg import DDPG, DDPGConfig, DDPGTrainingStats
from epochtrain.algorithms.deterministic_ac import DeterministicActorCritic
from epochtrain.algorithms.dqn import DQN, DQNConfig, DQNTrainingStats
from epochtrain.algorithms.pg import PG, PGConfig, PGTrainingStats
from epochtrain.algorithms.ppo import PPO, PPOConfig, PPOTrainingStats
from epochtrain.algorithms.priorities import TDPriorities
from epochtrain.algorithms.sac import SAC, SACBase, SACConfig, SACTrainingStats
from epochtrain.algorithms.td3 import TD3, TD3Config, TD3TrainingStats
from epochtrain.algorithms.td3bc import TD3BC, TD3BCConfig, TD3BCTrainingStats

__all__ = [
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
    "TRAINER_KINDS",
    "A2CConfig",
    "A2CTrainingStats",
    "ActorCriticConfig",
    "ActorCriticPolicy",
    "AdvantageConfig",
    "BCConfig",
    "BCTrainingStats",
    "CQLConfig",
    "CQLTrainingStats",
    "DDPGConfig",
    "DDPGTrainingStats",
    "DQNConfig",
    "DQNTrainingStats",
    "DeterministicActorCritic",
    "NStepReplay",
    "PGConfig",
    "PGTrainingStats",
    "PPOConfig",
    "PPOTrainingStats",
    "Policy",
    "SACBase",
    "SACConfig",
    "SACTrainingStats",
    "TD3BCConfig",
    "TD3BCTrainingStats",
    "TD3Config",
    "TD3TrainingStats",
    "TDPriorities",
    "TrainerKind",
    "resolve_config",
]
