"""Typed statistics the trainers return: collect, training, info and per-epoch stats.

Every class is a plain ``@dataclass`` so ``dataclasses.asdict`` serialises it. Data flows
one way: the collector fills :class:`CollectStats`, a policy's ``learn`` fills a
:class:`TrainingStats` subclass per gradient step, the trainer aggregates those and wraps
everything into an :class:`EpochStats`.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

__all__ = [
    "CollectStats",
    "DeferredReads",
    "EpochStats",
    "InfoStats",
    "MovAvg",
    "RunState",
    "SequenceSummaryStats",
    "TTrainingStats",
    "TrainingStats",
    "aggregate_training_stats",
]


_NAN = float("nan")  # one object: tuples of it compare equal, so not-measured stats do


@dataclass
class SequenceSummaryStats:
    """Mean, standard deviation, minimum and maximum of a sequence of numbers.

    :meth:`not_measured` stands for a quantity a step did not compute (a TD3 actor loss
    on a step without an actor update): it is left out of ``loss_stats()``, the logs,
    the moving averages, the non-finite check and aggregation, where a NaN that was
    measured still counts and still stops a run.
    """

    mean: float
    std: float
    min: float
    max: float

    @classmethod
    def from_sequence(cls, values: Sequence[float] | np.ndarray) -> SequenceSummaryStats:
        """Summarise ``values``; an empty sequence gives all-NaN statistics."""
        arr = np.asarray(values, dtype=np.float64)
        if arr.size == 0:
            return cls(mean=_NAN, std=_NAN, min=_NAN, max=_NAN)
        return cls(
            mean=float(arr.mean()),
            std=float(arr.std()),
            min=float(arr.min()),
            max=float(arr.max()),
        )

    @classmethod
    def single(cls, value: float) -> SequenceSummaryStats:
        """Summary of a single number (one gradient step)."""
        return cls(mean=value, std=0.0, min=value, max=value)

    @staticmethod
    def not_measured() -> SequenceSummaryStats:
        """A quantity this step did not compute: all-NaN, with :attr:`measured` False."""
        return _NotMeasured(mean=_NAN, std=_NAN, min=_NAN, max=_NAN)

    @property
    def measured(self) -> bool:
        """False for :meth:`not_measured` summaries."""
        return True


@dataclass
class _NotMeasured(SequenceSummaryStats):
    @property
    def measured(self) -> bool:
        return False


_SUMMARY_NUMBERS = frozenset({"mean", "std", "min", "max"})


class _Deferred(SequenceSummaryStats):
    """A one-step summary whose number a :class:`DeferredReads` fills in on first use."""

    def __init__(self, reads: DeferredReads[Any]) -> None:  # mean, ... unset until read
        self._reads = reads

    def __getattr__(self, name: str) -> float:
        # only called for attributes not set yet: the four numbers before the read
        if name not in _SUMMARY_NUMBERS:
            raise AttributeError(name)
        self._reads.read()
        value: float = self.__dict__[name]
        return value

    def _fill(self, value: float) -> None:
        self.mean = self.min = self.max = value
        self.std = 0.0
        del self._reads
        # from here on a plain one-step summary: equal to, printed and copied as one
        object.__setattr__(self, "__class__", SequenceSummaryStats)


TRecord = TypeVar("TRecord")


class DeferredReads(Generic[TRecord]):
    """Statistics of many gradient steps computed and read back together.

    A policy whose per-step statistics cost tensor ops (PPO's KL and clip fraction) keeps
    what they are computed from, one ``record`` per :meth:`defer`, and returns
    :class:`SequenceSummaryStats` that are filled in on first use: reading any number of
    any of them calls ``compute(records)`` once for every record not read yet, which
    returns one list of floats per record, in the order of the names. The trainer reads
    an update step's stats at its end, so the ops run batched and the values cross to the
    host once per update step instead of once per gradient step. At most ``max_records``
    wait (a loop that never reads its stats holds no more).
    """

    def __init__(
        self, compute: Callable[[list[TRecord]], list[list[float]]], max_records: int = 256
    ) -> None:
        self.compute = compute
        self.max_records = max_records
        self._records: list[TRecord] = []
        self._stats: list[list[_Deferred]] = []

    def defer(self, record: TRecord, n_values: int) -> list[SequenceSummaryStats]:
        """``n_values`` summaries of one gradient step, filled in from ``record`` later."""
        if len(self._records) >= self.max_records:
            self.read()
        stats = [_Deferred(self) for _ in range(n_values)]
        self._records.append(record)
        self._stats.append(stats)
        return list(stats)

    def read(self) -> None:
        """Compute and fill in every summary not read yet (nothing when none waits)."""
        if not self._records:
            return
        records, stats = self._records, self._stats
        self._records, self._stats = [], []
        values = self.compute(records)
        for row, summaries in zip(values, stats, strict=True):
            for value, summary in zip(row, summaries, strict=True):
                summary._fill(value)

    def __len__(self) -> int:
        return len(self._records)


@dataclass
class CollectStats:
    """What one or more ``Collector.collect`` calls gathered.

    ``returns`` and ``lens`` hold one entry per finished episode; ``collect_time`` is in
    seconds and ``collect_speed`` in env steps per second.
    """

    n_collected_steps: int = 0
    n_collected_episodes: int = 0
    returns: np.ndarray = field(default_factory=lambda: np.zeros(0))
    returns_stat: SequenceSummaryStats | None = None
    lens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    lens_stat: SequenceSummaryStats | None = None
    collect_time: float = 0.0
    collect_speed: float = 0.0

    @classmethod
    def from_episodes(
        cls, n_steps: int, returns: Sequence[float], lens: Sequence[int], collect_time: float
    ) -> CollectStats:
        """Build the stats of one collection from its finished episodes."""
        ret = np.asarray(returns, dtype=np.float64)
        ln = np.asarray(lens, dtype=np.int64)
        return cls(
            n_collected_steps=n_steps,
            n_collected_episodes=len(ret),
            returns=ret,
            returns_stat=SequenceSummaryStats.from_sequence(ret) if len(ret) else None,
            lens=ln,
            lens_stat=SequenceSummaryStats.from_sequence(ln) if len(ln) else None,
            collect_time=collect_time,
            collect_speed=n_steps / collect_time if collect_time > 0 else 0.0,
        )

    @classmethod
    def merge(cls, parts: Iterable[CollectStats]) -> CollectStats:
        """Summarise several collections as one (used for an epoch's training data)."""
        parts = list(parts)
        returns = [r for p in parts for r in p.returns.tolist()]
        lens = [n for p in parts for n in p.lens.tolist()]
        return cls.from_episodes(
            n_steps=sum(p.n_collected_steps for p in parts),
            returns=returns,
            lens=lens,
            collect_time=sum(p.collect_time for p in parts),
        )


@dataclass
class TrainingStats:
    """Base of every algorithm's training statistics.

    Subclasses add loss fields typed :class:`SequenceSummaryStats`; each summarises the
    gradient steps of one update (or of a whole epoch in ``EpochStats``). ``train_time``
    is in seconds; ``smoothed_loss`` maps ``loss_stats()`` keys to their moving averages.
    """

    train_time: float = 0.0
    smoothed_loss: dict[str, float] = field(default_factory=dict)
    n_gradient_steps: int = 1
    """Gradient steps summarised: 1 for what ``learn`` returns, the sum once aggregated."""

    def loss_stats(self) -> dict[str, float]:
        """Flat ``{"loss/critic": mean, "approx_kl": mean, ...}`` of every summary field
        that was measured (:attr:`SequenceSummaryStats.measured`).

        A field named ``loss`` keeps its name; ``loss_<part>`` becomes ``loss/<part>``.
        """
        out: dict[str, float] = {}
        for name, key in _stat_keys(type(self)):
            value = getattr(self, name)
            if isinstance(value, SequenceSummaryStats) and value.measured:
                out[key] = value.mean
        return out


_STAT_KEYS: dict[type, tuple[tuple[str, str], ...]] = {}


def _stat_keys(cls: type[TrainingStats]) -> tuple[tuple[str, str], ...]:
    """``(field name, loss_stats key)`` of every field of ``cls``, listed once per class
    (``loss_stats`` runs on every gradient step)."""
    keys = _STAT_KEYS.get(cls)
    if keys is None:
        keys = _STAT_KEYS[cls] = tuple((f.name, _stat_key(f.name)) for f in dataclasses.fields(cls))
    return keys


def _stat_key(name: str) -> str:
    if name.startswith("loss_"):
        return "loss/" + name[len("loss_") :]
    return name


TTrainingStats = TypeVar("TTrainingStats", bound=TrainingStats)


def aggregate_training_stats(
    per_step: Sequence[TTrainingStats], train_time: float
) -> TTrainingStats | None:
    """Combine per-gradient-step stats into one of the same type.

    Each element summarises one gradient step; the result's summary fields hold the mean,
    std, min and max over *all* of them (not just the last). Returns ``None`` when empty.
    """
    if not per_step:
        return None
    first = per_step[0]
    values: dict[str, Any] = {}
    for f in dataclasses.fields(first):
        if not f.init:
            continue
        v0 = getattr(first, f.name)
        if isinstance(v0, SequenceSummaryStats):
            values[f.name] = _aggregate_summaries([getattr(s, f.name) for s in per_step])
        elif f.name == "n_gradient_steps":
            values[f.name] = sum(s.n_gradient_steps for s in per_step)
        elif f.name == "train_time":
            values[f.name] = train_time
        elif f.name == "smoothed_loss":
            values[f.name] = dict(per_step[-1].smoothed_loss)
        else:
            values[f.name] = getattr(per_step[-1], f.name)
    return dataclasses.replace(first, **values)


def _aggregate_summaries(parts: list[SequenceSummaryStats]) -> SequenceSummaryStats:
    """One summary of per-step summaries: the mean and std of their means, the extreme
    min and max; the steps that did not measure it (:meth:`~SequenceSummaryStats.
    not_measured`) are left out, and if none did, neither does the result."""
    measured = [p for p in parts if p.measured]
    if not measured:
        return SequenceSummaryStats.not_measured()
    n = len(measured)
    means = np.fromiter((p.mean for p in measured), dtype=np.float64, count=n)
    mins = np.fromiter((p.min for p in measured), dtype=np.float64, count=n)
    maxs = np.fromiter((p.max for p in measured), dtype=np.float64, count=n)
    return SequenceSummaryStats(
        mean=float(means.mean()),
        std=float(means.std()),
        min=float(mins.min()),
        max=float(maxs.max()),
    )


class MovAvg:
    """Windowed mean of the last ``size`` finite values; NaN and inf are ignored."""

    def __init__(self, size: int = 100) -> None:
        if size <= 0:
            raise ValueError(f"MovAvg size must be a positive int, got {size!r}")
        self.size = size
        self._window: deque[float] = deque(maxlen=size)

    def add(self, value: float) -> float:
        """Add ``value`` if it is finite and return the current mean."""
        if math.isfinite(value):
            self._window.append(float(value))
        return self.get()

    def get(self) -> float:
        """Mean of the window, or NaN while it is empty."""
        if not self._window:
            return float("nan")
        return sum(self._window) / len(self._window)

    def state_dict(self) -> dict[str, object]:
        """The window's size and contents."""
        return {"size": self.size, "window": list(self._window)}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore what :meth:`state_dict` returned."""
        size = state["size"]
        window = state["window"]
        assert isinstance(size, int) and isinstance(window, list)
        self.size = size
        self._window = deque((float(v) for v in window), maxlen=size)


@dataclass
class RunState:
    """The run's counters, declared once: a trainer holds one (``trainer.state``),
    :class:`InfoStats` extends it with speeds, and checkpoints save it field by field."""

    epoch: int = 0
    """Epochs finished."""
    env_step: int = 0
    """Env steps collected by the training collector (warm-up included)."""
    gradient_step: int = 0
    """Gradient steps taken (``Policy.learn`` calls)."""
    train_episode: int = 0
    """Training episodes finished."""
    test_step: int = 0
    """Env steps the test envs made in test steps: every test env steps until the test
    step's last episode ends, so an env whose episodes are done (or that has none, with
    fewer ``episode_per_test`` than test envs) adds steps of no counted episode."""
    test_episode: int = 0
    """Test episodes finished."""
    best_test_return: float = float("-inf")
    """Best mean test return so far."""
    best_test_return_std: float = 0.0
    """Std of the test returns of the best test step."""
    best_epoch: int = 0
    """Epoch of the best test return."""
    collect_time: float = 0.0
    """Seconds spent collecting training data."""
    update_time: float = 0.0
    """Seconds spent in update steps."""
    test_time: float = 0.0
    """Seconds spent testing."""
    total_time: float = 0.0
    """Seconds spent inside ``next()``: epochs, logging and checkpoint saves (an epoch's
    save counts from the next epoch's total on)."""


@dataclass
class InfoStats(RunState):
    """Running totals of a training run (:class:`RunState`) plus speeds in steps per second."""

    collect_speed: float = 0.0
    update_speed: float = 0.0

    @classmethod
    def of(cls, state: RunState) -> InfoStats:
        """The totals of ``state`` with the speeds derived from them."""
        counters = {f.name: getattr(state, f.name) for f in dataclasses.fields(RunState)}
        return cls(
            **counters,
            collect_speed=state.env_step / state.collect_time if state.collect_time > 0 else 0.0,
            update_speed=(
                state.gradient_step / state.update_time if state.update_time > 0 else 0.0
            ),
        )


@dataclass
class EpochStats(Generic[TTrainingStats]):
    """Everything one epoch produced.

    ``train_collect_stat`` summarises all collect steps of the epoch (``None`` only for the
    offline trainer, which collects nothing); ``training_stat`` summarises all gradient
    steps of the epoch (``None`` only if no gradient step ran, e.g. during warm-up);
    ``test_collect_stat`` is ``None`` when the trainer has no test collector.
    """

    epoch: int
    train_collect_stat: CollectStats | None
    test_collect_stat: CollectStats | None
    training_stat: TTrainingStats | None
    info_stat: InfoStats
