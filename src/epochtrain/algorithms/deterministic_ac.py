"""DeterministicActorCritic: the shared machinery of DDPG, TD3 and TD3+BC.

Papers: Silver et al. 2014, "Deterministic Policy Gradient Algorithms" (ICML) for the
actor's gradient through the critic; Lillicrap et al. 2016, "Continuous control with
deep reinforcement learning" (ICLR, DDPG) for replay, target networks and Polyak
updates; Fujimoto, van Hoof & Meger 2018, "Addressing Function Approximation Error in
Actor-Critic Methods" (ICML, TD3) for twin critics, target policy smoothing and delayed
actor updates.

Data flow: the collector calls :meth:`DeterministicActorCritic.act` (the actor's action
plus Gaussian exploration noise, clipped to the Box bounds); the trainer samples
minibatches and calls the leaf algorithm's ``learn``, which composes
:meth:`~DeterministicActorCritic.update_critics` (one critic step towards
``r + gamma * (1 - terminated) * min_i Q'_i(s', pi'(s') + clipped noise)``),
:meth:`~DeterministicActorCritic.actor_q` (the actor objective) and
:meth:`~DeterministicActorCritic.update_actor` (one actor step, then Polyak updates of
every target network).

Internally the actor outputs actions normalised to ``[-1, 1]`` (``tanh``) and the critics
see normalised actions; only :meth:`act` maps them to the Box bounds, so noise scales
(``exploration_noise``, ``policy_noise``, ``noise_clip``) are fractions of the half-range
of the action space, as in Stable-Baselines3 and CleanRL.
"""

from __future__ import annotations

import copy
from abc import ABC
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from epochtrain.algorithms.base import (
    NStepReplay,
    Policy,
    TrainerKind,
    bootstrap_discount,
    normal_like,
    row_means,
)
from epochtrain.algorithms.box_actions import squashed_action_bounds
from epochtrain.algorithms.priorities import TDPriorities, weighted_mean
from epochtrain.data.batch import ActResult, Batch, Obs
from epochtrain.data.spaces import unsupported_action_space_note
from epochtrain.nets import MLP, EnsembleQCritic, box_bounds, flat_dim, q_value, q_values
from epochtrain.stats import DeferredReads, SequenceSummaryStats, TTrainingStats

if TYPE_CHECKING:
    from epochtrain.algorithms.ddpg import DDPGConfig

__all__ = ["DeterministicActorCritic"]


class DeterministicActorCritic(TDPriorities, NStepReplay, Policy[TTrainingStats], ABC):
    """Abstract deterministic actor with ``n_critics`` Q critics and target copies of all.

    Leaves (:class:`~epochtrain.algorithms.DDPG`, :class:`~epochtrain.algorithms.TD3`,
    :class:`~epochtrain.algorithms.TD3BC`) implement ``learn`` from the building blocks
    here and bind their own stats type. ``n_updates`` counts critic steps; it decides when
    a delayed actor step is due and is saved in the state dict.
    """

    action_center: Tensor
    action_half_range: Tensor
    action_low: Tensor
    action_high: Tensor

    trainer_kinds: ClassVar[frozenset[TrainerKind]] = frozenset({"offpolicy", "offline"})
    bounded_actions: ClassVar[bool] = True  # tanh scaled to the bounds (noise clipped)
    config: DDPGConfig

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: DDPGConfig,
        *,
        n_critics: int,
        policy_noise: float,
        noise_clip: float,
        policy_delay: int,
        device: str | torch.device,
    ) -> None:
        algo = type(self).__name__
        if not isinstance(action_space, gym.spaces.Box):
            raise ValueError(
                f"action_space must be a 1-d gymnasium.spaces.Box for {algo}, got "
                f"{action_space!r}{unsupported_action_space_note(action_space)}: for Discrete "
                "actions use dqn, sac (discrete) or ppo"
            )
        center, half_range = box_bounds(action_space, algo)
        obs_dim = flat_dim(observation_space)
        super().__init__(observation_space, action_space, config, device=device)
        hidden = config.hidden
        self.gamma = config.gamma
        self.n_step = config.n_step
        self.tau = config.tau
        self.exploration_noise = config.exploration_noise
        self.policy_noise = policy_noise
        self.noise_clip = noise_clip
        self.policy_delay = policy_delay
        self.max_grad_norm = config.max_grad_norm
        act_dim = int(center.shape[0])
        self.register_buffer("action_center", center)
        self.register_buffer("action_half_range", half_range)
        low, high, self.clamp_actions = squashed_action_bounds(action_space, center)
        self.register_buffer("action_low", low, persistent=False)
        self.register_buffer("action_high", high, persistent=False)
        self.actor = MLP(obs_dim, act_dim, hidden, nn.ReLU)
        self.critics: nn.Module = EnsembleQCritic(n_critics, obs_dim, act_dim, hidden, nn.ReLU)
        """The critics as one :class:`~epochtrain.nets.EnsembleQCritic` (a ``ModuleList``
        of critics ``Q(obs, act)`` assigned here works too, slower)."""
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_targets = copy.deepcopy(self.critics).requires_grad_(False)
        self.to(self.device)
        self.optimizers["actor"] = torch.optim.Adam(
            self.actor.parameters(), lr=config.actor_lr, fused=True
        )
        self.optimizers["critic"] = torch.optim.Adam(
            self.critics.parameters(), lr=config.critic_lr, fused=True
        )
        self.n_updates = 0
        """Critic gradient steps taken so far (saved in the state dict)."""
        self._q_means = DeferredReads(row_means)  # q_mean of each step, read per update step

    # ------------------------------------------------------------------ acting
    def preprocess_obs(self, obs: Obs) -> Tensor:
        """Observations as the networks see them; the default is :meth:`obs_input`."""
        return self.obs_input(obs)

    def pi(self, obs: Tensor) -> Tensor:
        """The actor's normalised action ``tanh(actor(obs))`` in ``(-1, 1)``."""
        return torch.tanh(self.actor(obs))

    def to_env_action(self, normalised: Tensor) -> Tensor:
        """Map normalised actions in ``[-1, 1]`` to the Box bounds (one fused multiply-add),
        clamped to them unless the bounds are symmetric
        (:mod:`~epochtrain.algorithms.box_actions`: float32 rounding can pass an
        asymmetric bound by one ulp)."""
        action = torch.addcmul(self.action_center, self.action_half_range, normalised)
        if self.clamp_actions:
            action.clamp_(self.action_low, self.action_high)
        return action

    def to_normalised_action(self, action: Tensor) -> Tensor:
        """Map actions in the Box bounds to ``[-1, 1]``."""
        return (action.to(self.action_center.dtype) - self.action_center) / self.action_half_range

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        """The actor's actions; exploring adds ``N(0, exploration_noise)`` then clips.

        An explicit :attr:`exploration` (the noise scale set in ``train_fn``/``test_fn``)
        replaces ``exploration_noise`` and applies to deterministic acting too.
        """
        u = self.pi(self.preprocess_obs(obs))
        noise = self.exploration_noise if self.exploration is None else self.exploration
        if (not deterministic or self.exploration is not None) and noise > 0:
            u = torch.add(u, normal_like(u, self.act_generator), alpha=noise).clamp_(-1.0, 1.0)
        return self.to_env_action(u), {}

    # ---------------------------------------------------------------- learning
    def prepare(self, batch: Batch) -> tuple[Batch, Tensor, Tensor, Tensor]:
        """``batch`` on the device and its ``(obs, normalised act, obs_next)`` tensors."""
        batch = batch.to(self.device)
        obs = self.preprocess_obs(batch.obs)
        obs_next = self.preprocess_obs(batch.obs_next)
        act = self.to_normalised_action(batch.act.reshape(len(batch), -1))
        return batch, obs, act, obs_next

    def target_action(self, obs_next: Tensor) -> Tensor:
        """Target policy smoothing: ``clip(pi'(s') + clip(N(0, policy_noise), +-noise_clip))``.

        With ``policy_noise == 0`` (DDPG) this is the target actor's action as is. No
        gradient flows: the target actor's parameters never require one.
        """
        u = self.pi_target(obs_next)
        if self.policy_noise > 0:
            noise = (self.policy_noise * torch.randn_like(u)).clamp(
                -self.noise_clip, self.noise_clip
            )
            u = (u + noise).clamp(-1.0, 1.0)
        return u

    def pi_target(self, obs: Tensor) -> Tensor:
        """The target actor's normalised action."""
        return torch.tanh(self.actor_target(obs))

    def compute_target(self, batch: Batch, obs_next: Tensor) -> Tensor:
        """TD target ``r + gamma * (1 - terminated) * min_i Q'_i(s', target_action(s'))``
        (n-step: ``r`` the discounted sum of n rewards, ``s'`` the n-th next state),
        computed without gradient.

        Only termination cuts the bootstrap: a truncated transition still bootstraps from
        its true final observation.
        """
        with torch.no_grad():
            a_next = self.target_action(obs_next)
            q_next = _min_q(q_values(self.critic_targets, obs_next, a_next))
            discount = bootstrap_discount(batch, self.gamma, q_next)
            target: Tensor = batch.rew.to(q_next.dtype) + discount * q_next
        return target

    def update_critics(
        self, batch: Batch, obs: Tensor, act: Tensor, obs_next: Tensor
    ) -> tuple[float, SequenceSummaryStats]:
        """One critic step on the summed MSE of every critic; returns the loss and the
        summary of the minibatch's mean ``Q_1`` (read back with the update step's other
        statistics, :class:`~epochtrain.stats.DeferredReads`, not on every gradient step).

        With ``batch.weight`` (importance weights of a prioritized buffer) each sample's
        squared error is weighted by it; ``Q`` and the target are recorded for the
        priority update (:meth:`~epochtrain.algorithms.priorities.TDPriorities.post_learn`).
        Increments :attr:`n_updates`.
        """
        target = self.compute_target(batch, obs_next)
        qs = q_values(self.critics, obs, act)  # [n_critics, batch]
        # the sum of every critic's MSE: n times the MSE over all of them
        if batch.weight is None:
            loss = F.mse_loss(qs, target.expand_as(qs))
        else:
            loss = weighted_mean((qs - target).pow(2), batch.weight)
        if len(qs) > 1:
            loss = len(qs) * loss
        self.record_td(qs, target)
        loss_value = self.optimize("critic", loss, max_grad_norm=self.max_grad_norm, isolated=True)
        # a plain int: object's setattr skips nn.Module's checks, run on every step
        object.__setattr__(self, "n_updates", self.n_updates + 1)
        return loss_value, self._q_means.defer(qs[0].detach(), 1)[0]

    def actor_due(self) -> bool:
        """Whether the critic step just taken is followed by an actor step."""
        return self.n_updates % self.policy_delay == 0

    def actor_q(self, obs: Tensor) -> Tensor:
        """``Q_1(s, pi(s))`` per observation, differentiable through the actor."""
        return q_value(self.critics, 0, obs, self.pi(obs))

    def update_actor(self, loss: Tensor) -> float:
        """One actor step on ``loss``, then Polyak updates of every target network;
        returns the loss as a float."""
        loss_value = self.optimize("actor", loss, max_grad_norm=self.max_grad_norm)
        self.soft_update_targets(self.tau)
        return loss_value

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """The actor and the critics, each with its target network."""
        return [(self.actor, self.actor_target), (self.critics, self.critic_targets)]

    # ------------------------------------------------------------- persisting
    def get_extra_state(self) -> dict[str, Any]:
        """Optimizer states plus the critic-step counter."""
        state = super().get_extra_state()
        state["n_updates"] = self.n_updates
        return state

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_extra_state` returned."""
        super().set_extra_state(state)
        self.n_updates = int(state["n_updates"])


def _min_q(qs: Tensor) -> Tensor:
    """Elementwise minimum over the critics of ``qs`` (``[n_critics, batch]``)."""
    if len(qs) == 1:
        return qs[0]
    if len(qs) == 2:
        return torch.minimum(qs[0], qs[1])
    return qs.min(dim=0).values
