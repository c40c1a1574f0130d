"""ActorCriticPolicy: the shared base of the on-policy family (PG, A2C, PPO).

It owns what the three algorithms have in common, so each of ``pg.py``, ``a2c.py`` and
``ppo.py`` only holds its loss:

* the networks: an actor MLP (action logits, or the mean of a Gaussian with a
  state-independent, learned log-std for 1-d Box actions) and an optional critic MLP
  ``V(obs)``, both tanh with orthogonal init as in Stable-Baselines3;
* acting (:meth:`ActorCriticPolicy.act`, which stores nothing beside the action),
  log-probabilities and entropies;
* :meth:`ActorCriticPolicy.process_rollout`: values and generalised advantage estimation
  (Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized
  Advantage Estimation", ICLR). ``gae_lambda=1`` gives discounted Monte-Carlo returns
  minus the baseline; without a critic the baseline is zero and ``ret`` is the plain
  discounted return of each episode within the rollout;
* the learning-rate schedule driven by :meth:`ActorCriticPolicy.set_progress`.

Data flow: the collector calls ``act``; the on-policy trainer hands the whole
``[time, env]`` rollout to ``process_rollout`` (fills ``value``, ``adv``, ``ret``), then
calls the leaf algorithm's ``learn`` on (mini)batches of it.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import torch
from torch import Tensor, nn

from epochtrain.algorithms.base import (
    Policy,
    TrainerKind,
    anneal_lr,
    categorical_sample,
    normal_like,
)
from epochtrain.config import Config, param
from epochtrain.data.batch import ActResult, Batch, Obs
from epochtrain.data.env_faults import policy_fault
from epochtrain.data.spaces import unsupported_action_space_note
from epochtrain.errors import NonFiniteError
from epochtrain.nets import MLP, check_has_elements, flat_dim, one_d_box_hint
from epochtrain.stats import TrainingStats

__all__ = [
    "ActorCriticConfig",
    "ActorCriticPolicy",
    "AdvantageConfig",
    "explained_variance",
    "gae",
]

TStats = TypeVar("TStats", bound=TrainingStats)

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def gae(
    rew: Tensor,
    value: Tensor,
    value_next: Tensor,
    terminated: Tensor,
    done: Tensor,
    gamma: float,
    gae_lambda: float,
) -> Tensor:
    """Generalised advantage estimates of a ``[time, env]`` rollout.

    ``delta_t = r_t + gamma * V(obs_next_t) * (1 - terminated_t) - V(obs_t)`` and
    ``adv_t = delta_t + gamma * lambda * (1 - done_t) * adv_{t+1}``: termination cuts the
    bootstrap, truncation bootstraps from the true final ``obs_next``, any episode end
    stops the recursion, and the last row bootstraps from its ``obs_next``.
    """
    not_terminated = (~terminated).to(value.dtype)
    delta = rew + gamma * value_next * not_terminated - value
    decay = gamma * gae_lambda * (~done).to(value.dtype)
    adv = torch.empty_like(delta)
    last = torch.zeros_like(delta[0])
    for t in range(delta.shape[0] - 1, -1, -1):
        last = delta[t] + decay[t] * last
        adv[t] = last
    return adv


def explained_variance(ret: Tensor, value: Tensor) -> float:
    """``1 - Var(ret - value) / Var(ret)``, or 0 when the returns are constant.

    SB3 reports NaN for constant returns (e.g. a minibatch of one); 0 keeps the stats
    NaN-free, so one such minibatch does not turn the mean over an update into NaN.
    """
    ret_var, residual_var = variances(ret, value).tolist()
    return explained_from(ret_var, residual_var)


def variances(ret: Tensor, value: Tensor) -> Tensor:
    """``[Var(ret), Var(ret - value)]``: what :func:`explained_from` takes, as one tensor a
    policy can read back together with its other statistics."""
    with torch.no_grad():
        return torch.stack([ret.var(correction=0), (ret - value).var(correction=0)])


def explained_from(ret_var: float, residual_var: float) -> float:
    """:func:`explained_variance` from the two variances."""
    if ret_var == 0.0:
        return 0.0
    return 1.0 - residual_var / ret_var


def _action_dim(action_space: gym.Space[Any], algo: str) -> int:
    """Actor outputs for ``action_space``: logits of a Discrete, the mean of a 1-d Box."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, gym.spaces.Box):
        check_has_elements(action_space, "action_space")
        if len(action_space.shape) != 1:
            raise ValueError(one_d_box_hint(action_space, algo))
        if action_space.dtype.kind != "f":
            raise ValueError(
                f"action_space {action_space!r} holds {action_space.dtype} actions; {algo}'s "
                "Gaussian actions are real numbers: give the env a float Box (and round in "
                "the env), or a Discrete action space"
            )
        return int(action_space.shape[0])
    raise ValueError(
        "action_space must be gymnasium.spaces.Discrete or a 1-d gymnasium.spaces.Box "
        f"for {algo}, got {action_space!r}{unsupported_action_space_note(action_space)}"
    )


@dataclass(frozen=True, kw_only=True)
class ActorCriticConfig(Config):
    """Settings shared by the on-policy family (PG, A2C, PPO)."""

    lr: float = param(3e-4, gt=0)
    """Learning rate of the optimizer."""
    gamma: float = param(0.99, ge=0, le=1)
    """Discount factor."""
    vf_coef: float = param(0.5, ge=0)
    """Weight of the critic's value loss in the total loss."""
    max_grad_norm: float | None = param(0.5, gt=0, allow_inf=True)
    """Clip the gradient norm to this (None: no clipping; inf: no clipping, but a NaN or inf
    gradient norm is still caught)."""
    normalize_advantage: bool = True
    """Scale each minibatch's advantages to mean 0 and std 1."""
    hidden: tuple[int, ...] = param((64, 64), ge=1)
    """Hidden layer sizes of the actor and critic MLPs."""
    lr_anneal_steps: int | None = param(None, ge=1)
    """Decay the learning rate linearly to 0 over this many env steps (None: constant)."""
    log_std_init: float = param(0.0, ge=-20, le=20, actions="box")
    """Initial log standard deviation of the Gaussian policy (Box actions)."""


@dataclass(frozen=True, kw_only=True)
class AdvantageConfig(ActorCriticConfig):
    """Settings of the actor-critics that learn a critic and use GAE (A2C, PPO)."""

    gae_lambda: float = param(0.95, ge=0, le=1)
    """GAE lambda (1: Monte-Carlo returns bootstrapped at the rollout's end)."""
    ent_coef: float = param(0.0, ge=0)
    """Weight of the entropy bonus."""


class ActorCriticPolicy(Policy[TStats], ABC):
    """Abstract on-policy actor-critic for Discrete or 1-d Box action spaces.

    Leaves (:class:`~epochtrain.algorithms.PG`, :class:`~epochtrain.algorithms.A2C`,
    :class:`~epochtrain.algorithms.PPO`) add their optimizer and ``learn``. Box actions
    are Gaussian samples of any real value; the collector clips them to the env's bounds
    (:mod:`epochtrain.data.actions`) and the buffer keeps the samples, so a Box far from
    ``[-1, 1]`` is best rescaled (``gymnasium.wrappers.RescaleAction``).
    ``lr_anneal_steps`` (env steps, or
    ``None`` for constant) decays the learning rate linearly to zero.
    """

    trainer_kinds: ClassVar[frozenset[TrainerKind]] = frozenset({"onpolicy"})
    config: ActorCriticConfig

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: ActorCriticConfig,
        *,
        use_critic: bool,
        gae_lambda: float,
        device: str | torch.device,
    ) -> None:
        act_dim = _action_dim(action_space, type(self).__name__)
        obs_dim = flat_dim(observation_space)
        super().__init__(observation_space, action_space, config, device=device)
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.lr, self.gamma, self.gae_lambda = config.lr, config.gamma, gae_lambda
        self.vf_coef, self.max_grad_norm = config.vf_coef, config.max_grad_norm
        self.normalize_advantage = config.normalize_advantage
        self.lr_anneal_steps = config.lr_anneal_steps
        hidden = config.hidden
        self.actor = MLP(obs_dim, act_dim, hidden, nn.Tanh, out_gain=0.01)
        self.critic: MLP | None = (
            MLP(obs_dim, 1, hidden, nn.Tanh, out_gain=1.0) if use_critic else None
        )
        # unused (and frozen) for discrete actions, so every policy has the same state keys
        log_std = torch.full((act_dim,), config.log_std_init)
        self.log_std = nn.Parameter(log_std, requires_grad=not self.discrete)
        self.to(self.device)

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The parameters the optimizer updates (all but a discrete policy's log-std)."""
        return [p for p in self.parameters() if p.requires_grad]

    # ------------------------------------------------------------------ acting
    def set_progress(self, env_step: int) -> None:
        """Anneal the learning rate of every optimizer for ``env_step`` collected steps."""
        anneal_lr(self.optimizers, self.lr, env_step, self.lr_anneal_steps)

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        """Sampled (or most likely) actions; no extras.

        Nothing is stored with the action: PPO's ``logp`` of the taken actions comes from
        one batched pass over the rollout in :meth:`PPO.process_rollout` (the weights
        have not changed since the actions were taken), as Tianshou does, which keeps a
        log-probability per env step out of collection.
        """
        out = self.actor(self.obs_input(obs))
        if self.discrete:
            if deterministic:
                return out.argmax(dim=-1), {}
            return categorical_sample(out, self.act_generator), {}
        if deterministic:
            return out, {}
        return torch.addcmul(out, self.log_std.exp(), normal_like(out, self.act_generator)), {}

    def _gaussian_logp(self, mean: Tensor, actions: Tensor) -> Tensor:
        z = (actions - mean) * torch.exp(-self.log_std)
        return (-0.5 * z.pow(2) - self.log_std - _LOG_SQRT_2PI).sum(dim=-1)

    def log_prob(self, obs: Tensor, actions: Tensor) -> Tensor:
        """Log-probability of ``actions`` under the current policy at ``obs``."""
        out: Tensor = self.actor(obs)
        if self.discrete:
            logp_all = out.log_softmax(dim=-1)
            return logp_all.gather(-1, actions.long().reshape(-1, 1)).squeeze(-1)
        return self._gaussian_logp(out, actions)

    def log_prob_entropy(
        self, obs: Tensor, actions: Tensor, *, entropy_grad: bool = True
    ) -> tuple[Tensor, Tensor]:
        """Log-probability of ``actions`` and entropy of the current policy at ``obs``; with
        ``entropy_grad=False`` the entropy is computed outside autograd (a reported value)."""
        out = self.actor(obs)
        if self.discrete:
            logp_all = out.log_softmax(dim=-1)
            logp = logp_all.gather(-1, actions.long().reshape(-1, 1)).squeeze(-1)
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                entropy = -(logp_all.exp() * logp_all).sum(dim=-1)
            return logp, entropy
        entropy = (0.5 + _LOG_SQRT_2PI + self.log_std).sum().expand(out.shape[0])
        return self._gaussian_logp(out, actions), entropy

    def value(self, obs: Tensor) -> Tensor:
        """``V(obs)`` shaped ``[batch]``; zeros when the policy has no critic."""
        if self.critic is None:
            return torch.zeros(obs.shape[0], device=obs.device)
        value: Tensor = self.critic(obs).squeeze(-1)
        return value

    # ---------------------------------------------------------------- learning
    @torch.no_grad()
    def process_rollout(self, batch: Batch) -> Batch:
        """Fill ``value``, advantages ``adv`` (:func:`gae`) and returns ``ret = adv + value``."""
        batch = batch.to(self.device)
        n_time, n_env = batch.shape
        obs, obs_next = self.obs_input(batch.obs), self.obs_input(batch.obs_next)
        both = torch.cat([obs, obs_next]).reshape(2 * n_time * n_env, *obs.shape[2:])
        values = self.value(both).reshape(2, n_time, n_env)
        value, value_next = values[0], values[1]
        adv = gae(
            batch.rew, value, value_next, batch.terminated, batch.done, self.gamma, self.gae_lambda
        )
        return dataclasses.replace(batch, value=value, adv=adv, ret=adv + value)

    def advantages(self, batch: Batch) -> Tensor:
        """``batch.adv``, normalised to mean 0 and std 1 if ``normalize_advantage``."""
        adv = batch.adv
        assert adv is not None, f"{type(self).__name__}.learn needs a batch from process_rollout"
        if self.normalize_advantage and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        return adv

    def _degenerate_cause(self) -> str:
        """Why the policy's distribution gave a non-finite log-probability, as far as its
        weights tell (a full scan: on the fault path only)."""
        if not self.discrete:
            log_std = self.log_std.detach()
            std, inv_std = log_std.exp(), (-log_std).exp()
            if not bool(((std > 0) & torch.isfinite(std) & torch.isfinite(inv_std)).all()):
                return (
                    f"the policy is at fault, not the env; its log_std {log_std.tolist()} puts "
                    "the Gaussian's standard deviation at 0 or inf (log_std must stay within "
                    "about [-87, 88]): resume from the last good checkpoint, e.g. with a lower "
                    "learning rate, or keep log_std bounded"
                )
        return policy_fault(self, "log_prob")

    def _refuse_logp_of_loss(self, batch: Batch, logp: Tensor) -> None:
        """For a loss of ``logp * advantage`` that went non-finite (A2C, PG): raise
        ``NonFiniteError`` naming the first row of ``batch`` whose taken action has a NaN or
        inf log-probability and why, when there is one; else return (the loss is at fault)."""
        bad = ~torch.isfinite(logp.detach())
        if not bool(bad.any()):
            return
        row = int(bad.nonzero()[0][0])
        name = type(self).__name__
        value, action = float(logp[row]), batch.act[row].tolist()
        raise NonFiniteError(
            f"the log-probability of the action {action} in row {row} of the batch is "
            f"{value} under {name}, so its loss is NaN and no gradient step was taken: "
            f"{self._degenerate_cause()}",
            where=f"logp of the action in row {row} of the batch",
        )
