"""A2C: advantage actor-critic, the synchronous variant of A3C.

Paper: Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning" (ICML).
Instead of asynchronous workers, several envs step in lock-step and every short rollout
(``n_steps`` rows of ``num_envs`` envs) gives one gradient step of
``-mean(logp * adv) + vf_coef * MSE(V, ret) - ent_coef * entropy``. The advantages are
n-step returns bootstrapped from ``V`` at the rollout end (``gae_lambda=1``, as the paper),
or GAE (Schulman et al. 2016) with ``gae_lambda < 1``. Implementation follows
Stable-Baselines3's A2C: separate actor and critic MLPs with orthogonal init, RMSprop with
``alpha=0.99, eps=1e-5``, gradient-norm clipping at 0.5, no advantage normalisation.

Data flow: the collector calls :meth:`A2C.act`; the on-policy trainer
hands the ``[time, env]`` rollout to :meth:`A2C.process_rollout` (values, advantages,
returns), then calls :meth:`A2C.learn` once on the whole rollout (``repeat_per_collect=1``,
``batch_size=None``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F

from epochtrain.algorithms.actor_critic import (
    ActorCriticPolicy,
    AdvantageConfig,
    explained_variance,
)
from epochtrain.algorithms.base import resolve_config
from epochtrain.algorithms.pg import PGTrainingStats
from epochtrain.config import param
from epochtrain.data.batch import Batch
from epochtrain.errors import NonFiniteError
from epochtrain.stats import SequenceSummaryStats

__all__ = ["A2C", "A2CConfig", "A2CTrainingStats"]


@dataclass(kw_only=True)
class A2CTrainingStats(PGTrainingStats):
    """Stats of actor-critic gradient steps.

    Adds to :class:`PGTrainingStats`: ``loss_entropy`` (minus the mean entropy, weighted
    by ``ent_coef`` in ``loss``) and ``explained_variance`` of the returns by the critic
    (0 when the returns of the batch are constant).
    """

    loss_entropy: SequenceSummaryStats
    explained_variance: SequenceSummaryStats


@dataclass(frozen=True, kw_only=True)
class A2CConfig(AdvantageConfig):
    """A2C settings: Stable-Baselines3's defaults (lr 7e-4, gamma 0.99, GAE lambda 1,
    value weight 0.5, no entropy bonus, gradient norm 0.5, RMSprop alpha 0.99 eps 1e-5,
    no advantage normalisation)."""

    lr: float = param(7e-4, gt=0)
    """RMSprop learning rate."""
    gae_lambda: float = param(1.0, ge=0, le=1)
    """GAE lambda (1: n-step returns bootstrapped at the rollout's end, as the paper)."""
    normalize_advantage: bool = False
    """Scale each batch's advantages to mean 0 and std 1."""
    rms_alpha: float = param(0.99, gt=0, lt=1)
    """RMSprop smoothing constant."""
    rms_eps: float = param(1e-5, gt=0)
    """RMSprop epsilon."""


class A2C(ActorCriticPolicy[A2CTrainingStats]):
    """Synchronous advantage actor-critic for Discrete or Box action spaces.

    Defaults are Stable-Baselines3's (lr 7e-4, gamma 0.99, ``gae_lambda`` 1, ``vf_coef``
    0.5, ``ent_coef`` 0, gradient norm 0.5); ``lr_anneal_steps`` decays the learning rate
    linearly to zero over that many env steps (``None``: constant).
    """

    config: A2CConfig

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: A2CConfig | None = None,
        *,
        device: str | torch.device = "cpu",
        **overrides: object,
    ) -> None:
        cfg = resolve_config(A2CConfig, config, overrides)
        super().__init__(
            observation_space,
            action_space,
            cfg,
            use_critic=True,
            gae_lambda=cfg.gae_lambda,
            device=device,
        )
        self.ent_coef = cfg.ent_coef
        self.optimizers["a2c"] = torch.optim.RMSprop(
            self.trainable_parameters(), lr=cfg.lr, alpha=cfg.rms_alpha, eps=cfg.rms_eps
        )

    def learn(self, batch: Batch) -> A2CTrainingStats:
        """One gradient step of the actor-critic loss on ``batch`` (usually a whole rollout)."""
        batch = batch.to(self.device)
        obs = self.obs_input(batch.obs)
        adv, ret = self.advantages(batch), batch.ret
        assert ret is not None
        logp, entropy = self.log_prob_entropy(obs, batch.act)
        loss_actor = -(logp * adv).mean()
        value = self.value(obs)
        loss_critic = F.mse_loss(value, ret)
        loss_entropy = -entropy.mean()
        loss = loss_actor + self.vf_coef * loss_critic + self.ent_coef * loss_entropy
        try:
            loss_value = self.optimize("a2c", loss, max_grad_norm=self.max_grad_norm, isolated=True)
        except NonFiniteError:
            self._refuse_logp_of_loss(batch, logp)  # a degenerate distribution, named
            raise
        single = SequenceSummaryStats.single
        return A2CTrainingStats(
            loss=single(loss_value),
            loss_actor=single(loss_actor.item()),
            loss_critic=single(loss_critic.item()),
            loss_entropy=single(loss_entropy.item()),
            explained_variance=single(explained_variance(ret, value.detach())),
            entropy=single(-loss_entropy.item()),
        )
