"""SAC: soft actor-critic with twin critics and automatic entropy tuning, Box or Discrete.

Papers: Haarnoja et al. 2018, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep
Reinforcement Learning with a Stochastic Actor" (ICML) for the algorithm; Haarnoja et
al. 2018, "Soft Actor-Critic Algorithms and Applications" (arXiv:1812.05905) for the
clipped double-Q critics and the automatic tuning of the temperature ``alpha`` towards a
target entropy (``-|A|`` for Box actions); Christodoulou 2019, "Soft Actor-Critic for
Discrete Action Settings" (arXiv:1910.07207) for Discrete actions: a categorical actor,
critics with one output per action, and targets, actor and temperature losses taken as
exact expectations over the action distribution instead of sampled actions.

Box actions: a Gaussian in pre-squash space, squashed by ``tanh`` into (-1, 1) and
scaled to the Box bounds. Log-probabilities (and so entropies and the target entropy)
are those of the squashed action in (-1, 1), as in Stable-Baselines3, so the same
settings work whatever the bounds; the critics also see actions rescaled to (-1, 1).

Data flow: the collector calls :meth:`SAC.act` (a sampled action; the tanh of the mean
when deterministic); the off-policy trainer samples minibatches and calls
:meth:`SAC.learn` once per gradient step: one critic step on the soft TD target, one
actor step, one temperature step (when ``auto_alpha``), then a Polyak update of the
target critics. :class:`SACBase` holds this machinery for SAC and for CQL
(:mod:`epochtrain.algorithms.cql`), which adds a conservative penalty to the critic loss.
"""

from __future__ import annotations

import copy
import math
from abc import ABC
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from epochtrain.algorithms.base import (
    NStepReplay,
    Policy,
    TrainerKind,
    bootstrap_discount,
    categorical_sample,
    normal_like,
    resolve_config,
)
from epochtrain.algorithms.box_actions import squashed_action_bounds
from epochtrain.algorithms.priorities import TDPriorities, weighted_mean
from epochtrain.config import Config, param
from epochtrain.config_ignored import IgnoredSetting
from epochtrain.data.batch import ActResult, Batch, Obs
from epochtrain.data.spaces import unsupported_action_space_note
from epochtrain.nets import (
    MLP,
    EnsembleMLP,
    EnsembleQCritic,
    all_outputs,
    box_bounds,
    flat_dim,
    q_values,
)
from epochtrain.stats import SequenceSummaryStats, TrainingStats

__all__ = ["SAC", "SACBase", "SACConfig", "SACTrainingStats", "TSACStats"]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_STD_MIN, _LOG_STD_MAX = -20.0, 2.0  # as Stable-Baselines3's SAC actor


@dataclass(kw_only=True)
class SACTrainingStats(TrainingStats):
    """Stats of SAC gradient steps.

    ``loss_critic`` is the soft TD loss (half the sum of the two critics' MSE),
    ``loss_actor`` the actor's ``E[alpha * log pi - min Q]``, ``loss_alpha`` the
    temperature loss (0 when ``alpha`` is fixed), ``alpha`` the temperature used in the
    step, ``entropy`` the policy's mean entropy on the minibatch, ``q_mean`` the mean
    Q-value of the dataset actions.
    """

    loss_critic: SequenceSummaryStats
    loss_actor: SequenceSummaryStats
    loss_alpha: SequenceSummaryStats
    alpha: SequenceSummaryStats
    entropy: SequenceSummaryStats
    q_mean: SequenceSummaryStats


TSACStats = TypeVar("TSACStats", bound=SACTrainingStats)


@dataclass(frozen=True, kw_only=True)
class SACConfig(Config):
    """SAC settings, the paper's (Haarnoja et al. 2018): lr 3e-4, 256x256 nets, tau 0.005,
    gamma 0.99, automatic entropy tuning from temperature 1 (as Stable-Baselines3)."""

    hidden: tuple[int, ...] = param((256, 256), ge=1)
    """Hidden layer sizes of the actor and critic MLPs."""
    actor_lr: float = param(3e-4, gt=0)
    """Adam learning rate of the actor."""
    critic_lr: float = param(3e-4, gt=0)
    """Adam learning rate of the critics."""
    alpha_lr: float = param(3e-4, gt=0)
    """Adam learning rate of the temperature."""
    gamma: float = param(0.99, ge=0, le=1)
    """Discount factor."""
    tau: float = param(0.005, gt=0, le=1)
    """Polyak rate of the target critics (1: hard copy)."""
    alpha: float = param(1.0, gt=0)
    """Initial temperature (kept fixed unless auto_alpha)."""
    auto_alpha: bool = True
    """Tune the temperature towards target_entropy."""
    target_entropy: float | None = None
    """Target entropy (None: -|A| for Box actions, target_entropy_ratio * log(n) for n
    Discrete actions)."""
    target_entropy_ratio: float = param(0.98, gt=0, lt=1, actions="discrete")
    """Discrete actions: target entropy as a fraction of the maximum entropy log(n)."""
    n_step: int = param(1, ge=1)
    """Learn from n-step returns (1: one-step targets): the critics' target sums the next
    n rewards and bootstraps from the n-th next state, with no off-policy correction, as
    Tianshou's n_step_return_horizon and D4PG."""

    def ignored_settings(self) -> list[IgnoredSetting]:
        """``alpha_lr``, ``target_entropy`` and ``target_entropy_ratio`` tune the
        temperature: with ``auto_alpha`` off they do nothing; a ``target_entropy`` given
        replaces ``target_entropy_ratio * log(n)``."""
        found = super().ignored_settings()
        if not self.auto_alpha:
            why = "auto_alpha is off, so the temperature stays at alpha and nothing tunes it"
            for name in ("alpha_lr", "target_entropy", "target_entropy_ratio"):
                fix = f"turn auto_alpha on to use it, or drop {name}"
                found += self.ignored_if_set(name, why, fix)
        elif self.target_entropy is not None:
            why = f"target_entropy={self.target_entropy!r} is the target in its place"
            found += self.ignored_if_set("target_entropy_ratio", why, "drop target_entropy_ratio")
        return found


class SACBase(TDPriorities, NStepReplay, Policy[TSACStats], ABC):
    """Actor, twin critics, targets and temperature of SAC; leaves define ``learn``.

    Box actions use critics ``Q(s, a)`` (one :class:`~epochtrain.nets.EnsembleQCritic`);
    Discrete actions use critics with one output per action (one
    :class:`~epochtrain.nets.EnsembleMLP`). ``alpha`` is the initial temperature
    (kept fixed unless ``auto_alpha``); ``target_entropy`` defaults to ``-|A|`` for Box
    actions and ``target_entropy_ratio * log(n)`` for ``n`` Discrete actions.
    """

    action_center: Tensor
    action_half_range: Tensor
    action_low: Tensor
    action_high: Tensor

    trainer_kinds: ClassVar[frozenset[TrainerKind]] = frozenset({"offpolicy", "offline"})
    bounded_actions: ClassVar[bool] = True  # tanh scaled to the bounds (noise clipped)
    config: SACConfig

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: SACConfig,
        *,
        device: str | torch.device,
    ) -> None:
        hidden, alpha, auto_alpha = config.hidden, config.alpha, config.auto_alpha
        target_entropy = config.target_entropy
        discrete = isinstance(action_space, gym.spaces.Discrete)
        bounds: tuple[Tensor, Tensor] | None = None
        if not discrete:
            if not isinstance(action_space, gym.spaces.Box):
                raise ValueError(
                    "action_space must be gymnasium.spaces.Discrete or a 1-d "
                    f"gymnasium.spaces.Box with finite bounds for {type(self).__name__}, "
                    f"got {action_space!r}{unsupported_action_space_note(action_space)}"
                )
            bounds = box_bounds(action_space, type(self).__name__)  # a Box it cannot take: says why
        super().__init__(observation_space, action_space, config, device=device)
        self.discrete = discrete
        self.gamma, self.tau, self.n_step = config.gamma, config.tau, config.n_step
        self.auto_alpha = auto_alpha
        obs_dim = flat_dim(observation_space)
        self.critics: nn.Module
        """Both critics as one ensemble (:class:`~epochtrain.nets.EnsembleQCritic`, Box;
        :class:`~epochtrain.nets.EnsembleMLP` with one output per action, Discrete); a
        ``ModuleList`` of two critics assigned here works too, slower."""
        if isinstance(action_space, gym.spaces.Discrete):
            self.n_actions = int(action_space.n)
            default_target = config.target_entropy_ratio * math.log(self.n_actions)
            self.actor = MLP(obs_dim, self.n_actions, hidden, nn.ReLU)
            self.critics = EnsembleMLP(2, obs_dim, self.n_actions, hidden, nn.ReLU)
        else:
            assert bounds is not None
            self.act_dim = int(bounds[0].shape[0])
            default_target = -float(self.act_dim)
            self.register_buffer("action_center", bounds[0])
            self.register_buffer("action_half_range", bounds[1])
            low, high, self.clamp_actions = squashed_action_bounds(action_space, bounds[0])
            self.register_buffer("action_low", low, persistent=False)
            self.register_buffer("action_high", high, persistent=False)
            self.actor = MLP(obs_dim, 2 * self.act_dim, hidden, nn.ReLU)
            self.critics = EnsembleQCritic(2, obs_dim, self.act_dim, hidden, nn.ReLU)
        self.target_entropy = default_target if target_entropy is None else target_entropy
        self.critics_target = copy.deepcopy(self.critics).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha)), requires_grad=auto_alpha)
        """Log of the temperature; a parameter, so the state dict carries it."""
        self.to(self.device)
        self.optimizers["actor"] = torch.optim.Adam(
            self.actor.parameters(), lr=config.actor_lr, fused=True
        )
        self.optimizers["critic"] = torch.optim.Adam(
            self.critics.parameters(), lr=config.critic_lr, fused=True
        )
        if auto_alpha:
            self.optimizers["alpha"] = torch.optim.Adam([self.log_alpha], lr=config.alpha_lr)

    @property
    def alpha(self) -> float:
        """The current temperature ``exp(log_alpha)``."""
        return float(self.log_alpha.detach().exp())

    # ------------------------------------------------------------------ acting
    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        """Sampled actions (or the most likely / the tanh of the mean); no extras."""
        out = self.actor(self.obs_input(obs))
        if self.discrete:
            if deterministic:
                return out.argmax(dim=-1), {}
            return categorical_sample(out, self.act_generator), {}
        if deterministic:
            return self.scale(torch.tanh(out[:, : self.act_dim])), {}
        # the same draw as _squashed_sample, without the log-probability acting never uses
        mean, log_std = out.chunk(2, dim=-1)
        noise = normal_like(mean, self.act_generator)  # randn_like's draw
        u = torch.addcmul(mean, log_std.clamp(_LOG_STD_MIN, _LOG_STD_MAX).exp(), noise)
        return self.scale(torch.tanh(u)), {}

    def scale(self, squashed: Tensor) -> Tensor:
        """Map actions in [-1, 1] to the Box bounds (one fused multiply-add), clamped to
        them unless the bounds are symmetric (:mod:`~epochtrain.algorithms.box_actions`:
        float32 rounding can pass an asymmetric bound by one ulp)."""
        action = torch.addcmul(self.action_center, self.action_half_range, squashed)
        if self.clamp_actions:
            action.clamp_(self.action_low, self.action_high)
        return action

    def unscale(self, action: Tensor) -> Tensor:
        """Map Box actions to (-1, 1), the scale the critics see."""
        return (action.float() - self.action_center) / self.action_half_range

    def _squashed_sample(self, out: Tensor) -> tuple[Tensor, Tensor]:
        """Reparameterised ``tanh(u)``, ``u ~ N(mean, std)``, and its log-probability."""
        mean, log_std = out.chunk(2, dim=-1)
        log_std = log_std.clamp(_LOG_STD_MIN, _LOG_STD_MAX)
        noise = torch.randn_like(mean)
        u = mean + log_std.exp() * noise
        logp_u = (-0.5 * noise.pow(2) - log_std - _LOG_SQRT_2PI).sum(dim=-1)
        # log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)), stable for large |u|
        log_det = (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(dim=-1)
        return torch.tanh(u), logp_u - log_det

    def sample(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Box actions only: reparameterised actions in (-1, 1) and their log-probability."""
        return self._squashed_sample(self.actor(obs))

    def action_log_probs(self, obs: Tensor) -> Tensor:
        """Discrete actions only: log-probabilities of every action, ``[batch, n]``."""
        out: Tensor = self.actor(obs).log_softmax(dim=-1)
        return out

    # ----------------------------------------------------------------- critics
    def q_values(self, obs: Tensor, act: Tensor, *, target: bool = False) -> Tensor:
        """Both critics' ``Q(obs, act)``, ``[2, batch]``; Box ``act`` in (-1, 1)."""
        critics = self.critics_target if target else self.critics
        if self.discrete:
            q_all = all_outputs(critics, obs)
            index = act.long().reshape(1, -1, 1).expand(q_all.shape[0], -1, 1)
            return q_all.gather(-1, index).squeeze(-1)
        return q_values(critics, obs, act)

    def min_q(self, obs: Tensor, act: Tensor, *, target: bool = False) -> Tensor:
        """Box actions: ``min(Q_1, Q_2)(obs, act)``, ``[batch]`` (one pass of the ensemble)."""
        q = q_values(self.critics_target if target else self.critics, obs, act)
        return torch.minimum(q[0], q[1])

    def q_all(self, obs: Tensor, *, target: bool = False) -> Tensor:
        """Discrete actions only: both critics' values of every action, ``[2, batch, n]``."""
        return all_outputs(self.critics_target if target else self.critics, obs)

    @torch.no_grad()
    def compute_target(self, batch: Batch) -> Tensor:
        """Soft TD target ``r + gamma * (1 - terminated) * V(s')`` (n-step: ``r`` the
        discounted sum of n rewards, ``s'`` the n-th next state, ``gamma**n`` its factor).

        ``V(s') = E_{a' ~ pi}[min_i Q_target_i(s', a') - alpha * log pi(a'|s')]``, one
        sampled ``a'`` for Box actions, the exact expectation for Discrete ones. Only
        termination cuts the bootstrap; truncated transitions bootstrap from ``obs_next``.
        """
        obs_next = self.obs_input(batch.obs_next)
        alpha = self.log_alpha.exp()
        if self.discrete:
            logp = self.action_log_probs(obs_next)
            q_next = self.q_all(obs_next, target=True).min(dim=0).values
            v_next = (logp.exp() * (q_next - alpha * logp)).sum(dim=-1)
        else:
            act_next, logp_next = self.sample(obs_next)
            q_next = self.min_q(obs_next, act_next, target=True)
            v_next = q_next - alpha * logp_next
        target: Tensor = batch.rew + bootstrap_discount(batch, self.gamma, v_next) * v_next
        return target

    def critic_td_loss(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """Soft TD loss (half the sum of both critics' MSE) and ``Q(s, a)``, ``[2, batch]``.

        With ``batch.weight`` (importance weights of a prioritized buffer) each sample's
        squared error is weighted by it; ``Q`` and the target are recorded
        for the priority update (:meth:`~epochtrain.algorithms.priorities.TDPriorities.post_learn`).
        """
        target = self.compute_target(batch)
        act = batch.act if self.discrete else self.unscale(batch.act)
        q = self.q_values(self.obs_input(batch.obs), act)
        # 2 * mean over critics and samples: the sum of both critics' MSE, halved
        loss = weighted_mean((q - target.unsqueeze(0)).pow(2), batch.weight)
        self.record_td(q, target)
        return loss, q

    # ----------------------------------------------------- actor, temperature
    def actor_alpha_step(self, obs: Tensor) -> tuple[float, float, float, float]:
        """One actor step, then one temperature step when ``auto_alpha``.

        Returns ``(loss_actor, loss_alpha, alpha, entropy)``; ``alpha`` is the temperature
        the actor loss used. The temperature loss ``log_alpha * (H - target_entropy)``
        raises ``alpha`` while the entropy ``H`` is below its target.
        """
        alpha_t = self.log_alpha.detach().exp()
        if self.discrete:
            logp = self.action_log_probs(obs)
            probs = logp.exp()
            with torch.no_grad():
                q = self.q_all(obs).min(dim=0).values
            loss_actor = (probs * (alpha_t * logp - q)).sum(dim=-1).mean()
            entropy = -(probs * logp).sum(dim=-1).mean()
        else:
            act, logp_a = self.sample(obs)
            q = self.min_q(obs, act)
            loss_actor = (alpha_t * logp_a - q).mean()
            entropy = -logp_a.mean()
        # gradients for the actor's parameters only
        loss_actor_value = self.optimize("actor", loss_actor)
        loss_alpha = 0.0
        if self.auto_alpha:
            alpha_loss = self.log_alpha * (entropy.detach() - self.target_entropy)
            loss_alpha = self.optimize("alpha", alpha_loss, isolated=True)
        return loss_actor_value, loss_alpha, alpha_t.item(), entropy.item()

    def update_targets(self) -> None:
        """Polyak update of the target critics with rate ``tau``."""
        self.soft_update_targets(self.tau)

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """The twin critics and their target copies."""
        return [(self.critics, self.critics_target)]


class SAC(SACBase[SACTrainingStats]):
    """Soft actor-critic for Box or Discrete actions (see :class:`SACBase` for settings)."""

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: SACConfig | None = None,
        *,
        device: str | torch.device = "cpu",
        **overrides: object,
    ) -> None:
        cfg = resolve_config(SACConfig, config, overrides)
        super().__init__(observation_space, action_space, cfg, device=device)

    def learn(self, batch: Batch) -> SACTrainingStats:
        """One critic step, one actor step, one temperature step, one target update (in
        Tianshou's order; SB3 steps the temperature first, so its critic and actor use the
        new alpha)."""
        batch = batch.to(self.device)
        loss, q = self.critic_td_loss(batch)
        loss_critic = self.optimize("critic", loss, isolated=True)
        loss_actor, loss_alpha, alpha, entropy = self.actor_alpha_step(self.obs_input(batch.obs))
        self.update_targets()
        single = SequenceSummaryStats.single
        return SACTrainingStats(
            loss_critic=single(loss_critic),
            loss_actor=single(loss_actor),
            loss_alpha=single(loss_alpha),
            alpha=single(alpha),
            entropy=single(entropy),
            q_mean=single(q.detach().mean().item()),
        )
