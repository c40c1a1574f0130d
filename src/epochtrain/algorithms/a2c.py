"""A2C: advantage actor-critic, the synchronous variant of A3C.

Paper: Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning" (ICML).
Instead of asynchronous workers, several envs step in lock-step and every short rollout
(``n_steps`` rows of ``num_envs`` envs) gives one gradient step of
``-mean(logp * adv) + vf_coef * MSE(V, ret) - ent_coef * entropy``. The advantages are
n-step returns bootstrapped from ``V`` at the rollout end (``gae_lambda=1``, as the paper),
or GAE (Schulman et al. 2016) with ``gae_lambda < 1``. Implementation follows
Stable-Baselines3's A2C: separate actor and critic MLPs with orthogonal init, RMSprop with
``alpha=0.99, eps=1e-5``, gradient-norm clipping at 0.5, no advantage normalisation.

Data flow: the collector calls :meth:`A2C.act` (stores ``logp``); the on-policy trainer
hands the ``[time, env]`` rollout to :meth:`A2C.process_rollout` (values, advantages,
returns), then calls :meth:`A2C.learn` once on the whole rollout (``repeat_per_collect=1``,
``batch_size=None``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F

from epochtrain.algorithms.actor_critic import (
    ActorCriticPolicy,
    explained_variance,
    obs_tensor,
)
from epochtrain.algorithms.pg import PGTrainingStats
from epochtrain.data.batch import Batch
from epochtrain.stats import SequenceSummaryStats

__all__ = ["A2C", "A2CTrainingStats"]


@dataclass(kw_only=True)
class A2CTrainingStats(PGTrainingStats):
    """Stats of actor-critic gradient steps.

    Adds to :class:`PGTrainingStats`: ``loss_entropy`` (minus the mean entropy, weighted
    by ``ent_coef`` in ``loss``) and ``explained_variance`` of the returns by the critic
    (0 when the returns of the batch are constant).
    """

    loss_entropy: SequenceSummaryStats
    explained_variance: SequenceSummaryStats


class A2C(ActorCriticPolicy[A2CTrainingStats]):
    """Synchronous advantage actor-critic for Discrete or Box action spaces.

    Defaults are Stable-Baselines3's (lr 7e-4, gamma 0.99, ``gae_lambda`` 1, ``vf_coef``
    0.5, ``ent_coef`` 0, gradient norm 0.5); ``lr_anneal_steps`` decays the learning rate
    linearly to zero over that many env steps (``None``: constant).
    """

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        *,
        lr: float = 7e-4,
        gamma: float = 0.99,
        gae_lambda: float = 1.0,
        vf_coef: float = 0.5,
        ent_coef: float = 0.0,
        max_grad_norm: float | None = 0.5,
        normalize_advantage: bool = False,
        rms_alpha: float = 0.99,
        rms_eps: float = 1e-5,
        hidden: Sequence[int] = (64, 64),
        lr_anneal_steps: int | None = None,
        log_std_init: float = 0.0,
        device: str | torch.device = "cpu",
    ) -> None:
        if not 0.0 < rms_alpha < 1.0:
            raise ValueError(f"rms_alpha must be in (0, 1), got {rms_alpha!r}")
        if not rms_eps > 0:
            raise ValueError(f"rms_eps must be positive, got {rms_eps!r}")
        super().__init__(
            observation_space,
            action_space,
            use_critic=True,
            lr=lr,
            gamma=gamma,
            gae_lambda=gae_lambda,
            vf_coef=vf_coef,
            max_grad_norm=max_grad_norm,
            normalize_advantage=normalize_advantage,
            hidden=hidden,
            lr_anneal_steps=lr_anneal_steps,
            log_std_init=log_std_init,
            device=device,
        )
        self.ent_coef = ent_coef
        self.optimizers["a2c"] = torch.optim.RMSprop(
            self.trainable_parameters(), lr=lr, alpha=rms_alpha, eps=rms_eps
        )

    def learn(self, batch: Batch) -> A2CTrainingStats:
        """One gradient step of the actor-critic loss on ``batch`` (usually a whole rollout)."""
        batch = batch.to(self.device)
        obs = obs_tensor(batch.obs)
        adv, ret = self.advantages(batch), batch.ret
        assert ret is not None
        logp, entropy = self.log_prob_entropy(obs, batch.act)
        loss_actor = -(logp * adv).mean()
        value = self.value(obs)
        loss_critic = F.mse_loss(value, ret)
        loss_entropy = -entropy.mean()
        loss = loss_actor + self.vf_coef * loss_critic + self.ent_coef * loss_entropy
        self.optimize("a2c", loss, max_grad_norm=self.max_grad_norm)
        single = SequenceSummaryStats.single
        return A2CTrainingStats(
            loss=single(loss.item()),
            loss_actor=single(loss_actor.item()),
            loss_critic=single(loss_critic.item()),
            loss_entropy=single(loss_entropy.item()),
            explained_variance=single(explained_variance(ret, value.detach())),
            entropy=single(-loss_entropy.item()),
        )
