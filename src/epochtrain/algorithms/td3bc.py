"""TD3+BC: offline TD3 with a behaviour-cloning term in the actor loss.

Paper: Fujimoto & Gu 2021, "A Minimalist Approach to Offline Reinforcement Learning"
(NeurIPS). Two changes to TD3 (Fujimoto, van Hoof & Meger 2018): the actor minimises
``-lambda * Q_1(s, pi(s)) + (pi(s) - a)^2`` with ``lambda = alpha / mean|Q_1(s, pi(s))|``
(the mean over the minibatch, not differentiated), and states are normalised with the
dataset's per-feature mean and standard deviation (``+ 1e-3``).

Data flow: the offline trainer samples minibatches from the fixed dataset buffer, hands
each to :meth:`TD3BC.process_sample` (which, with ``normalize_obs``, computes the
dataset's state statistics once from the whole buffer unless :meth:`compute_obs_stats`
was called already) and then to :meth:`TD3BC.learn`: one step of both critics towards
the smoothed clipped double-Q target, and every ``policy_delay`` steps one actor step and
Polyak updates of the targets. :meth:`TD3BC.act` normalises observations with the same
statistics, which travel in the ``state_dict``. Actions are compared in units of the
action half-range (the paper's D4RL actions lie in ``[-1, 1]``, so ``alpha = 2.5`` keeps
its meaning for other bounds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor

from epochtrain.algorithms.base import TrainerKind, resolve_config
from epochtrain.algorithms.deterministic_ac import DeterministicActorCritic
from epochtrain.algorithms.td3 import TD3Config, TD3TrainingStats
from epochtrain.config import param
from epochtrain.data.batch import Batch, Obs
from epochtrain.nets import q_value
from epochtrain.stats import SequenceSummaryStats

if TYPE_CHECKING:
    from epochtrain.data.buffer import ReplayBuffer

__all__ = ["TD3BC", "TD3BCConfig", "TD3BCTrainingStats"]

OBS_STD_EPS = 1e-3
"""Added to the dataset's state standard deviation, as in the paper's code."""


@dataclass(kw_only=True)
class TD3BCTrainingStats(TD3TrainingStats):
    """Stats of TD3+BC gradient steps.

    ``loss_actor`` is ``-lambda * mean Q_1(s, pi(s)) + loss_bc``; ``loss_bc`` is the mean
    squared difference between the actor's and the dataset's actions in half-range units;
    ``lmbda`` is ``alpha / mean|Q_1(s, pi(s))|``. The three are measured on the delayed
    actor steps only (not measured on the others).
    """

    loss_bc: SequenceSummaryStats
    lmbda: SequenceSummaryStats


@dataclass(frozen=True, kw_only=True)
class TD3BCConfig(TD3Config):
    """TD3+BC settings, the paper's (Fujimoto & Gu 2021): the TD3 ones, alpha 2.5 and
    state normalisation; no exploration noise (the data is fixed)."""

    exploration_noise: float = param(0.0, ge=0)
    """Std of the exploration noise (offline: none)."""
    alpha: float = param(2.5, ge=0)
    """Weight of the RL term against behaviour cloning (0: behaviour cloning only)."""
    normalize_obs: bool = True
    """Normalise states with the dataset's mean and std."""


def obs_stats_shape(observation_space: gym.Space[Any]) -> tuple[int, ...]:
    """The shape of TD3+BC's state statistics: one mean and std per network input, so
    ``(n,)`` for a ``Discrete(n)`` observation (one-hot encoded: ``n`` inputs), the
    observation's shape for a Box."""
    if isinstance(observation_space, gym.spaces.Discrete):
        return (int(observation_space.n),)
    return tuple(observation_space.shape or ())


class TD3BC(DeterministicActorCritic[TD3BCTrainingStats]):
    """TD3+BC for a 1-d bounded Box action space, trained on a fixed dataset.

    ``alpha`` weighs the RL term against behaviour cloning (0 gives pure BC with a TD3
    critic). ``normalize_obs``: normalise states with the dataset's statistics (computed
    from the buffer on the first sampled batch, or by :meth:`compute_obs_stats`; one mean
    and std per network input: per dimension of a Box, per one-hot input of a
    ``Discrete(n)``, shape ``(n,)``). Acting is deterministic: there is no exploration
    offline.
    """

    obs_mean: Tensor
    obs_std: Tensor

    trainer_kinds: ClassVar[frozenset[TrainerKind]] = frozenset({"offline"})
    config: TD3BCConfig

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: TD3BCConfig | None = None,
        *,
        device: str | torch.device = "cpu",
        **overrides: object,
    ) -> None:
        cfg = resolve_config(TD3BCConfig, config, overrides)
        if not isinstance(action_space, gym.spaces.Box):
            raise ValueError(
                f"td3bc is for continuous actions (a gymnasium.spaces.Box), got action_space "
                f"{action_space!r}: for Discrete actions use bc or cql"
            )
        super().__init__(
            observation_space,
            action_space,
            cfg,
            n_critics=2,
            policy_noise=cfg.policy_noise,
            noise_clip=cfg.noise_clip,
            policy_delay=cfg.policy_delay,
            device=device,
        )
        self.alpha = cfg.alpha
        self.normalize_obs = cfg.normalize_obs
        shape = obs_stats_shape(observation_space)
        self.register_buffer("obs_mean", torch.zeros(shape, device=self.device))
        self.register_buffer("obs_std", torch.ones(shape, device=self.device))
        self.obs_stats_ready = False
        """Whether ``obs_mean``/``obs_std`` hold the dataset's statistics (state dict)."""

    # ------------------------------------------------------- state normalisation
    @torch.no_grad()
    def compute_obs_stats(self, buffer: ReplayBuffer) -> None:
        """Set ``obs_mean``/``obs_std`` from every valid transition in ``buffer``.

        Reads the whole buffer once (O(buffer)); the trainer's first sample triggers it
        when ``normalize_obs`` is on and it has not been called.
        """
        data = buffer.rollout()
        obs = self.obs_input(data.obs)  # as preprocess_obs encodes it (one-hot, pixels / 255)
        if data.valid is not None:
            obs = obs[data.valid]
        obs = obs.reshape(-1, *self.obs_mean.shape).to(self.device, torch.float32)
        self.obs_mean.copy_(obs.mean(dim=0))
        self.obs_std.copy_(obs.std(dim=0, unbiased=False) + OBS_STD_EPS)
        self.obs_stats_ready = True

    def process_sample(self, batch: Batch, buffer: ReplayBuffer) -> Batch:
        """Compute the dataset's state statistics on the first batch (``normalize_obs``),
        then make ``n_step`` transitions."""
        if self.normalize_obs and not self.obs_stats_ready:
            self.compute_obs_stats(buffer)
        return super().process_sample(batch, buffer)

    def preprocess_obs(self, obs: Obs) -> Tensor:
        """``(obs - obs_mean) / obs_std`` with ``normalize_obs``, else ``obs`` as is."""
        obs = super().preprocess_obs(obs)
        if not self.normalize_obs:
            return obs
        return (obs.to(self.obs_mean.dtype) - self.obs_mean) / self.obs_std

    # ---------------------------------------------------------------- learning
    def learn(self, batch: Batch) -> TD3BCTrainingStats:
        """One step of both critics; every ``policy_delay`` steps also actor and targets."""
        batch, obs, act, obs_next = self.prepare(batch)
        loss_critic, q_mean = self.update_critics(batch, obs, act, obs_next)
        due = self.actor_due()
        skipped = SequenceSummaryStats.not_measured
        stat_actor, stat_bc, stat_lmbda = skipped(), skipped(), skipped()
        if due:  # the actor loss is computed on actor steps only
            pi = self.pi(obs)
            q = q_value(self.critics, 0, obs, pi)
            lmbda = self.alpha / q.abs().mean().detach().clamp_min(1e-8)
            loss_bc = F.mse_loss(pi, act)
            loss_actor = -lmbda * q.mean() + loss_bc
            stat_actor = SequenceSummaryStats.single(self.update_actor(loss_actor))
            stat_bc = SequenceSummaryStats.single(loss_bc.item())
            stat_lmbda = SequenceSummaryStats.single(lmbda.item())
        return TD3BCTrainingStats(
            loss_actor=stat_actor,
            loss_critic=SequenceSummaryStats.single(loss_critic),
            q_mean=q_mean,
            actor_updated=SequenceSummaryStats.single(float(due)),
            loss_bc=stat_bc,
            lmbda=stat_lmbda,
        )

    # ------------------------------------------------------------- persisting
    def get_extra_state(self) -> dict[str, Any]:
        """Optimizer states, the critic-step counter and whether state stats are set."""
        state = super().get_extra_state()
        state["obs_stats_ready"] = self.obs_stats_ready
        return state

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_extra_state` returned."""
        super().set_extra_state(state)
        self.obs_stats_ready = bool(state["obs_stats_ready"])
