"""Reference algorithms; each module implements one paper."""

from epochtrain.algorithms.a2c import A2C, A2CTrainingStats
from epochtrain.algorithms.actor_critic import ActorCriticPolicy
from epochtrain.algorithms.base import Policy
from epochtrain.algorithms.bc import BC, BCTrainingStats
from epochtrain.algorithms.cql import CQL, CQLTrainingStats
from epochtrain.algorithms.ddpg import DDPG, DDPGTrainingStats
from epochtrain.algorithms.deterministic_ac import DeterministicActorCritic
from epochtrain.algorithms.dqn import DQN, DQNTrainingStats
from epochtrain.algorithms.pg import PG, PGTrainingStats
from epochtrain.algorithms.ppo import PPO, PPOTrainingStats
from epochtrain.algorithms.sac import SAC, SACTrainingStats
from epochtrain.algorithms.td3 import TD3, TD3TrainingStats
from epochtrain.algorithms.td3bc import TD3BC, TD3BCTrainingStats

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
    "A2CTrainingStats",
    "ActorCriticPolicy",
    "BCTrainingStats",
    "CQLTrainingStats",
    "DDPGTrainingStats",
    "DQNTrainingStats",
    "DeterministicActorCritic",
    "PGTrainingStats",
    "PPOTrainingStats",
    "Policy",
    "SACTrainingStats",
    "TD3BCTrainingStats",
    "TD3TrainingStats",
]
