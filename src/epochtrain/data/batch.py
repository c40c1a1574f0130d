"""Batch: a small typed container of transition tensors, cheap to build and index.

Fixed fields are the transition (``obs, act, rew, terminated, truncated, obs_next``);
optional extras are what algorithms declare (``logp, value, adv, ret, weight``) and the
buffer's ``valid`` mask. Observations may be tensors or nested dicts of tensors (for
``gymnasium.spaces.Dict``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import torch
from torch import Tensor

__all__ = ["EXTRA_FIELDS", "ActResult", "Batch", "Obs", "obs_map"]

Obs: TypeAlias = "Tensor | dict[str, Obs]"
"""An observation batch: a tensor or a nested dict of tensors."""

ActResult = tuple[Tensor, dict[str, Tensor]]
"""Actions for the env plus extras (``logp``, ``value``, ...) to store with the transition."""

EXTRA_FIELDS = ("logp", "value", "adv", "ret", "weight", "valid")
"""Optional per-transition fields an algorithm or the buffer may fill."""


def obs_map(fn: Callable[[Tensor], Tensor], obs: Obs) -> Obs:
    """Apply ``fn`` to every tensor of a (possibly nested) observation."""
    if isinstance(obs, Tensor):
        return fn(obs)
    return {k: obs_map(fn, v) for k, v in obs.items()}


def _leaves(obs: Obs) -> list[Tensor]:
    if isinstance(obs, Tensor):
        return [obs]
    return [t for v in obs.values() for t in _leaves(v)]


def _first_tensor(obs: Obs) -> Tensor:
    while not isinstance(obs, Tensor):
        obs = next(iter(obs.values()))
    return obs


_INDEX_DTYPES = (torch.int64, torch.int32)


@dataclass
class Batch:
    """Transitions with a common leading shape (``[n]`` or ``[time, env]``)."""

    obs: Obs
    act: Tensor
    rew: Tensor
    terminated: Tensor
    truncated: Tensor
    obs_next: Obs
    logp: Tensor | None = None
    value: Tensor | None = None
    adv: Tensor | None = None
    ret: Tensor | None = None
    weight: Tensor | None = None
    valid: Tensor | None = None
    index: Tensor | None = None
    """Flat buffer indices (``time * num_envs + env``) of sampled transitions."""
    discount: Tensor | None = None
    """Per-transition bootstrap factor on ``obs_next`` (n-step: ``gamma ** m``, 0 if terminated)."""

    def __len__(self) -> int:
        return int(self.rew.shape[0])

    @property
    def done(self) -> Tensor:
        """``terminated | truncated``: where an episode ended."""
        return self.terminated | self.truncated

    def map(self, fn: Callable[[Tensor], Tensor]) -> Batch:
        """A new batch with ``fn`` applied to every tensor (observations included)."""

        def opt(t: Tensor | None) -> Tensor | None:
            return None if t is None else fn(t)

        return Batch(
            obs=obs_map(fn, self.obs),
            act=fn(self.act),
            rew=fn(self.rew),
            terminated=fn(self.terminated),
            truncated=fn(self.truncated),
            obs_next=obs_map(fn, self.obs_next),
            logp=opt(self.logp),
            value=opt(self.value),
            adv=opt(self.adv),
            ret=opt(self.ret),
            weight=opt(self.weight),
            valid=opt(self.valid),
            index=opt(self.index),
            discount=opt(self.discount),
        )

    def __getitem__(self, index: Tensor | slice | int) -> Batch:
        """The rows ``index`` (a slice, an int, a bool mask or integer indices) of every
        field. Integer index tensors go through ``index_select`` (the same rows as
        ``t[index]`` at about two thirds of its cost per field)."""
        if isinstance(index, Tensor) and index.dim() == 1 and index.dtype in _INDEX_DTYPES:
            return self.map(lambda t: t.index_select(0, index))
        return self.map(lambda t: t[index])

    def to(self, device: torch.device | str) -> Batch:
        """The batch on ``device``: ``self`` when every tensor is there already."""
        dev = torch.device(device)
        if all(t.device == dev for t in self.tensors()):
            return self
        return self.map(lambda t: t.to(dev))

    def tensors(self) -> list[Tensor]:
        """Every tensor of the batch (observations' leaves included), None fields left out."""
        out: list[Tensor] = []
        for value in (self.obs, self.obs_next):
            if isinstance(value, Tensor):
                out.append(value)
            else:
                out.extend(_leaves(value))
        fields = (self.act, self.rew, self.terminated, self.truncated, self.logp, self.value)
        for t in (*fields, self.adv, self.ret, self.weight, self.valid, self.index, self.discount):
            if t is not None:
                out.append(t)
        return out

    def flatten(self) -> Batch:
        """Merge the two leading dims ``[time, env]`` into one."""
        return self.map(lambda t: t.reshape(-1, *t.shape[2:]))

    @property
    def shape(self) -> torch.Size:
        """Leading shape of the batch (that of ``rew``)."""
        return self.rew.shape

    def obs_batch_size(self) -> int:
        """Leading size of the observation tensors."""
        return int(_first_tensor(self.obs).shape[0])
