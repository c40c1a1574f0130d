"""Small networks the algorithms share: an MLP and the flat-input size of a space."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "MLP",
    "QCritic",
    "SoftUpdate",
    "box_bounds",
    "flat_dim",
    "soft_update",
    "soft_update_pairs",
]


def flat_dim(space: gym.Space[Any]) -> int:
    """Number of inputs a flat network needs for observations of ``space``."""
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Discrete):
        return 1
    raise ValueError(
        f"observation_space {space!r} is not supported by the flat MLP networks: "
        "use a Box or Discrete observation space (flatten Dict spaces with "
        "gymnasium.wrappers.FlattenObservation)"
    )


class MLP(nn.Module):
    """Fully connected network ``in_dim -> hidden... -> out_dim``; input is flattened."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden: Sequence[int] = (64, 64),
        activation: type[nn.Module] = nn.Tanh,
        out_gain: float | None = None,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        last = in_dim
        for h in hidden:
            layers += [nn.Linear(last, h), activation()]
            last = h
        out = nn.Linear(last, out_dim)
        if out_gain is not None:
            for layer in layers:
                if isinstance(layer, nn.Linear):
                    nn.init.orthogonal_(layer.weight, gain=float(np.sqrt(2)))
                    nn.init.zeros_(layer.bias)
            nn.init.orthogonal_(out.weight, gain=out_gain)
            nn.init.zeros_(out.bias)
        layers.append(out)
        self.net = nn.Sequential(*layers)
        self.in_dim = in_dim

    def forward(self, x: Tensor) -> Tensor:
        """Apply the network to ``x`` flattened to ``[batch, in_dim]``."""
        out: Tensor = self.net(x.reshape(x.shape[0], self.in_dim).float())
        return out


@torch.no_grad()
def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """Polyak update ``target <- (1 - tau) * target + tau * online`` (``tau=1``: copy)."""
    soft_update_pairs([(online, target)], tau)


@torch.no_grad()
def soft_update_pairs(pairs: Sequence[tuple[nn.Module, nn.Module]], tau: float) -> None:
    """:func:`soft_update` of every ``(online, target)`` pair, as one foreach lerp.

    One fused ``_foreach_lerp_`` over all parameters (bitwise the same as a ``lerp_`` per
    parameter) instead of one ``lerp_`` call per tensor.
    """
    SoftUpdate(pairs)(tau)


class SoftUpdate:
    """:func:`soft_update_pairs` of fixed ``(online, target)`` pairs, the tensors listed once.

    Walking the networks for their parameters costs about as much as the lerp itself, on
    every gradient step; this walks them when built. It keeps the network objects, so
    :meth:`serves` tells whether a policy's pairs are still these (a network replaced by
    assignment needs a new ``SoftUpdate``). The tensors are the networks' own, so loading
    weights or moving the networks to a device (both in place) keeps it valid.
    """

    def __init__(self, pairs: Sequence[tuple[nn.Module, nn.Module]]) -> None:
        self.pairs = list(pairs)
        self.targets: list[Tensor] = []
        self.onlines: list[Tensor] = []
        self.target_bufs: list[Tensor] = []
        self.online_bufs: list[Tensor] = []
        for online, target in self.pairs:
            target_params, target_buffers = _tensors(target)
            online_params, online_buffers = _tensors(online)
            if len(target_params) != len(online_params) or len(target_buffers) != len(
                online_buffers
            ):
                raise ValueError(
                    f"soft update: the target {type(target).__name__} and the online "
                    f"{type(online).__name__} differ in their parameters or buffers"
                )
            self.targets += target_params
            self.onlines += online_params
            self.target_bufs += target_buffers
            self.online_bufs += online_buffers

    def serves(self, pairs: Sequence[tuple[nn.Module, nn.Module]]) -> bool:
        """Whether ``pairs`` are the very network objects this was built for."""
        return len(pairs) == len(self.pairs) and all(
            a is c and b is d for (a, b), (c, d) in zip(pairs, self.pairs, strict=True)
        )

    def __call__(self, tau: float) -> None:
        """``target <- (1 - tau) * target + tau * online`` for every pair; buffers copied."""
        with torch.no_grad():
            if self.targets:
                torch._foreach_lerp_(self.targets, self.onlines, tau)
            for tb, ob in zip(self.target_bufs, self.online_bufs, strict=True):
                tb.copy_(ob)


def _tensors(module: nn.Module) -> tuple[list[Tensor], list[Tensor]]:
    """``module``'s parameters and buffers, each once, in a fixed order.

    The same tensors as ``parameters()`` and ``buffers()``, walked directly: those go
    through ``named_modules`` with a name per module, a cost paid on every gradient step.
    """
    params: list[Tensor] = []
    buffers: list[Tensor] = []
    seen: set[int] = set()
    stack = [module]
    while stack:
        m = stack.pop()
        for p in m._parameters.values():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        for b in m._buffers.values():
            if b is not None and id(b) not in seen:
                seen.add(id(b))
                buffers.append(b)
        stack.extend(c for c in reversed(m._modules.values()) if c is not None)
    return params, buffers


def box_bounds(space: gym.Space[Any]) -> tuple[Tensor, Tensor]:
    """``(center, half_range)`` of a 1-d Box with finite bounds, as float32 tensors.

    A tanh output ``u`` in (-1, 1) maps to the action ``center + half_range * u``.
    """
    if not (
        isinstance(space, gym.spaces.Box)
        and len(space.shape) == 1
        and bool(np.all(np.isfinite(space.low)))
        and bool(np.all(np.isfinite(space.high)))
    ):
        raise ValueError(
            f"action_space must be a 1-d gymnasium.spaces.Box with finite bounds, got {space!r}"
        )
    low = torch.as_tensor(space.low, dtype=torch.float32)
    high = torch.as_tensor(space.high, dtype=torch.float32)
    return (high + low) / 2, (high - low) / 2


class QCritic(nn.Module):
    """State-action value ``Q(obs, act)``: an MLP on the concatenated inputs -> ``[batch]``."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: type[nn.Module] = nn.ReLU,
    ) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.net = MLP(obs_dim + act_dim, 1, hidden, activation)

    def forward(self, obs: Tensor, act: Tensor) -> Tensor:
        """Q-values of ``act`` at ``obs``, shaped ``[batch]``."""
        flat_obs = obs.reshape(obs.shape[0], self.obs_dim).float()
        q: Tensor = self.net(torch.cat([flat_obs, act.float()], dim=-1)).squeeze(-1)
        return q
