"""Reference algorithms; each module implements one paper."""

from epochtrain.algorithms.base import Policy
from epochtrain.algorithms.bc import BC, BCTrainingStats
from epochtrain.algorithms.dqn import DQN, DQNTrainingStats
from epochtrain.algorithms.ppo import PPO, PPOTrainingStats

__all__ = [
    "BC",
    "DQN",
    "PPO",
    "BCTrainingStats",
    "DQNTrainingStats",
    "PPOTrainingStats",
    "Policy",
]
