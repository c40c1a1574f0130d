"""Small networks the algorithms share: an MLP, Q critics (alone or as one ensemble), target
updates, and the spaces they take: the flat-input size of an observation space and the bounds
of a Box of actions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "MLP",
    "EnsembleMLP",
    "EnsembleQCritic",
    "QCritic",
    "SoftUpdate",
    "all_outputs",
    "box_bounds",
    "check_has_elements",
    "clip_grad_norm",
    "flat_dim",
    "is_uint8_pixels",
    "one_d_box_hint",
    "q_value",
    "q_values",
    "soft_update",
    "soft_update_pairs",
]


def flat_dim(space: gym.Space[Any]) -> int:
    """Number of inputs a flat network needs for observations of ``space``, as
    :meth:`~epochtrain.algorithms.base.Policy.obs_input` encodes them: a Box's element
    count; a ``Discrete(n)``'s ``n`` (one-hot, as Stable-Baselines3's ``preprocess_obs``)."""
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    raise ValueError(
        f"observation_space {space!r} is not supported by the flat MLP networks: "
        "use a Box or Discrete observation space (flatten Dict, Tuple, MultiBinary and "
        "MultiDiscrete spaces with gymnasium.wrappers.FlattenObservation)"
    )


def is_uint8_pixels(space: gym.Space[Any]) -> bool:
    """Whether ``space`` is a Box of uint8 over the full range ``[0, 255]`` in every element
    (pixel intensities, whatever the shape): ``Policy.obs_input`` scales such observations
    to ``[0, 1]``.

    Stable-Baselines3's ``is_image_space`` asks the same of dtype and bounds, and also a
    3-d shape, because it picks a CNN too; every network here is an MLP on the flattened
    observation, so a 2-d grayscale frame or a 1-d byte vector (Atari RAM) is scaled as
    well. A uint8 Box with other bounds (codes such as ``Box(0, 10)``) is fed as is.
    """
    return (
        isinstance(space, gym.spaces.Box)
        and space.dtype == np.uint8
        and bool(np.all(space.low == 0))
        and bool(np.all(space.high == 255))
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


def clip_grad_norm(params: Iterable[Tensor], max_norm: float) -> float:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm)`` (2-norm), bitwise the same
    gradients and norm, returning the total norm as a Python float.

    Most gradient steps are not clipped: torch then multiplies every gradient by a clamped
    coefficient of 1.0, after grouping the tensors by device and dtype in Python. Here one
    ``_foreach_norm`` and one read-back of the total decide: a total clearly under
    ``max_norm`` (by a relative 1e-5, far beyond float32 rounding) leaves the gradients as
    they are, which is what torch's multiplication by exactly 1.0 does; any other total
    (near the bound, above it, NaN or inf) scales them with torch's own coefficient
    ``min(max_norm / (total + 1e-6), 1)``. Gradients spread over several devices or dtypes,
    or sparse ones, go to torch's function. About 60 microseconds less per step on the
    small networks of the presets (measured on a 2-core CPU, 2026-11-27).
    """
    params = list(params)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    first = grads[0]
    if first.device.type not in ("cpu", "cuda") or any(
        g.is_sparse or g.device != first.device or g.dtype != first.dtype for g in grads
    ):
        return float(nn.utils.clip_grad_norm_(params, max_norm).item())
    with torch.no_grad():
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        value = float(total.item())
        if not value + 1e-6 < max_norm * (1.0 - 1e-5):
            torch._foreach_mul_(grads, (max_norm / (total + 1e-6)).clamp(max=1.0))
    return value


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


def box_bounds(space: gym.Space[Any], algo: str = "this policy") -> tuple[Tensor, Tensor]:
    """``(center, half_range)`` of a 1-d float Box, as float32 tensors; raises ``ValueError``
    naming ``algo`` and the fix for any other space, or for bounds not finite in float32.

    A tanh output ``u`` in (-1, 1) maps to the action ``center + half_range * u``.
    """
    box = _one_d_float_box(space, algo)
    low = torch.as_tensor(box.low, dtype=torch.float32)
    high = torch.as_tensor(box.high, dtype=torch.float32)
    center, half_range = (high + low) / 2, (high - low) / 2
    if not bool(torch.isfinite(center).all() and torch.isfinite(half_range).all()):
        if not np.isfinite(box.low).all() or not np.isfinite(box.high).all():
            raise ValueError(  # RescaleAction refuses infinite bounds: not the fix here
                f"action_space {box!r} has infinite bounds, whose centre and half-range are "
                f"not finite in float32, and {algo} scales its actions to the bounds: if the "
                "env is wrapped in gymnasium's ClipAction, remove it (it widens the action "
                "space to (-inf, inf); SAC, TD3 and DDPG keep their actions within the env's "
                "bounds already); an env whose own action space is unbounded needs finite "
                "bounds set in the env (gymnasium's RescaleAction refuses infinite bounds)"
            )
        raise ValueError(
            f"action_space {box!r} has bounds whose centre or half-range is not finite in "
            "float32, the networks' precision: give the env smaller finite bounds, e.g. "
            "rescale its actions with gymnasium.wrappers.RescaleAction(env, -1.0, 1.0)"
        )
    flat = np.flatnonzero((low >= high).numpy())
    if len(flat):
        raise ValueError(
            f"action_space {box!r} has low >= high in dimension(s) {flat.tolist()} (compared "
            "in float32): such a dimension has one action or none; drop it from the env's "
            "action space"
        )
    return center, half_range


def check_has_elements(space: gym.Space[Any], name: str) -> None:
    """Refuse a Box ``space`` with no elements (a 0 in its shape), naming it as ``name``."""
    if isinstance(space, gym.spaces.Box) and 0 in space.shape:
        raise ValueError(
            f"{name} {space!r} has no elements (shape {space.shape}), so a network has no "
            f"input or output for it: give the env an {name} of at least one element"
        )


def _one_d_float_box(space: gym.Space[Any], algo: str) -> gym.spaces.Box:
    """``space`` if it is a 1-d Box of floats; else a ``ValueError`` naming the fix."""
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(
            f"action_space must be a 1-d gymnasium.spaces.Box for {algo}, got {space!r}"
        )
    check_has_elements(space, "action_space")
    if len(space.shape) != 1:
        raise ValueError(one_d_box_hint(space, algo))
    if space.dtype.kind != "f":
        raise ValueError(
            f"action_space {space!r} holds {space.dtype} actions; {algo}'s actions are "
            "real numbers: give the env a float Box (and round in the env), or use an "
            "algorithm for Discrete actions"
        )
    return space


def one_d_box_hint(space: gym.spaces.Box, algo: str) -> str:
    """The refusal of an action Box that is not 1-d by ``algo``, with the wrapper that makes
    the env's actions 1-d."""
    size = int(np.prod(space.shape))
    return (
        f"action_space {space!r} has shape {space.shape}, and {algo} needs a 1-d Box: "
        f"give the env actions of shape ({size},), e.g. gymnasium.wrappers.TransformAction("
        f"env, lambda a: a.reshape({space.shape}), Box(low.reshape(-1), high.reshape(-1))) "
        "with the env's low and high"
    )


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


class _Ensemble(nn.Module):
    """Base of the ensembles: loading a state dict of separate networks (``{prefix}0.net``
    ...), as epochtrain saved twin critics before ensembles, fails with a message saying so."""

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        _reject_separate(state_dict, prefix, error_msgs)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


def _reject_separate(state_dict: dict[str, Any], prefix: str, error_msgs: list[str]) -> None:
    """Explain a state dict of separate networks (``{prefix}0.net...``) loaded into an
    ensemble at ``prefix``: epochtrain saved twin critics so before ensembles."""
    old = next((k for k in state_dict if k.startswith(f"{prefix}0.net.")), None)
    if old is not None:
        error_msgs.append(
            f"{old!r} is a weight of separate critic networks, saved before epochtrain "
            "evaluated its critics as one ensemble: this version cannot load it; load it "
            "with the epochtrain version that wrote it"
        )


class EnsembleMLP(_Ensemble):
    """``n`` :class:`MLP` of one shape evaluated as one network.

    Layer ``k`` of every member is one weight ``weight_k`` shaped ``[n, in, out]`` and one
    bias ``bias_k`` shaped ``[n, 1, out]``, applied to all members with one batched matmul
    (``baddbmm``): twin critics cost about two thirds of two separate networks on a small
    CPU network, forward and backward. The members start as ``n`` :class:`MLP` built one
    after the other would (the same initialisation and random draws).
    """

    def __init__(
        self,
        n: int,
        in_dim: int,
        out_dim: int,
        hidden: Sequence[int] = (64, 64),
        activation: type[nn.Module] = nn.ReLU,
    ) -> None:
        super().__init__()
        if n < 1:
            raise ValueError(f"an ensemble needs n >= 1 members, got n={n}")
        members = [MLP(in_dim, out_dim, hidden, activation) for _ in range(n)]
        linears = [[m for m in member.net if isinstance(m, nn.Linear)] for member in members]
        self.n, self.in_dim, self.out_dim = n, in_dim, out_dim
        self.activation = activation()
        self._names: list[tuple[str, str]] = []
        for k in range(len(linears[0])):
            weight = torch.stack([lin[k].weight.detach().T for lin in linears]).contiguous()
            bias = torch.stack([lin[k].bias.detach() for lin in linears]).unsqueeze(1)
            self._names.append((f"weight_{k}", f"bias_{k}"))
            self.register_parameter(f"weight_{k}", nn.Parameter(weight))
            self.register_parameter(f"bias_{k}", nn.Parameter(bias))

    def layers(self) -> list[tuple[Tensor, Tensor]]:
        """``(weight_k, bias_k)`` of every layer, first to last: ``[n, in, out]`` and
        ``[n, 1, out]``; member ``i``'s layer computes ``x @ weight_k[i] + bias_k[i]``."""
        params = self._parameters  # one dict lookup per tensor, whatever moved or loaded
        out: list[tuple[Tensor, Tensor]] = []
        for weight_name, bias_name in self._names:
            weight, bias = params[weight_name], params[bias_name]
            assert weight is not None and bias is not None
            out.append((weight, bias))
        return out

    def forward(self, x: Tensor) -> Tensor:
        """Every member's output for ``x`` (``[batch, ...]``, flattened), ``[n, batch, out]``."""
        h = x.reshape(x.shape[0], self.in_dim).float().expand(self.n, -1, -1)
        layers = self.layers()
        for k, (weight, bias) in enumerate(layers, start=1 - len(layers)):
            h = torch.baddbmm(bias, h, weight)
            if k:  # not the last layer
                h = self.activation(h)
        return h

    def member(self, i: int, x: Tensor) -> Tensor:
        """Member ``i``'s output for ``x``, ``[batch, out]`` (the others are not computed)."""
        h = x.reshape(x.shape[0], self.in_dim).float()
        layers = self.layers()
        for k, (weight, bias) in enumerate(layers, start=1 - len(layers)):
            h = torch.addmm(bias[i], h, weight[i])
            if k:
                h = self.activation(h)
        return h


class EnsembleQCritic(_Ensemble):
    """``n`` :class:`QCritic` of one shape as one :class:`EnsembleMLP`: ``Q_i(obs, act)``
    of every member in one pass, ``[n, batch]``."""

    def __init__(
        self,
        n: int,
        obs_dim: int,
        act_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: type[nn.Module] = nn.ReLU,
    ) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.net = EnsembleMLP(n, obs_dim + act_dim, 1, hidden, activation)

    def __len__(self) -> int:
        return self.net.n

    def _inputs(self, obs: Tensor, act: Tensor) -> Tensor:
        return torch.cat([obs.reshape(obs.shape[0], self.obs_dim).float(), act.float()], dim=-1)

    def forward(self, obs: Tensor, act: Tensor) -> Tensor:
        """Every critic's Q-value of ``act`` at ``obs``, ``[n, batch]``."""
        q: Tensor = self.net(self._inputs(obs, act))
        return q.squeeze(-1)

    def member(self, i: int, obs: Tensor, act: Tensor) -> Tensor:
        """Critic ``i``'s Q-values, ``[batch]`` (the others are not computed)."""
        return self.net.member(i, self._inputs(obs, act)).squeeze(-1)


def q_values(critics: nn.Module, obs: Tensor, act: Tensor) -> Tensor:
    """Every critic's ``Q(obs, act)``, ``[n, batch]``: one pass of an
    :class:`EnsembleQCritic`, or a stack over a ``ModuleList`` of critics (a user's)."""
    if isinstance(critics, EnsembleQCritic):
        out: Tensor = critics(obs, act)
        return out
    return torch.stack([critic(obs, act) for critic in _members(critics)])


def q_value(critics: nn.Module, i: int, obs: Tensor, act: Tensor) -> Tensor:
    """Critic ``i``'s ``Q(obs, act)``, ``[batch]`` (:func:`q_values`' ``[i]``, computing
    only that critic)."""
    if isinstance(critics, EnsembleQCritic):
        return critics.member(i, obs, act)
    out: Tensor = _members(critics)[i](obs, act)
    return out


def all_outputs(networks: nn.Module, obs: Tensor) -> Tensor:
    """Every network's output for ``obs``, ``[n, batch, out]``: one pass of an
    :class:`EnsembleMLP`, or a stack over a ``ModuleList`` (discrete SAC's critics)."""
    if isinstance(networks, EnsembleMLP):
        out: Tensor = networks(obs)
        return out
    return torch.stack([net(obs) for net in _members(networks)])


def _members(networks: nn.Module) -> nn.ModuleList:
    if not isinstance(networks, nn.ModuleList):
        raise TypeError(
            f"critics must be an EnsembleQCritic, an EnsembleMLP or an nn.ModuleList of "
            f"networks, got {type(networks).__name__}"
        )
    return networks
