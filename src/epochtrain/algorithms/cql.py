"""CQL: conservative Q-learning on SAC, for offline learning from a fixed dataset.

Paper: Kumar, Zhou, Tucker & Levine 2020, "Conservative Q-Learning for Offline
Reinforcement Learning" (NeurIPS), the CQL(H) variant on soft actor-critic. Each critic's
soft TD loss gets the penalty ``cql_alpha * (logsumexp_a Q(s, a) - Q(s, a_data))``, which
pushes Q down on actions the policy may pick and up on the dataset's actions. For Box
actions the log-sum-exp is estimated by importance sampling, as the authors' code and
d3rlpy do: ``n_action_samples`` uniform actions (density ``2^-|A|`` on the (-1, 1)
scale), as many policy actions at ``s`` and at ``s'`` (each weighted by its
log-probability), all evaluated at ``s``. For Discrete actions it is exact. With
``lagrange_threshold`` set, a Lagrange multiplier on the penalty is tuned by dual gradient
descent so that ``cql_alpha * penalty`` stays near that threshold (the paper's
CQL-Lagrange, ``target_action_gap`` in the authors' code).

Data flow: the offline trainer samples minibatches from the dataset buffer and calls
:meth:`CQL.learn` once per gradient step: one critic step on TD loss plus penalty (and
one Lagrange step), then SAC's actor and temperature steps and the target update
(:class:`~epochtrain.algorithms.sac.SACBase`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import torch
from torch import Tensor, nn

from epochtrain.algorithms.base import TrainerKind, resolve_config
from epochtrain.algorithms.sac import SACBase, SACConfig, SACTrainingStats
from epochtrain.config import param
from epochtrain.config_ignored import IgnoredSetting
from epochtrain.data.batch import Batch
from epochtrain.stats import SequenceSummaryStats

__all__ = ["CQL", "CQLConfig", "CQLTrainingStats"]


@dataclass(kw_only=True)
class CQLTrainingStats(SACTrainingStats):
    """Stats of CQL gradient steps: SAC's, plus the conservative part of the critic loss.

    ``loss_critic`` is the soft TD loss alone; ``cql_penalty`` is the mean over both
    critics of ``logsumexp_a Q(s, a) - Q(s, a_data)``; ``loss_cql`` the term added to the
    critic loss (``cql_alpha * penalty`` summed over both critics; with Lagrange
    ``multiplier * (cql_alpha * penalty - lagrange_threshold)``); ``cql_weight`` the
    penalty's effective weight in the step (``cql_alpha``, times the multiplier).
    """

    loss_cql: SequenceSummaryStats
    cql_penalty: SequenceSummaryStats
    cql_weight: SequenceSummaryStats


@dataclass(frozen=True, kw_only=True)
class CQLConfig(SACConfig):
    """CQL(H) settings (Kumar et al. 2020; as d3rlpy): actor lr 1e-4, critic lr 3e-4,
    temperature lr 1e-4, penalty weight 5, 10 sampled actions of each kind."""

    actor_lr: float = param(1e-4, gt=0)
    """Adam learning rate of the actor."""
    alpha_lr: float = param(1e-4, gt=0)
    """Adam learning rate of the temperature."""
    cql_alpha: float = param(5.0, ge=0)
    """Weight of the conservative penalty."""
    n_action_samples: int = param(10, ge=1, actions="box")
    """Box actions: actions sampled of each kind (uniform, current policy, next policy) per
    state (Discrete actions: the log-sum-exp is exact)."""
    lagrange_threshold: float | None = None
    """Lagrange variant: the penalty target (None: fixed weight cql_alpha)."""
    cql_weight_lr: float = param(1e-4, gt=0)
    """Adam learning rate of the Lagrange multiplier (with lagrange_threshold)."""

    def ignored_settings(self) -> list[IgnoredSetting]:
        """SAC's, and ``cql_weight_lr`` without ``lagrange_threshold``."""
        found = super().ignored_settings()
        if self.lagrange_threshold is None:
            why = "lagrange_threshold is None, so the penalty's weight is cql_alpha, with no "
            why += "Lagrange multiplier to train"
            fix = "set lagrange_threshold to use it, or drop cql_weight_lr"
            found += self.ignored_if_set("cql_weight_lr", why, fix)
        return found


class CQL(SACBase[CQLTrainingStats]):
    """CQL(H) on SAC (see :class:`~epochtrain.algorithms.sac.SACBase` for SAC's settings).

    Defaults follow the paper and d3rlpy: actor lr 1e-4, critic lr 3e-4, temperature lr
    1e-4, ``cql_alpha`` 5, 10 sampled actions of each kind. ``lagrange_threshold``
    (``None``: fixed weight ``cql_alpha``) turns on the Lagrange variant: the weighted
    penalty is multiplied by ``exp(log_cql_weight)``, trained at ``cql_weight_lr``, and
    ``lagrange_threshold`` is compared with ``cql_alpha * penalty`` (the authors'
    ``target_action_gap``; d3rlpy's ``alpha_threshold`` t at weight w is ``w * t`` here).
    Unlike d3rlpy, the Lagrange variant is off unless ``lagrange_threshold`` is set, and
    the TD target keeps SAC's entropy term (d3rlpy: ``soft_q_backup=False``).
    """

    trainer_kinds: ClassVar[frozenset[TrainerKind]] = frozenset({"offline"})
    config: CQLConfig

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: CQLConfig | None = None,
        *,
        device: str | torch.device = "cpu",
        **overrides: object,
    ) -> None:
        cfg = resolve_config(CQLConfig, config, overrides)
        super().__init__(observation_space, action_space, cfg, device=device)
        cql_alpha, n_action_samples = cfg.cql_alpha, cfg.n_action_samples
        lagrange_threshold, cql_weight_lr = cfg.lagrange_threshold, cfg.cql_weight_lr
        self.cql_alpha = cql_alpha
        self.n_action_samples = n_action_samples
        self.lagrange_threshold = lagrange_threshold
        lagrange = lagrange_threshold is not None
        self.log_cql_weight = nn.Parameter(
            torch.zeros((), device=self.device), requires_grad=lagrange
        )
        """Log of the Lagrange multiplier on the penalty (stays 0 without Lagrange)."""
        if lagrange:
            self.optimizers["cql_weight"] = torch.optim.Adam(
                [self.log_cql_weight], lr=cql_weight_lr
            )

    def cql_penalty(self, batch: Batch, q_data: Tensor) -> Tensor:
        """Per critic ``mean_s[logsumexp_a Q(s, a) - Q(s, a_data)]``, shaped ``[2]``."""
        obs = self.obs_input(batch.obs)
        if self.discrete:
            return (self.q_all(obs).logsumexp(dim=-1) - q_data).mean(dim=-1)
        n, k = obs.shape[0], self.n_action_samples
        obs_rep = obs.repeat_interleave(k, dim=0)
        with torch.no_grad():
            act_now, logp_now = self.sample(obs_rep)
            act_next, logp_next = self.sample(
                self.obs_input(batch.obs_next).repeat_interleave(k, dim=0)
            )
        act_random = torch.rand_like(act_now) * 2.0 - 1.0
        log_density_random = -self.act_dim * math.log(2.0)
        acts = torch.cat([act_random, act_now, act_next])
        log_density = torch.cat(
            [torch.full_like(logp_now, log_density_random), logp_now, logp_next]
        )
        q = self.q_values(obs_rep.repeat(3, *([1] * (obs.dim() - 1))), acts) - log_density
        # [2, 3 * n * k] -> [2, n, 3 * k]: every sample of one state on one row
        q = q.reshape(2, 3, n, k).permute(0, 2, 1, 3).reshape(2, n, 3 * k)
        return (q.logsumexp(dim=-1) - q_data).mean(dim=-1)

    def learn(self, batch: Batch) -> CQLTrainingStats:
        """One critic step (TD loss + penalty), Lagrange, actor and temperature steps."""
        batch = batch.to(self.device)
        loss_td, q = self.critic_td_loss(batch)
        penalty = self.cql_penalty(batch, q)
        weighted = self.cql_alpha * penalty
        multiplier = self.log_cql_weight.detach().exp().clamp(max=1e6)
        if self.lagrange_threshold is None:
            loss_cql = weighted.sum()
        else:
            loss_cql = multiplier * (weighted - self.lagrange_threshold).sum()
        # the penalty is added to each critic's full MSE (the authors' code, d3rlpy);
        # critic_td_loss is half their sum (SAC's convention), so it counts twice here
        self.optimize("critic", 2.0 * loss_td + loss_cql)
        if self.lagrange_threshold is not None:
            # dual ascent: the multiplier grows while the weighted penalty exceeds the threshold
            gap = (weighted.detach() - self.lagrange_threshold).sum()
            self.optimize("cql_weight", -self.log_cql_weight.exp().clamp(max=1e6) * gap)
        loss_actor, loss_alpha, alpha, entropy = self.actor_alpha_step(self.obs_input(batch.obs))
        self.update_targets()
        single = SequenceSummaryStats.single
        return CQLTrainingStats(
            loss_critic=single(loss_td.item()),
            loss_actor=single(loss_actor),
            loss_alpha=single(loss_alpha),
            alpha=single(alpha),
            entropy=single(entropy),
            q_mean=single(q.detach().mean().item()),
            loss_cql=single(loss_cql.item()),
            cql_penalty=single(penalty.detach().mean().item()),
            cql_weight=single(self.cql_alpha * float(multiplier)),
        )
