"""DDPG: deep deterministic policy gradient for continuous (Box) actions.

Paper: Lillicrap et al. 2016, "Continuous control with deep reinforcement learning"
(ICLR), built on Silver et al. 2014, "Deterministic Policy Gradient Algorithms" (ICML).
As in Stable-Baselines3 and CleanRL (and the TD3 paper's "our DDPG"), exploration is
Gaussian rather than Ornstein-Uhlenbeck, and the networks have no batch normalisation.

Data flow: the collector calls :meth:`DDPG.act` (actor + Gaussian noise, clipped to the
Box); the off-policy trainer samples minibatches from the replay buffer and calls
:meth:`DDPG.learn` once per gradient step:

1. critic: minimise ``(Q(s, a) - (r + gamma * (1 - terminated) * Q'(s', pi'(s'))))^2``;
2. actor: minimise ``-Q(s, pi(s))``;
3. targets: ``theta' <- tau * theta + (1 - tau) * theta'`` for actor and critic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch

from epochtrain.algorithms.base import resolve_config
from epochtrain.algorithms.deterministic_ac import DeterministicActorCritic
from epochtrain.config import Config, param
from epochtrain.data.batch import Batch
from epochtrain.stats import SequenceSummaryStats, TrainingStats

__all__ = ["DDPG", "DDPGConfig", "DDPGTrainingStats"]


@dataclass(kw_only=True)
class DDPGTrainingStats(TrainingStats):
    """Stats of deterministic actor-critic gradient steps.

    ``loss_critic`` is the TD mean squared error (summed over the critics of TD3),
    ``loss_actor`` the actor objective ``-Q_1(s, pi(s))`` on the same batch (TD3 and
    TD3+BC: measured on the delayed actor steps only), ``q_mean`` the mean ``Q_1(s, a)`` of
    the stored actions.
    """

    loss_actor: SequenceSummaryStats
    loss_critic: SequenceSummaryStats
    q_mean: SequenceSummaryStats


@dataclass(frozen=True, kw_only=True)
class DDPGConfig(Config):
    """DDPG settings, the TD3 paper's "our DDPG" (Fujimoto et al. 2018): lr 3e-4,
    256x256 nets, tau 0.005, gamma 0.99, Gaussian exploration noise 0.1."""

    hidden: tuple[int, ...] = param((256, 256), ge=1)
    """Hidden layer sizes of the actor and critic MLPs."""
    actor_lr: float = param(3e-4, gt=0)
    """Adam learning rate of the actor."""
    critic_lr: float = param(3e-4, gt=0)
    """Adam learning rate of the critics."""
    gamma: float = param(0.99, ge=0, le=1)
    """Discount factor."""
    tau: float = param(0.005, gt=0, le=1)
    """Polyak rate of the target networks (1: hard copy)."""
    exploration_noise: float = param(0.1, ge=0)
    """Std of the Gaussian exploration noise, as a fraction of the action half-range."""
    max_grad_norm: float | None = param(None, gt=0, allow_inf=True)
    """Clip the gradient norm to this (None: no clipping; inf: no clipping, but a NaN or inf
    gradient norm is still caught)."""
    n_step: int = param(1, ge=1)
    """Learn from n-step returns (1: one-step targets): the critics' target sums the next
    n rewards and bootstraps from the n-th next state, with no off-policy correction, as
    Tianshou's n_step_return_horizon and D4PG."""


class DDPG(DeterministicActorCritic[DDPGTrainingStats]):
    """DDPG for a 1-d bounded Box action space: one critic, actor step every step.

    ``exploration_noise`` is the std of the Gaussian noise added when exploring, as a
    fraction of the action half-range; deterministic acting adds none.
    """

    config: DDPGConfig

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: DDPGConfig | None = None,
        *,
        device: str | torch.device = "cpu",
        **overrides: object,
    ) -> None:
        cfg = resolve_config(DDPGConfig, config, overrides)
        super().__init__(
            observation_space,
            action_space,
            cfg,
            n_critics=1,
            policy_noise=0.0,
            noise_clip=0.0,
            policy_delay=1,
            device=device,
        )

    def learn(self, batch: Batch) -> DDPGTrainingStats:
        """One critic step, one actor step and a Polyak update of both targets."""
        batch, obs, act, obs_next = self.prepare(batch)
        loss_critic, q_mean = self.update_critics(batch, obs, act, obs_next)
        loss_actor = self.update_actor(-self.actor_q(obs).mean())
        return DDPGTrainingStats(
            loss_actor=SequenceSummaryStats.single(loss_actor),
            loss_critic=SequenceSummaryStats.single(loss_critic),
            q_mean=q_mean,
        )
