"""Stats a policy defers (DeferredReads) are read once per update step, in step order; a
hook that sees every gradient step reads them at that step; a non-finite one is found
at the end of the update step, naming its gradient step."""

from __future__ import annotations

import math
from typing import Any

import pytest

from epochtrain.errors import NonFiniteError
from epochtrain.stats import DeferredReads
from tests.trainer.tiny import TinyPolicy, TinyStats, build


class DeferringPolicy(TinyPolicy):
    """TinyPolicy whose ``loss_extra`` is deferred: its value is the step's number, or
    NaN at step ``nan_at``; ``reads`` records the size of every batched read."""

    def __init__(self, *args: Any, nan_at: int | None = None) -> None:
        super().__init__(*args)
        self.nan_at = nan_at
        self.reads: list[list[int]] = []
        self.steps = 0
        self.deferred = DeferredReads(self.compute)

    def compute(self, records: list[int]) -> list[list[float]]:
        self.reads.append(list(records))
        return [[math.nan if r == self.nan_at else float(r)] for r in records]

    def learn(self, batch: Any) -> TinyStats:
        stats = super().learn(batch)
        self.steps += 1
        (stats.loss_extra,) = self.deferred.defer(self.steps, 1)
        return stats


def deferring_trainer(nan_at: int | None = None, **kwargs: Any) -> Any:
    trainer = build("off", max_epoch=1, **kwargs)
    old = trainer.policy
    policy = DeferringPolicy(trainer.train_collector.env, nan_at=nan_at)
    policy.load_state_dict(old.state_dict())
    trainer.policy = trainer.train_collector.policy = trainer.test_collector.policy = policy
    return trainer, policy


def test_deferred_stats_are_read_once_per_update_step_in_step_order() -> None:
    trainer, policy = deferring_trainer()
    stats = next(trainer)
    # 10 env steps per collect x update_per_step 0.5: 5 gradient steps per update step
    assert policy.reads and all(len(r) == 5 for r in policy.reads)
    assert [s for r in policy.reads for s in r] == list(range(1, trainer.state.gradient_step + 1))
    extra = stats.training_stat.loss_extra
    assert extra.min == 1.0 and extra.max == trainer.state.gradient_step
    smoothed = stats.training_stat.smoothed_loss["loss/extra"]
    assert smoothed == pytest.approx((1 + trainer.state.gradient_step) / 2)


def test_a_hook_that_sees_every_step_reads_its_stats_at_that_step() -> None:
    seen: list[float] = []
    trainer, policy = deferring_trainer()
    trainer.register_op("post_loss", lambda stats: seen.append(stats.loss_extra.mean))
    next(trainer)
    assert all(len(r) == 1 for r in policy.reads)  # read one step at a time
    assert seen == [float(i) for i in range(1, trainer.state.gradient_step + 1)]


def test_a_nonfinite_deferred_stat_raises_at_the_end_of_its_update_naming_its_step() -> None:
    trainer, _ = deferring_trainer(nan_at=7)  # the 2nd of the update steps 6..10
    with pytest.raises(NonFiniteError, match="'loss/extra' is nan at gradient step 7"):
        next(trainer)
    assert trainer.state.gradient_step == 10  # the update step ran to its end


def test_a_nonfinite_deferred_stat_with_stop_ends_the_run() -> None:
    trainer, _ = deferring_trainer(nan_at=3, on_nonfinite="stop")
    next(trainer)
    assert trainer.stop_reason == "nonfinite"
    assert "gradient step 3" in (trainer.nonfinite_message or "")
    assert trainer.state.gradient_step == 5
