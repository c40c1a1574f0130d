"""PG: REINFORCE, the Monte-Carlo policy gradient, with an optional learned baseline.

Paper: Williams 1992, "Simple Statistical Gradient-Following Algorithms for Connectionist
Reinforcement Learning" (Machine Learning 8). The gradient estimate is
``mean(grad log pi(a_t | s_t) * (G_t - b(s_t)))`` with ``G_t`` the discounted return
from step ``t`` to the end of its episode and ``b`` either zero or a learned ``V(s)``.

Data flow: the collector calls :meth:`PG.act`; the on-policy trainer
hands the whole ``[time, env]`` rollout to :meth:`PG.process_rollout`, which computes
``ret`` (discounted returns per episode) and ``adv = ret - V(obs)`` (``ret`` itself without
a baseline), then calls :meth:`PG.learn` (usually once, on the whole rollout).

Episodes that do not end inside the rollout (the rollout's last row, or a time-limit
truncation): with ``baseline=True`` their return is completed by ``V(obs_next)``, as in
A2C; without a baseline there is no value to bootstrap from, so the return stops there.
Collect whole episodes (``episode_per_collect``) or long rollouts so that such cut
episodes are few.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F

from epochtrain.algorithms.actor_critic import ActorCriticConfig, ActorCriticPolicy
from epochtrain.algorithms.base import resolve_config
from epochtrain.config import param
from epochtrain.config_ignored import IgnoredSetting
from epochtrain.data.batch import Batch
from epochtrain.errors import NonFiniteError
from epochtrain.stats import SequenceSummaryStats, TrainingStats

__all__ = ["PG", "PGConfig", "PGTrainingStats"]


@dataclass(kw_only=True)
class PGTrainingStats(TrainingStats):
    """Stats of policy-gradient steps.

    ``loss_actor`` is ``-mean(logp * adv)``, ``loss_critic`` the value MSE (0 when no
    critic is trained), ``loss`` their weighted sum, ``entropy`` the policy's mean entropy.
    """

    loss: SequenceSummaryStats
    loss_actor: SequenceSummaryStats
    loss_critic: SequenceSummaryStats
    entropy: SequenceSummaryStats


@dataclass(frozen=True, kw_only=True)
class PGConfig(ActorCriticConfig):
    """REINFORCE settings (Adam lr 1e-3, gamma 0.99, a learned baseline, normalised
    advantages, as Tianshou's PG example)."""

    lr: float = param(1e-3, gt=0)
    """Adam learning rate."""
    max_grad_norm: float | None = param(None, gt=0, allow_inf=True)
    """Clip the gradient norm to this (None: no clipping; inf: no clipping, but a NaN or inf
    gradient norm is still caught)."""
    baseline: bool = True
    """Learn ``V(s)`` and subtract it from the returns (False: plain REINFORCE)."""

    def ignored_settings(self) -> list[IgnoredSetting]:
        """``vf_coef`` without a baseline (there is no value loss to weigh)."""
        found = super().ignored_settings()
        if not self.baseline:
            why = "baseline is off, so there is no value loss to weigh"
            found += self.ignored_if_set(
                "vf_coef", why, "turn baseline on to use it, or drop vf_coef"
            )
        return found


class PG(ActorCriticPolicy[PGTrainingStats]):
    """REINFORCE for Discrete or Box actions; ``baseline=True`` learns ``V(s)`` as baseline.

    ``normalize_advantage`` scales the advantages (the returns, without a baseline) of
    each batch to mean 0 and std 1 (Tianshou's ``reward_normalization`` uses running
    statistics of the returns instead). One optimizer
    (Adam) trains the actor and, with a baseline, the critic on
    ``loss_actor + vf_coef * loss_critic``.
    """

    config: PGConfig

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: PGConfig | None = None,
        *,
        device: str | torch.device = "cpu",
        **overrides: object,
    ) -> None:
        cfg = resolve_config(PGConfig, config, overrides)
        super().__init__(
            observation_space,
            action_space,
            cfg,
            use_critic=cfg.baseline,
            gae_lambda=1.0,
            device=device,
        )
        self.baseline = cfg.baseline
        self.optimizers["pg"] = torch.optim.Adam(self.trainable_parameters(), lr=cfg.lr)

    def learn(self, batch: Batch) -> PGTrainingStats:
        """One gradient step of the REINFORCE loss (plus the baseline's MSE) on ``batch``."""
        batch = batch.to(self.device)
        obs = self.obs_input(batch.obs)
        adv, ret = self.advantages(batch), batch.ret
        assert ret is not None
        logp, entropy = self.log_prob_entropy(obs, batch.act)
        loss_actor = -(logp * adv).mean()
        if self.critic is not None:
            loss_critic = F.mse_loss(self.value(obs), ret)
        else:
            loss_critic = torch.zeros((), device=self.device)
        loss = loss_actor + self.vf_coef * loss_critic
        try:
            loss_value = self.optimize("pg", loss, max_grad_norm=self.max_grad_norm, isolated=True)
        except NonFiniteError:
            self._refuse_logp_of_loss(batch, logp)  # a degenerate distribution, named
            raise
        single = SequenceSummaryStats.single
        return PGTrainingStats(
            loss=single(loss_value),
            loss_actor=single(loss_actor.item()),
            loss_critic=single(loss_critic.item()),
            entropy=single(entropy.mean().item()),
        )
