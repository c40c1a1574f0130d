"""PPO: proximal policy optimisation with the clipped surrogate objective and GAE.

Papers: Schulman et al. 2017, "Proximal Policy Optimization Algorithms"
(arXiv:1707.06347) for the clipped objective; Schulman et al. 2016, "High-Dimensional
Continuous Control Using Generalized Advantage Estimation" (ICLR) for the advantages.
Implementation details follow Stable-Baselines3 and Huang et al. 2022, "The 37
Implementation Details of PPO": separate actor and critic MLPs with orthogonal init,
per-minibatch advantage normalisation, gradient-norm clipping, Adam with eps 1e-5.

Data flow: the collector calls :meth:`PPO.act`, the on-policy trainer hands the whole
``[time, env]`` rollout to :meth:`PPO.process_rollout` (values, GAE advantages, returns,
and the behaviour policy's ``logp`` of the taken actions, in one batched pass), then calls
:meth:`PPO.learn` on shuffled minibatches.
Discrete actions use a categorical policy; Box actions a Gaussian with a
state-independent log-std (actions are not clipped: wrap the env with
``gymnasium.wrappers.ClipAction`` unless it clips itself, as Pendulum does).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor

from epochtrain.algorithms.a2c import A2CTrainingStats
from epochtrain.algorithms.actor_critic import (
    ActorCriticPolicy,
    AdvantageConfig,
    explained_from,
)
from epochtrain.algorithms.base import resolve_config, size_groups
from epochtrain.config import param
from epochtrain.data.batch import Batch
from epochtrain.errors import NonFiniteError
from epochtrain.stats import DeferredReads, SequenceSummaryStats

__all__ = ["PPO", "PPOConfig", "PPOTrainingStats"]


@dataclass(kw_only=True)
class PPOTrainingStats(A2CTrainingStats):
    """Stats of PPO gradient steps.

    ``loss_actor`` is the clipped surrogate loss; the other fields of
    :class:`A2CTrainingStats` keep their meaning. Adds ``approx_kl``, an estimate of
    KL(old || new), and ``clip_fraction``, the share of clipped ratios.
    """

    approx_kl: SequenceSummaryStats
    clip_fraction: SequenceSummaryStats


@dataclass(frozen=True, kw_only=True)
class PPOConfig(AdvantageConfig):
    """PPO settings: the paper's general ones (Schulman et al. 2017; as Stable-Baselines3's
    defaults): Adam lr 3e-4, gamma 0.99, GAE lambda 0.95, clip 0.2, constant rates.

    The learning rate and clip range decay only when asked (``lr_anneal_steps``,
    ``clip_anneal_steps``); tuned per-env settings are presets (``RunSpec.tuned``).
    """

    clip_range: float = param(0.2, gt=0)
    """Clip range of the probability ratio."""
    clip_anneal_steps: int | None = param(None, ge=1)
    """Decay the clip range linearly to 0 over this many env steps (None: constant)."""


class PPO(ActorCriticPolicy[PPOTrainingStats]):
    """Clipped PPO with GAE for Discrete or Box action spaces.

    ``lr_anneal_steps`` / ``clip_anneal_steps`` (env steps, or ``None`` for constant)
    decay the learning rate and clip range linearly to zero, driven by
    :meth:`set_progress` as in rl-baselines3-zoo's ``lin_`` schedules.
    """

    config: PPOConfig

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: PPOConfig | None = None,
        *,
        device: str | torch.device = "cpu",
        **overrides: object,
    ) -> None:
        cfg = resolve_config(PPOConfig, config, overrides)
        super().__init__(
            observation_space,
            action_space,
            cfg,
            use_critic=True,
            gae_lambda=cfg.gae_lambda,
            device=device,
        )
        self.ent_coef = cfg.ent_coef
        self.clip_range = self.clip_range_now = cfg.clip_range
        self.clip_anneal_steps = cfg.clip_anneal_steps
        self.optimizers["ppo"] = torch.optim.Adam(
            self.trainable_parameters(), lr=cfg.lr, eps=1e-5, fused=True
        )
        self._reads = DeferredReads(_read_diagnostics)

    def set_progress(self, env_step: int) -> None:
        """Anneal the learning rate and clip range for ``env_step`` collected steps."""
        super().set_progress(env_step)
        if self.clip_anneal_steps is not None:
            frac = max(0.0, 1.0 - env_step / self.clip_anneal_steps)
            self.clip_range_now = self.clip_range * frac

    @torch.no_grad()
    def process_rollout(self, batch: Batch) -> Batch:
        """Values, GAE advantages and returns (:class:`ActorCriticPolicy`), plus ``logp``:
        the log-probability of each taken action under the policy that took it.

        The weights are those that acted (nothing learns between collection and this
        call), so one batched pass replaces a log-probability per env step in ``act``.
        """
        batch = super().process_rollout(batch)
        n_time, n_env = batch.shape
        obs = self.obs_input(batch.obs)
        flat_obs = obs.reshape(n_time * n_env, *obs.shape[2:])
        flat_act = batch.act.reshape(n_time * n_env, *batch.act.shape[2:])
        logp = self.log_prob(flat_obs, flat_act).reshape(n_time, n_env)
        # one read-back per update step: a NaN or -inf logp would make every ratio NaN, and
        # the loss, blamed then, would hide that the policy's distribution degenerated
        if not bool(torch.isfinite(logp).all()):
            self._refuse_logp(batch, logp)
        return dataclasses.replace(batch, logp=logp)

    def _refuse_logp(self, batch: Batch, logp: Tensor) -> None:
        """Raise ``NonFiniteError`` naming the first rollout row and sub-env whose taken
        action has a NaN or inf log-probability (rows that are not ``valid`` aside)."""
        bad = ~torch.isfinite(logp)
        if batch.valid is not None:
            bad &= batch.valid.to(bad.device)
        if not bool(bad.any()):
            return
        row, env = (int(i) for i in bad.nonzero()[0].tolist())
        name = type(self).__name__
        value, action = float(logp[row, env]), batch.act[row, env].tolist()
        where = f"logp of the action of sub-env {env} at rollout row {row}"
        raise NonFiniteError(
            f"the log-probability of the action {action} that {name} chose in sub-env {env} "
            f"(row {row} of the rollout) is {value} under that same policy, so PPO's "
            f"probability ratios would be NaN and nothing was learned from the rollout: "
            f"{self._degenerate_cause()}",
            where=where,
        )

    def learn(self, batch: Batch) -> PPOTrainingStats:
        """One gradient step of the clipped PPO loss on a minibatch."""
        batch = batch.to(self.device)
        ret, old_logp = batch.ret, batch.logp
        assert ret is not None and old_logp is not None, (
            "PPO.learn needs a batch with logp that went through process_rollout"
        )
        obs = self.obs_input(batch.obs)
        adv = self.advantages(batch)
        # with ent_coef 0 the entropy is only reported: no gradient flows through it, and
        # leaving the exact 0 term out of the loss changes no bit of the loss or the weights;
        # a categorical policy's entropy is then computed with the other diagnostics, from
        # the log-probabilities kept here
        logp_all: Tensor | None = None
        loss_entropy: Tensor | None = None
        if self.ent_coef == 0 and self.discrete:
            logp_all = self.actor(obs).log_softmax(dim=-1)
            logp = logp_all.gather(-1, batch.act.long().reshape(-1, 1)).squeeze(-1)
        else:
            logp, entropy = self.log_prob_entropy(obs, batch.act, entropy_grad=self.ent_coef != 0)
            loss_entropy = -entropy.mean()
        log_ratio = logp - old_logp
        ratio = log_ratio.exp()
        clip = self.clip_range_now
        surrogate = torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv)
        loss_actor = -surrogate.mean()
        value = self.value(obs)
        loss_critic = F.mse_loss(value, ret)
        loss = loss_actor + self.vf_coef * loss_critic
        if self.ent_coef != 0:
            assert loss_entropy is not None
            loss = loss + self.ent_coef * loss_entropy
        loss_value = self.optimize("ppo", loss, max_grad_norm=self.max_grad_norm, isolated=True)
        # the diagnostics are computed and read back for the whole update step at once
        # (DeferredReads): here only what they are computed from is kept
        record = _StepRecord(
            losses=(loss_actor.detach(), loss_critic.detach()),
            loss_entropy=None if loss_entropy is None else loss_entropy.detach(),
            logp_all=None if logp_all is None else logp_all.detach(),
            log_ratio=log_ratio.detach(),
            clip=clip,
            ret=ret,
            value=value.detach(),
        )
        actor, critic, entropy_loss, kl, clipped, explained, entropy_stat = self._reads.defer(
            record, 7
        )
        return PPOTrainingStats(
            loss=SequenceSummaryStats.single(loss_value),
            loss_actor=actor,
            loss_critic=critic,
            loss_entropy=entropy_loss,
            approx_kl=kl,
            clip_fraction=clipped,
            explained_variance=explained,
            entropy=entropy_stat,
        )

    def get_extra_state(self) -> dict[str, Any]:
        """Optimizer states plus the current (annealed) clip range."""
        state = super().get_extra_state()
        state["clip_range_now"] = self.clip_range_now
        return state

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_extra_state` returned."""
        super().set_extra_state(state)
        self.clip_range_now = float(state["clip_range_now"])


@dataclass(frozen=True)
class _StepRecord:
    """What the statistics of one PPO gradient step are computed from (all detached)."""

    losses: tuple[Tensor, Tensor]
    """``loss_actor``, ``loss_critic``."""
    loss_entropy: Tensor | None
    """``-entropy.mean()``, or None: computed from ``logp_all`` when read."""
    logp_all: Tensor | None
    """A categorical policy's log-probabilities of every action (``ent_coef`` 0)."""
    log_ratio: Tensor
    clip: float
    ret: Tensor
    value: Tensor


def _read_diagnostics(records: list[_StepRecord]) -> list[list[float]]:
    """Per record: actor, critic and entropy losses, approximate KL, clip fraction,
    explained variance and entropy; the ops batched over the records of one minibatch
    size (one group but for a smaller last minibatch), read back once per group."""
    diag: list[list[float]] = [[]] * len(records)
    with torch.no_grad():
        losses = torch.stack([t for r in records for t in r.losses]).reshape(-1, 2).tolist()
        for members in size_groups(r.log_ratio.shape[0] for r in records):
            group = [records[i] for i in members]
            log_ratio = torch.stack([r.log_ratio for r in group])
            ret = torch.stack([r.ret for r in group])
            value = torch.stack([r.value for r in group])
            clip = torch.tensor([[r.clip] for r in group], device=log_ratio.device)
            ratio_m1 = log_ratio.exp() - 1.0
            rows = torch.stack(
                [
                    (ratio_m1 - log_ratio).mean(dim=1),
                    (ratio_m1.abs() > clip).float().mean(dim=1),
                    ret.var(dim=1, correction=0),
                    (ret - value).var(dim=1, correction=0),
                    _entropy_losses(group),
                ],
                dim=1,
            ).tolist()
            for i, row in zip(members, rows, strict=True):
                diag[i] = row
    out = []
    for (actor, critic), (kl, clipped, ret_var, residual, entropy_loss) in zip(
        losses, diag, strict=True
    ):
        explained = explained_from(ret_var, residual)
        out.append([actor, critic, entropy_loss, kl, clipped, explained, -entropy_loss])
    return out


def _entropy_losses(group: list[_StepRecord]) -> Tensor:
    """``-entropy.mean()`` of each record of one minibatch size: computed in one batch
    from the kept log-probabilities, or one record at a time (ent_coef changed within the
    update step)."""
    logps = [r.logp_all for r in group if r.logp_all is not None]
    if len(logps) == len(group):
        return _neg_entropy(torch.stack(logps))
    return torch.stack([_entropy_loss(r) for r in group])


def _entropy_loss(record: _StepRecord) -> Tensor:
    if record.loss_entropy is not None:
        return record.loss_entropy
    assert record.logp_all is not None
    return _neg_entropy(record.logp_all)


def _neg_entropy(logp_all: Tensor) -> Tensor:
    """Mean negative entropy over the rows of ``[..., rows, actions]`` log-probabilities."""
    return (logp_all.exp() * logp_all).sum(dim=-1).mean(dim=-1)
