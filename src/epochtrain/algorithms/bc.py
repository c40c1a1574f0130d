"""BC: behaviour cloning, supervised imitation of the actions stored in a dataset.

Papers: Pomerleau 1991, "Efficient Training of Artificial Neural Networks for Autonomous
Navigation" (Neural Computation 3(1), ALVINN), the original behaviour-cloning setting;
Bain & Sammut 1995, "A Framework for Behavioural Cloning".

Data flow: the offline trainer samples minibatches of ``(obs, act)`` from a fixed
replay buffer and calls :meth:`BC.learn` once per gradient step. Discrete actions are
fitted with cross-entropy on the logits; Box actions with mean squared error on a
network output squashed by ``tanh`` into the action space's bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from epochtrain.algorithms.base import Policy, TrainerKind, categorical_sample, resolve_config
from epochtrain.config import Config, param
from epochtrain.data.batch import ActResult, Batch, Obs
from epochtrain.data.spaces import unsupported_action_space_note
from epochtrain.nets import MLP, box_bounds, flat_dim
from epochtrain.stats import SequenceSummaryStats, TrainingStats

__all__ = ["BC", "BCConfig", "BCTrainingStats"]


@dataclass(kw_only=True)
class BCTrainingStats(TrainingStats):
    """Stats of BC gradient steps: cross-entropy (discrete) or MSE (continuous) loss."""

    loss: SequenceSummaryStats


@dataclass(frozen=True, kw_only=True)
class BCConfig(Config):
    """Behaviour-cloning settings: Adam lr 1e-3, a 64x64 MLP."""

    lr: float = param(1e-3, gt=0)
    """Adam learning rate."""
    hidden: tuple[int, ...] = param((64, 64), ge=1)
    """Hidden layer sizes of the MLP."""


class BC(Policy[BCTrainingStats]):
    """Behaviour cloning for a Discrete or a 1-d bounded Box action space.

    Deterministic acting takes the most likely action (discrete) or the network's
    action (continuous); stochastic acting samples from the softmax (discrete) and is
    the same as deterministic for continuous actions.
    """

    action_center: Tensor
    action_half_range: Tensor

    trainer_kinds: ClassVar[frozenset[TrainerKind]] = frozenset({"offline"})
    config: BCConfig

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: BCConfig | None = None,
        *,
        device: str | torch.device = "cpu",
        **overrides: object,
    ) -> None:
        cfg = resolve_config(BCConfig, config, overrides)
        if isinstance(action_space, gym.spaces.Discrete):
            out_dim = int(action_space.n)
            # unused: Discrete actions are not squashed
            center, half = torch.full((out_dim,), 0.5), torch.full((out_dim,), 0.5)
        elif isinstance(action_space, gym.spaces.Box):
            center, half = box_bounds(action_space, "BC")  # a Box it cannot take: says why
            out_dim = int(center.shape[0])
        else:
            raise ValueError(
                "action_space must be gymnasium.spaces.Discrete or a 1-d gymnasium.spaces.Box "
                f"with finite bounds for BC, got {action_space!r}"
                f"{unsupported_action_space_note(action_space)}"
            )
        super().__init__(observation_space, action_space, cfg, device=device)
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.net = MLP(flat_dim(observation_space), out_dim, cfg.hidden, nn.ReLU)
        # map tanh's (-1, 1) to (low, high): action = center + half_range * tanh(out)
        self.register_buffer("action_center", center)
        self.register_buffer("action_half_range", half)
        self.to(self.device)
        self.optimizers["net"] = torch.optim.Adam(self.net.parameters(), lr=cfg.lr, fused=True)

    def squash(self, out: Tensor) -> Tensor:
        """Network output mapped into the Box action bounds with ``tanh``."""
        return self.action_center + self.action_half_range * torch.tanh(out)

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        """Imitated actions for a batch of observations; no extras."""
        out = self.net(self.obs_input(obs))
        if not self.discrete:
            return self.squash(out), {}
        if deterministic:
            return out.argmax(dim=-1), {}
        return categorical_sample(out, self.act_generator), {}

    def learn(self, batch: Batch) -> BCTrainingStats:
        """One gradient step of cross-entropy (discrete) or MSE (continuous) on ``batch``."""
        batch = batch.to(self.device)
        out = self.net(self.obs_input(batch.obs))
        if self.discrete:
            loss = F.cross_entropy(out, batch.act.long().reshape(-1))
        else:
            target = batch.act.to(out.dtype).reshape(out.shape)
            loss = F.mse_loss(self.squash(out), target)
        loss_value = self.optimize("net", loss, isolated=True)
        return BCTrainingStats(loss=SequenceSummaryStats.single(loss_value))
