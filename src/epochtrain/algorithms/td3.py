"""TD3: twin delayed deep deterministic policy gradient for continuous (Box) actions.

Paper: Fujimoto, van Hoof & Meger 2018, "Addressing Function Approximation Error in
Actor-Critic Methods" (ICML). Three changes to DDPG: clipped double-Q learning (two
critics, the target takes their minimum), target policy smoothing (clipped Gaussian noise
on the target action) and delayed updates of the actor and of all target networks.

Data flow: the collector calls :meth:`TD3.act` (actor + Gaussian noise, clipped to the
Box); the off-policy trainer samples minibatches from the replay buffer and calls
:meth:`TD3.learn` once per gradient step:

1. ``a' = clip(pi'(s') + clip(N(0, policy_noise), -noise_clip, noise_clip), -1, 1)``;
2. both critics minimise ``(Q_i(s, a) - (r + gamma * (1 - terminated) * min_j Q'_j(s', a')))^2``;
3. every ``policy_delay`` critic steps: the actor minimises ``-Q_1(s, pi(s))``, then
   every target network takes a Polyak step with ``tau``.

Noise scales are fractions of the action half-range (the paper's actions lie in
``[-1, 1]``, so its 0.2 and 0.5 keep their meaning).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch

from epochtrain.algorithms.base import resolve_config
from epochtrain.algorithms.ddpg import DDPGConfig, DDPGTrainingStats
from epochtrain.algorithms.deterministic_ac import DeterministicActorCritic
from epochtrain.config import param
from epochtrain.config_ignored import IgnoredSetting
from epochtrain.data.batch import Batch
from epochtrain.stats import SequenceSummaryStats

__all__ = ["TD3", "TD3Config", "TD3TrainingStats"]


@dataclass(kw_only=True)
class TD3TrainingStats(DDPGTrainingStats):
    """Stats of TD3 gradient steps (the DDPG fields, ``loss_critic`` summed over twins).

    ``actor_updated`` is 1 for steps that updated the actor and the targets, else 0; its
    mean over an update is the share of delayed actor steps. ``loss_actor`` summarises the
    actor steps only (not measured on a step without one).
    """

    actor_updated: SequenceSummaryStats


@dataclass(frozen=True, kw_only=True)
class TD3Config(DDPGConfig):
    """TD3 settings, the paper's (Fujimoto et al. 2018, revised code): the DDPG ones plus
    target policy smoothing (noise 0.2 clipped at 0.5) and delayed actor steps (2)."""

    policy_noise: float = param(0.2, ge=0)
    """Std of the target policy smoothing noise, as a fraction of the action half-range."""
    noise_clip: float = param(0.5, ge=0, allow_inf=True)
    """Clip of the target policy smoothing noise, as a fraction of the half-range (inf: no
    clip; the smoothed action is still clipped to the action bounds)."""
    policy_delay: int = param(2, ge=1)
    """Critic steps per actor (and target) step."""

    def ignored_settings(self) -> list[IgnoredSetting]:
        """``noise_clip`` without smoothing noise, ``policy_noise`` clipped to 0."""
        found = super().ignored_settings()
        if self.policy_noise == 0:
            why = "policy_noise is 0, so there is no smoothing noise to clip"
            found += self.ignored_if_set("noise_clip", why, "drop noise_clip")
        elif self.noise_clip == 0:
            why = "noise_clip is 0, so the smoothing noise is clipped to 0 whatever its std"
            fix = "give noise_clip a value > 0 to use it, or drop policy_noise"
            found += self.ignored_if_set("policy_noise", why, fix)
        return found


class TD3(DeterministicActorCritic[TD3TrainingStats]):
    """TD3 for a 1-d bounded Box action space.

    ``exploration_noise``, ``policy_noise`` and ``noise_clip`` are fractions of the
    action half-range; ``policy_delay`` counts critic steps per actor (and target) step.
    """

    config: TD3Config

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: TD3Config | None = None,
        *,
        device: str | torch.device = "cpu",
        **overrides: object,
    ) -> None:
        cfg = resolve_config(TD3Config, config, overrides)
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

    def learn(self, batch: Batch) -> TD3TrainingStats:
        """One step of both critics; every ``policy_delay`` steps also actor and targets.

        The actor loss is computed on actor steps only: on the others ``loss_actor`` is
        :meth:`~epochtrain.stats.SequenceSummaryStats.not_measured`.
        """
        batch, obs, act, obs_next = self.prepare(batch)
        loss_critic, q_mean = self.update_critics(batch, obs, act, obs_next)
        due = self.actor_due()
        actor_stat = SequenceSummaryStats.not_measured()
        if due:
            loss_actor = self.update_actor(-self.actor_q(obs).mean())
            actor_stat = SequenceSummaryStats.single(loss_actor)
        return TD3TrainingStats(
            loss_actor=actor_stat,
            loss_critic=SequenceSummaryStats.single(loss_critic),
            q_mean=q_mean,
            actor_updated=SequenceSummaryStats.single(float(due)),
        )
