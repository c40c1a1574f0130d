"""Update steps: a trainer's gradient steps, the non-finite check and moving averages of
their stats, and an update step's aggregated stats (:class:`~epochtrain.trainer.base.
BaseTrainer`'s ``_learn`` and ``_finish_update`` call these)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from epochtrain.data.batch import Batch
from epochtrain.errors import NonFiniteError
from epochtrain.stats import TrainingStats, TTrainingStats, aggregate_training_stats
from epochtrain.trainer.safety import on_nonfinite

if TYPE_CHECKING:
    from epochtrain.trainer.base import BaseTrainer

__all__ = ["after_gradient_step", "finish_update", "learn", "read_steps"]


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
                bad = NonFiniteError(f"the loss {key!r} is {value}", where=f"loss {key!r}")
                on_nonfinite(trainer, bad, f"gradient step {step}")
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
