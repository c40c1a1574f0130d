"""Logger interface: interval bookkeeping, stats-to-tag flattening, no-op and fan-out loggers.

The trainer hands typed stats (:mod:`epochtrain.stats`) to a :class:`BaseLogger`; the
logger decides from its intervals whether to record them, flattens the dataclasses into
``{tag: float}`` dicts with stable tags (``train/returns_stat/mean``, ``update/loss/actor``,
``info/env_step``, ...) and passes them to its one abstract method, :meth:`BaseLogger.write`.
Every tag is documented in ``docs/logging.md``. :class:`~epochtrain.logger.MultiLogger`
(the fan-out) is in :mod:`epochtrain.logger.multi`.
"""

from __future__ import annotations

import dataclasses
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Literal

import numpy as np

from epochtrain.closing import Closing
from epochtrain.stats import CollectStats, InfoStats, SequenceSummaryStats, TrainingStats

__all__ = [
    "SCOPES",
    "BaseLogger",
    "ExistingRecordsError",
    "LazyLogger",
    "LoggerResumeError",
    "Scope",
    "collect_stats_to_tags",
    "flatten_dataclass",
    "info_stats_to_tags",
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


def _scope_steps(state: Mapping[str, object], what: str) -> dict[Scope, int | None]:
    restored: dict[Scope, int | None] = {}
    for scope in SCOPES:
        if scope not in state:
            raise ValueError(f"{what} is missing the key {scope!r}; got {state!r}")
        value = state[scope]
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"{what}[{scope!r}] must be an int or None, got {value!r}")
        restored[scope] = value
    return restored


def tag_scope(tag: str) -> Scope | None:
    """The scope a tag belongs to (``"update/loss"`` -> ``"update"``), ``None`` if none."""
    head = tag.split("/", 1)[0]
    for scope in SCOPES:
        if scope == head:
            return scope
    return None


def kept_past_position(
    position: Mapping[Scope, int | None], held: Mapping[str, float]
) -> str | None:
    """The steps a tracking run already ``held`` (per tag) past a restored ``position``
    (per scope), as ``"info (4, 5], train (4000, 5000]"``; ``None`` if there are none.

    W&B and MLflow cannot delete points, so on a resume these keep the values the
    interrupted process logged after its checkpoint; this says which they are."""
    last: dict[Scope, float] = {}
    for tag, step in held.items():
        scope = tag_scope(tag)
        if scope is not None:
            last[scope] = max(step, last.get(scope, step))
    spans = []
    for scope in SCOPES:
        start, end = position.get(scope), last.get(scope)
        if end is not None and start is None:
            spans.append(f"{scope} up to {end:.15g}")
        elif end is not None and start is not None and end > start:
            spans.append(f"{scope} ({start}, {end:.15g}]")
    return ", ".join(spans) or None


def video_scope(tag: str) -> Scope:
    """The scope of a video ``tag`` (``"test/video"`` -> ``"test"``); unknown scopes raise."""
    head = tag.split("/", 1)[0] if isinstance(tag, str) else None
    for scope in SCOPES:
        if scope == head and "/" in tag:
            return scope
    raise ValueError(f"tag must be '<scope>/<name>' with a scope in {SCOPES}, got {tag!r}")


class LoggerResumeError(ValueError):
    """A logger cannot continue the run a checkpoint's logger state names (an MLflow run
    that is not in this tracking store): the resume is refused before anything changes,
    since the resumed records would start a new run beside the old one."""


class ExistingRecordsError(ValueError):
    """A new run would write where another run's records already are (a log file with
    records, a TensorBoard logdir with event files, an MLflow or W&B run with points), and
    its logger was not restored from a checkpoint: the two runs' steps would interleave.
    Raised before the logger writes anything; the message names the place and the fixes."""


def _check_interval(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


class BaseLogger(Closing, ABC):
    """Base of all loggers: decides *when* to record, subclasses decide *where*.

    A record of a scope is written when ``step - last_logged_step >= interval`` for that
    scope; the first call always writes. Steps are counted in the unit of their scope:

    :param train_interval: env steps between two records of training-collect stats.
    :param test_interval: env steps between two records of test-collect stats.
    :param update_interval: gradient steps between two records of update stats.
    :param info_interval: epochs between two records of the run totals.

    The default, 1, records every call. Because a record needs a step strictly greater
    than the last logged one, a logger restored with :meth:`load_state_dict` never writes a
    step twice. :meth:`log_data` writes the dicts hooks return, outside the intervals.
    The logger's *position* is, per scope, the last step written (:meth:`written_step`);
    loggers that own files drop the records past it on :meth:`load_state_dict`, which is
    how a resumed run's curves continue with no duplicated and no missing point.

    A logger that was not restored is a *new run*: before its first record it checks its
    destination (:meth:`check_new_run`) and raises :class:`ExistingRecordsError` if another
    run's records are already there, instead of mixing the two runs. Loggers are context
    managers; leaving the ``with`` block calls :meth:`close`.
    """

    def __init__(
        self,
        train_interval: int = 1,
        test_interval: int = 1,
        update_interval: int = 1,
        info_interval: int = 1,
    ) -> None:
        self.train_interval = _check_interval("train_interval", train_interval)
        self.test_interval = _check_interval("test_interval", test_interval)
        self.update_interval = _check_interval("update_interval", update_interval)
        self.info_interval = _check_interval("info_interval", info_interval)
        self._last_logged: dict[Scope, int | None] = dict.fromkeys(SCOPES)
        self._written: dict[Scope, int | None] = dict.fromkeys(SCOPES)
        self._restored = False  # load_state_dict was called: a resume, not a new run
        self._begun = False  # the first record was (or is being) written

    @abstractmethod
    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Record ``data`` (full tags such as ``train/returns_stat/mean``) at ``step``."""

    def log_train_data(self, stats: CollectStats, env_step: int) -> None:
        """Record the stats of a training collect; ``env_step`` is the total env steps."""
        if self._due("train", env_step, self.train_interval):
            self._record("train", env_step, collect_stats_to_tags(stats, "train"))

    def log_test_data(self, stats: CollectStats, env_step: int) -> None:
        """Record the stats of a test collect, at the training ``env_step`` it happened
        (an offline trainer passes its gradient step: it takes no env steps)."""
        if self._due("test", env_step, self.test_interval):
            self._record("test", env_step, collect_stats_to_tags(stats, "test"))

    def log_update_data(self, stats: TrainingStats, gradient_step: int) -> None:
        """Record the stats of an update step; ``gradient_step`` is the total gradient steps."""
        if self._due("update", gradient_step, self.update_interval):
            self._record("update", gradient_step, training_stats_to_tags(stats))

    def log_info_data(self, stats: InfoStats, epoch: int) -> None:
        """Record the run totals at the end of ``epoch``."""
        if self._due("info", epoch, self.info_interval):
            self._record("info", epoch, info_stats_to_tags(stats))

    def log_data(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Write ``data`` (full tags, e.g. ``train/utd_ratio``) at ``step`` now, whatever the
        intervals (hooks' logging dicts come this way)."""
        self._begin()
        self.write(scope, step, data)
        self._mark_written(scope, step)

    def log_video(
        self, path: str | os.PathLike[str], step: int, *, tag: str = "test/video"
    ) -> None:
        """Record the video file at ``path`` (e.g. an mp4 of a test episode) as ``tag`` at
        ``step`` of the tag's scope (``test/video``: env steps).

        Loggers that store only numbers (CSV, :class:`LazyLogger`) skip it (this default);
        JSONL writes the path, TensorBoard the path as text and the frames as an animated
        image, W&B the video, MLflow the file as an artifact.
        """
        video_scope(tag)

    def _mark_written(self, scope: Scope, step: int) -> None:
        last = self._written[scope]
        if last is None or step > last:
            self._written[scope] = step

    def _due(self, scope: Scope, step: int, interval: int) -> bool:
        last = self._last_logged[scope]
        return last is None or step - last >= interval

    def _record(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        self._begin()
        self.write(scope, step, data)
        self._last_logged[scope] = step
        self._mark_written(scope, step)

    def last_logged_step(self, scope: Scope) -> int | None:
        """Step of the last record of ``scope``, or ``None`` if nothing was recorded yet."""
        return self._last_logged[scope]

    def written_step(self, scope: Scope) -> int | None:
        """Largest step written in ``scope`` (records and :meth:`log_data`), or ``None``."""
        return self._written[scope]

    def has_records(self) -> bool:
        """True once anything was written (or a restored position says so): a new run
        logged here would have its records at steps already written dropped."""
        return any(step is not None for step in self._written.values())

    def state_dict(self) -> dict[str, object]:
        """The last logged step of each scope (``None`` if never), e.g. ``{"train": 1000, ...}``,
        and under ``"written"`` the largest step written per scope (the position)."""
        state: dict[str, object] = {scope: last for scope, last in self._last_logged.items()}
        state["written"] = dict(self._written)
        return state

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore what :meth:`state_dict` returned, so a resumed run skips logged steps.

        A state without ``"written"`` (older) takes the last logged steps as the position.
        """
        restored = _scope_steps(state, "logger state")
        written = state.get("written", restored)
        if not isinstance(written, Mapping):
            raise ValueError(f"logger state['written'] must be a mapping, got {written!r}")
        self._last_logged = restored
        self._written = _scope_steps(written, "logger state['written']")
        self._restored = True

    def check_new_run(self) -> None:
        """Raise :class:`ExistingRecordsError` if this logger starts a new run (it was not
        restored with :meth:`load_state_dict`) where another run's records already are;
        changes nothing (a :class:`~epochtrain.logger.WandbLogger` given a ``run_id``
        starts its W&B run to ask it). Every logger calls it before its first record; call
        it before the first epoch to have the error before any work."""
        if not self._restored and not self._begun:
            found = self._earlier_records()
            if found is not None:
                raise ExistingRecordsError(found)

    def _earlier_records(self) -> str | None:  # loggers that own a destination override it
        """What another run already wrote where this logger writes, with the fixes, as the
        error message; ``None`` if nothing (the default: the logger owns no destination)."""
        return None

    def _begin(self) -> None:
        """Before the first record: a new run checks its destination, then prepares it."""
        if not self._begun:
            if not self._restored:
                self.check_new_run()
                self._start_new_run()
            self._begun = True

    def _start_new_run(self) -> None:  # e.g. JSONL/CSV with mode="w" empty their file
        """Prepare the destination for a new run's first record (default: nothing)."""

    def check_resume(self, state: Mapping[str, object]) -> None:  # optional: see MLflow
        """Raise :class:`LoggerResumeError` if this logger cannot continue the run ``state``
        (a checkpoint's :meth:`state_dict`) was logged to; changes nothing. Called before a
        checkpoint is restored. Default: every logger can."""

    def flush(self) -> None:  # optional: loggers that buffer override it
        """Write anything buffered to its destination now (the trainer calls it per epoch)."""

    def close(self) -> None:  # optional: loggers without resources skip it
        """Flush and release resources; safe to call more than once."""


class LazyLogger(BaseLogger):
    """A logger that records nothing (the trainers' default); it skips even the flattening."""

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Discard ``data``."""

    def log_train_data(self, stats: CollectStats, env_step: int) -> None:
        """Do nothing."""

    def log_test_data(self, stats: CollectStats, env_step: int) -> None:
        """Do nothing."""

    def log_update_data(self, stats: TrainingStats, gradient_step: int) -> None:
        """Do nothing."""

    def log_info_data(self, stats: InfoStats, epoch: int) -> None:
        """Do nothing."""

    def log_data(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Do nothing."""
