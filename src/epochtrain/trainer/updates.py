"""Update steps: a trainer's gradient steps, the non-finite check and moving averages of
their stats, and an update step's aggregated stats (:class:`~epochtrain.trainer.base.
BaseTrainer`'s ``_learn`` and ``_finish_update`` call these).

What ``Policy.learn`` returns is checked when its type first shows up (:func:`check_stats`):
a custom policy's mistake (``None``, a dict, a bare ``TrainingStats``, a float loss field)
is named at its first gradient step, not ten frames deep or never.
"""

from __future__ import annotations

import dataclasses
import math
import time
import types
import typing
from typing import TYPE_CHECKING, Any

import torch

from epochtrain.algorithms.base import Policy
from epochtrain.data.batch import Batch
from epochtrain.errors import NonFiniteError
from epochtrain.stats import (
    SequenceSummaryStats,
    TrainingStats,
    TTrainingStats,
    aggregate_training_stats,
)
from epochtrain.trainer.safety import on_nonfinite

if TYPE_CHECKING:
    from epochtrain.trainer.base import BaseTrainer

__all__ = ["after_gradient_step", "check_stats", "finish_update", "learn", "read_steps"]


def learn(trainer: BaseTrainer[TTrainingStats], batch: Batch) -> Batch:
    """One gradient step; its stats join the current update and epoch.

    Fires ``process_optim_batch`` (its result is learned from and returned), then after
    ``learn``: ``post_loss``, ``post_optim`` and ``post_optim_log``.
    """
    ops = trainer._ops.ops  # the plain dict: no method call per gradient step
    if ops["process_optim_batch"]:
        batch = trainer._ops.process("process_optim_batch", batch)
    if trainer._finished:  # request_stop or on_nonfinite="stop" in this update step:
        return batch  # the rest of it is dropped
    start = time.perf_counter()
    try:
        stats = trainer.policy.learn(batch)
    except NonFiniteError as exc:
        on_nonfinite(trainer, exc, f"gradient step {trainer.state.gradient_step + 1}")
        return batch
    if type(stats) is not trainer._checked_stats_type:  # the first step (one test per step)
        check_stats(trainer.policy, stats)
        trainer._checked_stats_type = type(stats)
    stats.train_time = time.perf_counter() - start
    trainer.state.gradient_step += 1
    trainer._pending_steps.append(stats)
    if ops["post_loss"] or ops["post_optim"] or ops["post_optim_log"]:
        read_steps(trainer)  # hooks that see every step read its stats now
        after_gradient_step(trainer, stats)
    return batch


def read_steps(trainer: BaseTrainer[Any]) -> None:
    """Read the stats of the update step's gradient steps not read yet: the non-finite
    check and the moving averages, in step order.

    Called once per update step (at its end) unless hooks see every gradient step: a
    policy's stats may be computed and read back then (:class:`~epochtrain.stats.
    DeferredReads`), so a non-finite statistic is found at the end of the update
    step (the loss an optimizer steps on is checked before its step, in ``optimize``).
    """
    steps, first = trainer._pending_steps, trainer._n_read_steps
    trainer._n_read_steps = len(steps)
    for i in range(first, len(steps)):
        for key, value in steps[i].loss_stats().items():
            if not math.isfinite(value) and trainer.params.on_nonfinite != "skip":
                step = trainer.state.gradient_step - (len(steps) - 1 - i)
                # a reported statistic: what an optimizer stepped on was checked in optimize
                what = f"{type(trainer.policy).__name__}.learn's statistic {key!r} is {value}"
                bad = NonFiniteError(what, where=f"statistic {key!r}")
                on_nonfinite(trainer, bad, f"gradient step {step}", applied=True)
            trainer._mov_avg[key].add(value)


def after_gradient_step(trainer: BaseTrainer[Any], stats: TrainingStats) -> None:
    trainer._ops.call("post_loss", stats)
    trainer._ops.call("post_optim")
    trainer._log_ops("post_optim_log", "update", trainer.state.gradient_step, stats)


def finish_update(
    trainer: BaseTrainer[TTrainingStats], update_time: float
) -> TTrainingStats | None:
    """Aggregate the gradient steps of this update step, log them, return them."""
    trainer.state.update_time += update_time
    trainer._epoch_update_time += update_time
    read_steps(trainer)
    steps, trainer._pending_steps, trainer._n_read_steps = trainer._pending_steps, [], 0
    trainer._epoch_steps.extend(steps)
    stats = aggregate_training_stats(steps, update_time)
    if stats is not None:
        stats.smoothed_loss = trainer._smoothed()
        trainer.logger.log_update_data(stats, trainer.state.gradient_step)
    return stats


_BASE_FIELDS = frozenset(f.name for f in dataclasses.fields(TrainingStats))


def check_stats(policy: Policy[Any], stats: object) -> None:
    """Raise ``TypeError`` naming the fix if ``stats`` (what ``policy.learn`` returned) is
    not a ``TrainingStats``, not the stats class ``policy`` declares (``Policy[MyStats]``),
    or has a field typed ``SequenceSummaryStats`` holding something else (a float, a
    tensor), or a tensor that is part of an autograd graph in any field.

    Run when a type of stats first shows up (the first gradient step), not on every step.
    """
    name = f"{type(policy).__qualname__}.learn"
    declared = declared_stats_type(type(policy))
    wanted = (declared or TrainingStats).__name__
    if not isinstance(stats, TrainingStats):
        raise TypeError(
            f"{name} returned {_short(stats)} (a {type(stats).__name__}), not training stats: "
            f"return a {wanted}(...) from every gradient step, each loss as "
            "SequenceSummaryStats.single(loss.item())"
        )
    if declared is not None and not isinstance(stats, declared):
        raise TypeError(
            f"{name} returned a {type(stats).__name__}, but {type(policy).__name__} is a "
            f"Policy[{wanted}]: return a {wanted}(...) (its fields are the losses logged; "
            f"a bare {type(stats).__name__} logs none of them)"
        )
    hints = _field_hints(type(stats))
    for f in dataclasses.fields(stats):
        if f.name in _BASE_FIELDS:
            continue
        value = getattr(stats, f.name)
        summary, nullable = hints.get(f.name, (False, False))
        if summary and not isinstance(value, SequenceSummaryStats):
            if value is None and nullable:
                continue
            allowed = "a SequenceSummaryStats or None" if nullable else "a SequenceSummaryStats"
            raise TypeError(
                f"{name} returned {type(stats).__name__}.{f.name} = {_short(value)} (a "
                f"{type(value).__name__}); it must be {allowed}: wrap the number as "
                f"{f.name}=SequenceSummaryStats.single(loss.item()) (.item() also detaches "
                "it from the graph), or SequenceSummaryStats.not_measured() for a step that "
                "did not compute it"
            )
        if isinstance(value, torch.Tensor) and value.requires_grad:
            raise TypeError(
                f"{name} returned {type(stats).__name__}.{f.name} = {_short(value)}, a tensor "
                "that is part of an autograd graph (the stats would keep every step's graph "
                f"alive): store {f.name}=SequenceSummaryStats.single(value.item()), or "
                "value.detach()"
            )


def declared_stats_type(policy_cls: type[Policy[Any]]) -> type[TrainingStats] | None:
    """The stats class ``policy_cls`` declares (``class MyPG(Policy[MyStats])``: ``MyStats``),
    from the nearest generic base that names a class; None if none does."""
    for cls in policy_cls.__mro__:
        for base in cls.__dict__.get("__orig_bases__", ()):
            origin = typing.get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Policy):
                for arg in typing.get_args(base):
                    if isinstance(arg, type) and issubclass(arg, TrainingStats):
                        return arg
    return None


def _field_hints(cls: type[TrainingStats]) -> dict[str, tuple[bool, bool]]:
    """``{field: (typed SequenceSummaryStats, None allowed)}`` from the class's annotations
    (their text, when they cannot be resolved: a class defined inside a function)."""
    try:
        resolved: dict[str, Any] = typing.get_type_hints(cls)
    except (NameError, TypeError):
        resolved = {}
    out: dict[str, tuple[bool, bool]] = {}
    for f in dataclasses.fields(cls):
        hint = resolved.get(f.name, f.type)
        if isinstance(hint, str):
            out[f.name] = ("SequenceSummaryStats" in hint, "None" in hint)
            continue
        args = typing.get_args(hint) if _is_union(hint) else (hint,)
        summary = any(isinstance(a, type) and issubclass(a, SequenceSummaryStats) for a in args)
        out[f.name] = (summary, type(None) in args)
    return out


def _is_union(hint: object) -> bool:
    return isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
