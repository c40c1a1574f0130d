"""DQN: deep Q-learning with a target network, double-Q, n-step and dueling options.

Papers: Mnih et al. 2015, "Human-level control through deep reinforcement learning"
(Nature 518) for the Q network, replay, the hard-updated target network and the Huber
loss; van Hasselt, Guez & Silver 2016, "Deep Reinforcement Learning with Double
Q-learning" (AAAI) for selecting the next action with the online network and evaluating
it with the target network; Sutton 1988, "Learning to predict by the methods of temporal
differences" (Machine Learning 3) and Hessel et al. 2018, "Rainbow" (AAAI) for n-step
targets; Wang et al. 2016, "Dueling Network Architectures for Deep Reinforcement
Learning" (ICML) for the ``V + A - mean(A)`` head; Schaul et al. 2016, "Prioritized
Experience Replay" (ICLR) for the importance-weighted loss and priority updates.

Data flow: the collector calls :meth:`DQN.act` (epsilon-greedy, epsilon from
:meth:`DQN.set_progress`); per gradient step the off-policy trainer samples a minibatch,
:meth:`DQN.process_sample` turns it into ``n_step`` transitions (discounted reward sum,
last ``obs_next``, ``discount = gamma**m`` or 0), :meth:`DQN.learn` takes one Huber-loss
step (each sample weighted by ``batch.weight`` when a
:class:`~epochtrain.data.PrioritizedReplayBuffer` set it) and records ``|TD|``, and
:meth:`DQN.post_learn` hands those to the buffer's ``update_priorities``. Every
``target_update_freq`` gradient steps the target network is overwritten with the online
one.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from epochtrain.algorithms.base import (
    NStepReplay,
    Policy,
    TrainerKind,
    anneal_lr,
    bootstrap_discount,
    resolve_config,
    row_means,
)
from epochtrain.algorithms.priorities import TDPriorities, weighted_mean
from epochtrain.config import Config, param
from epochtrain.config_ignored import IgnoredSetting
from epochtrain.data.batch import ActResult, Batch, Obs
from epochtrain.data.spaces import unsupported_action_space_note
from epochtrain.nets import MLP, flat_dim
from epochtrain.stats import DeferredReads, SequenceSummaryStats, TrainingStats

__all__ = ["DQN", "DQNConfig", "DQNTrainingStats", "DuelingQNet"]


@dataclass(kw_only=True)
class DQNTrainingStats(TrainingStats):
    """Stats of DQN gradient steps: Huber TD loss, mean Q of the taken actions, epsilon."""

    loss: SequenceSummaryStats
    q_mean: SequenceSummaryStats
    epsilon: SequenceSummaryStats


class DuelingQNet(nn.Module):
    """Dueling Q head (Wang et al. 2016): ``Q = V + A - mean_a A`` on a shared trunk.

    The trunk is the MLP of ``hidden[:-1]``; the value and the advantage streams each
    have one hidden layer of ``hidden[-1]`` units, as the paper's two fully connected
    streams after the shared convolutional layers.
    """

    def __init__(self, in_dim: int, n_actions: int, hidden: Sequence[int]) -> None:
        super().__init__()
        if len(hidden) == 0:
            raise ValueError("hidden must have at least one layer for dueling=True, got ()")
        self.in_dim = in_dim
        trunk: list[nn.Module] = []
        last = in_dim
        for h in hidden[:-1]:
            trunk += [nn.Linear(last, h), nn.ReLU()]
            last = h
        self.trunk = nn.Sequential(*trunk)
        self.value = MLP(last, 1, hidden[-1:], nn.ReLU)
        self.advantage = MLP(last, n_actions, hidden[-1:], nn.ReLU)

    def forward(self, obs: Tensor) -> Tensor:
        """Q-values ``[batch, n_actions]`` of ``obs`` flattened to ``[batch, in_dim]``."""
        features = self.trunk(obs.reshape(obs.shape[0], self.in_dim).float())
        adv = self.advantage(features)
        q: Tensor = self.value(features) + adv - adv.mean(dim=-1, keepdim=True)
        return q


@dataclass(frozen=True, kw_only=True)
class DQNConfig(Config):
    """DQN settings: Stable-Baselines3's defaults for the general case (Adam lr 1e-4,
    gamma 0.99, a 64x64 MLP, epsilon 1 -> 0.05 over 100k env steps, the target copied every
    2,500 gradient steps = SB3's 10k env steps at one gradient step per 4, gradient norm
    10), double Q-learning, one-step targets, a plain head."""

    hidden: tuple[int, ...] = param((64, 64), ge=1)
    """Hidden layer sizes of the Q network."""
    lr: float = param(1e-4, gt=0)
    """Adam learning rate."""
    gamma: float = param(0.99, ge=0, le=1)
    """Discount factor."""
    target_update_freq: int = param(2500, ge=1)
    """Gradient steps between two copies of the Q network into the target network."""
    double_q: bool = True
    """Select the next action with the online network (double Q-learning)."""
    epsilon_start: float = param(1.0, ge=0, le=1)
    """Exploration rate at the start of the schedule."""
    epsilon_end: float = param(0.05, ge=0, le=1)
    """Exploration rate at the end of the schedule."""
    epsilon_decay_steps: int = param(100_000, ge=0)
    """Env steps over which epsilon falls linearly from epsilon_start to epsilon_end."""
    max_grad_norm: float | None = param(10.0, gt=0, allow_inf=True)
    """Clip the gradient norm to this (None: no clipping; inf: no clipping, but a NaN or inf
    gradient norm is still caught)."""
    n_step: int = param(1, ge=1)
    """Learn from n-step returns (1: one-step targets)."""
    dueling: bool = False
    """Use a dueling head (V + A - mean A) instead of a plain MLP."""
    lr_anneal_steps: int | None = param(None, ge=1)
    """Decay the learning rate linearly to 0 over this many env steps (None: constant)."""

    def ignored_settings(self) -> list[IgnoredSetting]:
        """``epsilon_start`` without decay steps, ``epsilon_decay_steps`` between equal
        ends, ``double_q`` when the target network is the online one at every step."""
        found = super().ignored_settings()
        if self.epsilon_decay_steps == 0:
            why = "epsilon_decay_steps is 0, so epsilon is epsilon_end from the first step"
            fix = "give epsilon_decay_steps to decay from it, or drop epsilon_start"
            found += self.ignored_if_set("epsilon_start", why, fix)
        elif self.epsilon_start == self.epsilon_end:
            why = f"epsilon_start and epsilon_end are both {self.epsilon_end!r}: nothing decays"
            found += self.ignored_if_set("epsilon_decay_steps", why, "drop epsilon_decay_steps")
        if self.target_update_freq == 1:
            why = (
                "target_update_freq is 1, so the target network is a copy of the online one at "
                "every gradient step, and both choose the same next action"
            )
            found += self.ignored_if_set("double_q", why, "drop double_q")
        return found


class DQN(TDPriorities, NStepReplay, Policy[DQNTrainingStats]):
    """Deep Q-network for discrete actions.

    Schedules are explicit: epsilon falls linearly from ``epsilon_start`` to
    ``epsilon_end`` over ``epsilon_decay_steps`` env steps (as reported by the trainer
    through :meth:`set_progress`); the target network is copied from the online network
    every ``target_update_freq`` gradient steps. Deterministic acting is greedy.
    ``n_step`` > 1 learns from n-step returns (the buffer's newest rows and episode ends
    cut them short); ``dueling`` uses :class:`DuelingQNet` instead of a plain MLP.
    """

    trainer_kinds: ClassVar[frozenset[TrainerKind]] = frozenset({"offpolicy", "offline"})
    config: DQNConfig

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: DQNConfig | None = None,
        *,
        device: str | torch.device = "cpu",
        **overrides: object,
    ) -> None:
        cfg = resolve_config(DQNConfig, config, overrides)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(
                f"action_space must be gymnasium.spaces.Discrete for DQN, got {action_space!r}"
                f"{unsupported_action_space_note(action_space)}"
            )
        super().__init__(observation_space, action_space, cfg, device=device)
        hidden, dueling = cfg.hidden, cfg.dueling
        self.n_actions = int(action_space.n)
        self.gamma = cfg.gamma
        self.target_update_freq = cfg.target_update_freq
        self.double_q = cfg.double_q
        self.epsilon_start = cfg.epsilon_start
        self.epsilon_end = cfg.epsilon_end
        self.epsilon_decay_steps = cfg.epsilon_decay_steps
        self.lr, self.lr_anneal_steps = cfg.lr, cfg.lr_anneal_steps
        self.max_grad_norm = cfg.max_grad_norm
        self.n_step = cfg.n_step
        self.dueling = dueling
        in_dim = flat_dim(observation_space)
        self.q_net: nn.Module
        if dueling:
            self.q_net = DuelingQNet(in_dim, self.n_actions, hidden)
        else:
            self.q_net = MLP(in_dim, self.n_actions, hidden, nn.ReLU)
        self.target_net = copy.deepcopy(self.q_net).requires_grad_(False)
        self.to(self.device)
        self.optimizers["q"] = torch.optim.Adam(self.q_net.parameters(), lr=cfg.lr, fused=True)
        self.scheduled_epsilon = self.scheduled(0)
        """Epsilon of the schedule at the last :meth:`set_progress`."""
        self.n_updates = 0
        """Gradient steps taken so far (saved in the state dict; drives target updates)."""
        self._q_means = DeferredReads(row_means)  # q_mean of each step, read per update step

    # ------------------------------------------------------------------ acting
    @property
    def epsilon(self) -> float:
        """The exploration rate in force: the user's :attr:`exploration` if set, else the
        schedule's. Setting it (``policy.epsilon = 0.1`` in ``train_fn``) sets
        :attr:`exploration`; ``policy.epsilon = None`` hands control back to the schedule."""
        return self.scheduled_epsilon if self.exploration is None else self.exploration

    @epsilon.setter
    def epsilon(self, value: float | None) -> None:
        if value is not None and not 0.0 <= value <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1] or None (the schedule), got {value!r}")
        self.exploration = value

    def set_eps(self, eps: float | None) -> None:
        """Tianshou's spelling of ``policy.epsilon = eps``."""
        self.epsilon = eps

    def set_progress(self, env_step: int) -> None:
        """Advance the epsilon schedule to ``env_step`` collected env steps (linear decay,
        then flat; an explicit :attr:`exploration` still wins) and, with
        ``lr_anneal_steps``, the learning rate."""
        anneal_lr(self.optimizers, self.lr, env_step, self.lr_anneal_steps)
        self.scheduled_epsilon = self.scheduled(env_step)

    def scheduled(self, env_step: int) -> float:
        """The schedule's epsilon after ``env_step`` env steps: ``epsilon_end`` itself once
        the decay is over (``start + (end - start)`` may miss it by a rounding)."""
        if env_step >= self.epsilon_decay_steps:
            return self.epsilon_end
        start, end = self.epsilon_start, self.epsilon_end
        return start + env_step / self.epsilon_decay_steps * (end - start)

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        """Greedy actions, each replaced by a uniform one with probability epsilon.

        Deterministic acting is greedy unless the user set :attr:`exploration` (e.g. an
        evaluation epsilon in ``test_fn``).
        """
        q = self.q_net(self.obs_input(obs))
        actions = q.argmax(dim=-1)
        epsilon = self.epsilon
        if (not deterministic or self.exploration is not None) and epsilon > 0.0:
            # One uniform draw per env decides and, given u < epsilon, picks the action:
            # u / epsilon is then uniform on [0, 1). Most steps explore nowhere and cost
            # one draw and one read-back (the collector reads the actions back anyway).
            u = torch.rand(actions.shape[0], device=q.device, generator=self.act_generator)
            if min(u.tolist()) < epsilon:
                random_actions = (u * (self.n_actions / epsilon)).long()
                random_actions.clamp_(max=self.n_actions - 1)
                actions = torch.where(u < epsilon, random_actions, actions)
        return actions, {}

    # ---------------------------------------------------------------- learning
    @torch.no_grad()
    def compute_target(self, batch: Batch) -> Tensor:
        """TD target ``r + discount * Q_target(s', a*)``.

        ``discount`` is ``batch.discount`` when set (n-step: ``gamma**m``, 0 after a
        termination), else ``gamma * (1 - terminated)``. ``a*`` is the online network's
        argmax (double-Q) or the target network's own. Only termination cuts the
        bootstrap: a truncated transition still bootstraps from its true final
        observation ``obs_next``.
        """
        obs_next = self.obs_input(batch.obs_next)
        q_next_target = self.target_net(obs_next)
        if self.double_q:
            best = self.q_net(obs_next).argmax(dim=-1, keepdim=True)
        else:
            best = q_next_target.argmax(dim=-1, keepdim=True)
        q_next = q_next_target.gather(-1, best).squeeze(-1)
        target: Tensor = batch.rew + bootstrap_discount(batch, self.gamma, q_next) * q_next
        return target

    def learn(self, batch: Batch) -> DQNTrainingStats:
        """One Huber-loss gradient step on ``batch``; may hard-update the target network.

        With ``batch.weight`` (importance weights) the loss is the weighted mean of the
        per-sample Huber losses; ``|TD|`` per sample is kept in :attr:`td_abs`.
        """
        batch = batch.to(self.device)
        target = self.compute_target(batch)
        q_all = self.q_net(self.obs_input(batch.obs))
        q = q_all.gather(-1, batch.act.long().reshape(-1, 1)).squeeze(-1)
        loss = weighted_mean(F.smooth_l1_loss(q, target, reduction="none"), batch.weight)
        q_detached = q.detach()
        self.record_td(q_detached, target)
        loss_value = self.optimize("q", loss, max_grad_norm=self.max_grad_norm, isolated=True)
        # a plain int: object's setattr skips nn.Module's checks, run on every step
        object.__setattr__(self, "n_updates", self.n_updates + 1)
        if self.n_updates % self.target_update_freq == 0:
            self.sync_target()
        return DQNTrainingStats(
            loss=SequenceSummaryStats.single(loss_value),
            q_mean=self._q_means.defer(q_detached, 1)[0],
            epsilon=SequenceSummaryStats.single(self.epsilon),
        )

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """The Q network and its target network."""
        return [(self.q_net, self.target_net)]

    def sync_target(self) -> None:
        """Copy the online network's weights into the target network (hard update)."""
        self.target_net.load_state_dict(self.q_net.state_dict())

    # ------------------------------------------------------------- persisting
    def get_extra_state(self) -> dict[str, Any]:
        """Optimizer states, the gradient-step counter, current epsilon and the head type."""
        state = super().get_extra_state()
        state["n_updates"] = self.n_updates
        state["epsilon"] = self.scheduled_epsilon
        state["dueling"] = self.dueling
        return state

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_extra_state` returned."""
        saved_dueling = bool(state.get("dueling", False))
        if saved_dueling != self.dueling:
            raise ValueError(
                f"state_dict is of a DQN with dueling={saved_dueling}, this policy has "
                f"dueling={self.dueling}: build the policy with dueling={saved_dueling}"
            )
        super().set_extra_state(state)
        self.n_updates = int(state["n_updates"])
        self.scheduled_epsilon = float(state["epsilon"])
