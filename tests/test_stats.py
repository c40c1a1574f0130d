"""Stats dataclasses: summaries, merging, aggregation over gradient steps, MovAvg."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from epochtrain.stats import (
    CollectStats,
    DeferredReads,
    MovAvg,
    SequenceSummaryStats,
    TrainingStats,
    aggregate_training_stats,
)


@dataclasses.dataclass(kw_only=True)
class LossStats(TrainingStats):
    loss: SequenceSummaryStats
    loss_critic: SequenceSummaryStats
    q_mean: SequenceSummaryStats
    note: str = ""


def step(loss: float, critic: float, q: float, note: str = "") -> LossStats:
    single = SequenceSummaryStats.single
    return LossStats(
        loss=single(loss),
        loss_critic=single(critic),
        q_mean=single(q),
        note=note,
        n_gradient_steps=1,
        train_time=0.5,
    )


def test_summary_of_a_sequence() -> None:
    s = SequenceSummaryStats.from_sequence([1.0, 2.0, 6.0])
    assert (s.mean, s.min, s.max) == (3.0, 1.0, 6.0)
    assert s.std == pytest.approx(np.std([1.0, 2.0, 6.0]))
    empty = SequenceSummaryStats.from_sequence([])
    assert all(math.isnan(v) for v in dataclasses.astuple(empty))


def test_collect_stats_merge_covers_every_part() -> None:
    a = CollectStats.from_episodes(10, [1.0, 3.0], [4, 6], collect_time=1.0)
    b = CollectStats.from_episodes(20, [], [], collect_time=1.0)
    c = CollectStats.from_episodes(5, [5.0], [5], collect_time=2.0)
    merged = CollectStats.merge([a, b, c])
    assert merged.n_collected_steps == 35 and merged.n_collected_episodes == 3
    assert merged.returns.tolist() == [1.0, 3.0, 5.0]
    assert merged.returns_stat is not None and merged.returns_stat.mean == 3.0
    assert merged.lens_stat is not None and merged.lens_stat.max == 6
    assert merged.collect_time == 4.0 and merged.collect_speed == pytest.approx(35 / 4)
    assert b.returns_stat is None  # no finished episode: no summary, not zeros


def test_loss_stats_keys_follow_the_tag_scheme() -> None:
    assert step(1.0, 2.0, 3.0).loss_stats() == {"loss": 1.0, "loss/critic": 2.0, "q_mean": 3.0}


def test_aggregate_summarises_all_gradient_steps_and_keeps_the_type() -> None:
    steps = [step(1.0, 10.0, 0.0, "a"), step(3.0, 20.0, 1.0, "b"), step(8.0, 30.0, 2.0, "c")]
    agg = aggregate_training_stats(steps, train_time=7.0)
    assert isinstance(agg, LossStats)
    assert agg.loss.mean == 4.0 and agg.loss.min == 1.0 and agg.loss.max == 8.0
    assert agg.loss.std == pytest.approx(np.std([1.0, 3.0, 8.0]))
    assert agg.loss_critic.mean == 20.0
    assert agg.n_gradient_steps == 3 and agg.train_time == 7.0
    assert agg.note == "c"
    assert aggregate_training_stats([], 0.0) is None


def test_not_measured_summaries_are_left_out_but_a_measured_nan_is_not() -> None:
    skipped = dataclasses.replace(
        step(1.0, 2.0, 3.0), loss_critic=SequenceSummaryStats.not_measured()
    )
    assert skipped.loss_stats() == {"loss": 1.0, "q_mean": 3.0}
    assert not skipped.loss_critic.measured and step(1.0, 2.0, 3.0).loss_critic.measured
    # aggregation summarises the steps that measured it
    agg = aggregate_training_stats([step(1.0, 10.0, 0.0), skipped, step(3.0, 30.0, 0.0)], 1.0)
    assert agg is not None and agg.loss_critic.measured
    assert (agg.loss_critic.mean, agg.loss_critic.min, agg.loss_critic.max) == (20.0, 10.0, 30.0)
    assert agg.loss.mean == pytest.approx(5.0 / 3) and agg.n_gradient_steps == 3
    # none measured it: neither does the aggregate, and it compares equal to another such
    none = aggregate_training_stats([skipped, skipped], 1.0)
    assert (
        none is not None
        and not none.loss_critic.measured
        and "loss/critic" not in none.loss_stats()
    )
    assert none.loss_critic == SequenceSummaryStats.not_measured()
    # a NaN that was measured still reaches the aggregate and the loss stats
    nan = aggregate_training_stats([step(1.0, math.nan, 0.0), skipped], 1.0)
    assert nan is not None and math.isnan(nan.loss_critic.mean) and math.isnan(nan.loss_critic.min)
    assert math.isnan(nan.loss_stats()["loss/critic"])


def test_movavg_ignores_nan_and_inf_and_keeps_a_window() -> None:
    avg = MovAvg(size=3)
    assert math.isnan(avg.get())
    computed_nan = float("inf") - float("inf")  # a NaN that is not the float("nan") object
    for value in [1.0, computed_nan, float("inf"), -float("inf"), 2.0, 3.0]:
        avg.add(value)
    assert avg.get() == 2.0
    avg.add(7.0)  # window of 3: [2, 3, 7]
    assert avg.get() == 4.0


def test_movavg_state_dict_round_trip() -> None:
    avg = MovAvg(size=4)
    for v in [1.0, 2.0, 3.0]:
        avg.add(v)
    other = MovAvg()
    other.load_state_dict(avg.state_dict())
    assert other.size == 4 and other.get() == 2.0
    other.add(10.0)
    other.add(10.0)
    assert other.get() == pytest.approx((2 + 3 + 10 + 10) / 4)


def test_movavg_rejects_bad_size() -> None:
    with pytest.raises(ValueError, match="size"):
        MovAvg(size=0)


def test_deferred_reads_compute_every_waiting_step_once_on_first_use() -> None:
    calls: list[list[float]] = []

    def compute(records: list[float]) -> list[list[float]]:
        calls.append(list(records))
        return [[r, 2 * r] for r in records]

    reads = DeferredReads(compute)
    first = reads.defer(1.0, 2)
    second = reads.defer(3.0, 2)
    assert calls == [] and len(reads) == 2  # nothing computed until a number is read
    assert second[1].mean == 6.0
    assert calls == [[1.0, 3.0]] and len(reads) == 0  # one call for both steps
    assert first[0].mean == 1.0 and first[1].max == 2.0 and first[1].std == 0.0
    assert calls == [[1.0, 3.0]]
    # a filled summary is a plain one: equal to, printed and serialised as one
    assert first[0] == SequenceSummaryStats.single(1.0)
    assert type(first[0]) is SequenceSummaryStats and "Deferred" not in repr(first[0])
    assert dataclasses.asdict(second[0]) == {"mean": 3.0, "std": 0.0, "min": 3.0, "max": 3.0}
    reads.read()  # nothing waits: no call
    assert len(calls) == 1


def test_deferred_reads_hold_at_most_max_records() -> None:
    sizes: list[int] = []

    def compute(records: list[int]) -> list[list[float]]:
        sizes.append(len(records))
        return [[float(r)] for r in records]

    reads = DeferredReads(compute, max_records=4)
    stats = [reads.defer(i, 1)[0] for i in range(10)]  # never read by the loop
    assert sizes == [4, 4] and len(reads) == 2
    assert [s.mean for s in stats] == [float(i) for i in range(10)]
    assert sizes == [4, 4, 2]


def test_a_deferred_summary_counts_as_measured_and_aggregates() -> None:
    reads = DeferredReads(lambda records: [[r] for r in records])
    one = SequenceSummaryStats.single
    per_step = [
        LossStats(loss=reads.defer(v, 1)[0], loss_critic=one(1.0), q_mean=one(0.0))
        for v in (1.0, 3.0)
    ]
    assert per_step[0].loss_stats()["loss"] == 1.0
    total = aggregate_training_stats(per_step, train_time=0.0)
    assert total is not None and total.loss.mean == 2.0 and total.loss.max == 3.0
