"""Log tags: the four scopes and the flattening of typed stats into ``{tag: float}``.

Each record belongs to one scope, whose steps carry its unit (``train``/``test``: env
steps, ``update``: gradient steps, ``info``: epochs). The trainer's typed stats
(:mod:`epochtrain.stats`) become stable tags (``train/returns_stat/mean``,
``update/loss/actor``, ``info/env_step``, ...); every tag is documented in
``docs/logging.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

import numpy as np

from epochtrain.stats import CollectStats, InfoStats, SequenceSummaryStats, TrainingStats

__all__ = [
    "SCOPES",
    "Scope",
    "collect_stats_to_tags",
    "flatten_dataclass",
    "info_stats_to_tags",
    "tag_scope",
    "training_stats_to_tags",
    "video_scope",
]

Scope = Literal["train", "test", "update", "info"]
"""The four tag namespaces; each record belongs to exactly one."""

SCOPES: tuple[Scope, ...] = ("train", "test", "update", "info")
"""All scopes, in the order they appear in :meth:`BaseLogger.state_dict`."""


def flatten_dataclass(obj: object, prefix: str) -> dict[str, float]:
    """Flatten a dataclass instance into ``{"<prefix>/<field>[/<subfield>...]": float}``.

    Generic over the instance's fields: numbers become floats, nested dataclasses and
    ``dict``s of numbers are flattened with ``/``; ``None``, arrays, booleans and any other
    value are skipped (the raw ``returns``/``lens`` arrays of :class:`CollectStats` carry
    no single number to plot).
    """
    out: dict[str, float] = {}
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"flatten_dataclass needs a dataclass instance, got {type(obj)!r}")
    for f in dataclasses.fields(obj):
        _flatten_value(getattr(obj, f.name), f"{prefix}/{f.name}", out)
    return out


def _flatten_value(value: object, tag: str, out: dict[str, float]) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float, np.integer, np.floating)):
        out[tag] = float(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        out.update(flatten_dataclass(value, tag))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _flatten_value(item, f"{tag}/{key}", out)


def collect_stats_to_tags(stats: CollectStats, scope: Literal["train", "test"]) -> dict[str, float]:
    """Tags of one collection: ``<scope>/returns_stat/mean``, ``<scope>/n_collected_steps``, ...

    Summary stats that are ``None`` (no episode finished) are left out.
    """
    return flatten_dataclass(stats, scope)


def training_stats_to_tags(stats: TrainingStats) -> dict[str, float]:
    """Tags of one update step.

    Every :class:`SequenceSummaryStats` field becomes its mean over the update's gradient
    steps, named by ``stats.loss_stats()`` (``update/loss/<part>``, ``update/approx_kl``);
    ``smoothed_loss`` becomes ``update/smoothed/<key>``; every other numeric field
    ``update/<field>`` (``update/train_time``, ``update/n_gradient_steps``, ...).
    """
    out = {f"update/{key}": float(value) for key, value in stats.loss_stats().items()}
    for key, value in stats.smoothed_loss.items():
        _flatten_value(value, f"update/smoothed/{key}", out)
    for f in dataclasses.fields(stats):
        value = getattr(stats, f.name)
        if f.name == "smoothed_loss" or isinstance(value, SequenceSummaryStats):
            continue
        _flatten_value(value, f"update/{f.name}", out)
    return out


def info_stats_to_tags(stats: InfoStats) -> dict[str, float]:
    """Tags of the run totals: ``info/<field>`` for every numeric :class:`InfoStats` field."""
    return flatten_dataclass(stats, "info")


def tag_scope(tag: str) -> Scope | None:
    """The scope a tag belongs to (``"update/loss"`` -> ``"update"``), ``None`` if none."""
    head = tag.split("/", 1)[0]
    for scope in SCOPES:
        if scope == head:
            return scope
    return None


def video_scope(tag: str) -> Scope:
    """The scope of a video ``tag`` (``"test/video"`` -> ``"test"``); unknown scopes raise."""
    head = tag.split("/", 1)[0] if isinstance(tag, str) else None
    for scope in SCOPES:
        if scope == head and "/" in tag:
            return scope
    raise ValueError(f"tag must be '<scope>/<name>' with a scope in {SCOPES}, got {tag!r}")
