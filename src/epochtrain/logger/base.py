"""Logger interface: when to record, the logger's position, new-run and resume checks.

The trainer hands typed stats (:mod:`epochtrain.stats`) to a :class:`BaseLogger`; the
logger decides from its intervals whether to record them, turns them into ``{tag: float}``
dicts (:mod:`epochtrain.logger.tags`) and passes them to its one abstract method,
:meth:`BaseLogger.write`. On a resume it takes its state from the checkpoint's
(:mod:`epochtrain.logger.resume`). :class:`LazyLogger` records nothing;
:class:`~epochtrain.logger.MultiLogger` (the fan-out) is in :mod:`epochtrain.logger.multi`.
"""

from __future__ import annotations

import os
import warnings
import weakref
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from epochtrain.closing import Closing
from epochtrain.logger.resume import _scope_steps, describe_state, logger_states, match_states
from epochtrain.logger.tags import (
    SCOPES,
    Scope,
    collect_stats_to_tags,
    info_stats_to_tags,
    training_stats_to_tags,
    video_scope,
)
from epochtrain.stats import CollectStats, InfoStats, TrainingStats

__all__ = [
    "BaseLogger",
    "ExistingRecordsError",
    "LazyLogger",
    "LoggerClosedError",
    "LoggerResumeError",
    "warn_added",
]


def warn_added(loggers: Sequence[BaseLogger], states: Sequence[Mapping[str, object]]) -> None:
    """Warn that ``loggers`` (not in the checkpoint's logger ``states``) start fresh."""
    added = [logger._describe() for logger in loggers if not isinstance(logger, LazyLogger)]
    if not added:
        return
    saved = [describe_state(s) for s in states if s.get("kind") != LazyLogger.__name__]
    where = f"only in {', '.join(saved)}" if saved else "nowhere (the run logged nothing)"
    one = len(added) == 1
    warnings.warn(
        f"{', '.join(added)} {'is' if one else 'are'} not among the checkpoint's loggers: "
        f"{'it starts' if one else 'they start'} fresh and hold{'s' if one else ''} this "
        f"run's records from the resumed steps on; the earlier ones are {where}",
        stacklevel=3,
    )


class LoggerResumeError(ValueError):
    """A logger cannot continue the run a checkpoint's logger state names (an MLflow run
    that is not in this tracking store): the resume is refused before anything changes,
    since the resumed records would start a new run beside the old one."""


class ExistingRecordsError(ValueError):
    """A new run would write where another run's records already are (a log file with
    records, a TensorBoard logdir with event files, an MLflow or W&B run with points), and
    its logger was not restored from a checkpoint: the two runs' steps would interleave.
    Raised before the logger writes anything; the message names the place and the fixes,
    :attr:`found` only what is there."""

    def __init__(self, message: str, *, found: str | None = None) -> None:
        super().__init__(message)
        self.found = found if found is not None else message
        """What is already there, e.g. ``"path 'run/log.jsonl' already holds 3 records"``."""


class LoggerClosedError(ValueError):
    """A logger that was closed (:meth:`BaseLogger.close`) was given to a trainer or asked
    to record: it cannot write, since its file, event writer or tracking run is released.
    The message names the logger (kind and destination) and who closed it; the fix is a
    new logger. Raised before anything is written."""


def _check_interval(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


def _check_initialised(logger: BaseLogger) -> None:
    """Raise ``TypeError`` if ``logger``'s constructor did not run ``BaseLogger.__init__``
    (a custom logger that forgot ``super().__init__()``): checked when a trainer is given
    the logger and before every record, where the logger's position is first read."""
    if "_closed_with" not in vars(logger):
        cls = type(logger).__name__
        raise TypeError(
            f"{cls}.__init__ did not call BaseLogger.__init__ (which sets the intervals and "
            f"the logger's position): call super().__init__() in {cls}.__init__ (or "
            "super().__init__(update_interval=..., ...) to set the intervals)"
        )


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
    managers; leaving the ``with`` block calls :meth:`close`. A closed logger stays closed:
    a trainer given it, and every record asked of it, raise :class:`LoggerClosedError`.
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
        self._user: weakref.ReferenceType[object] | None = None  # the trainer logging here
        self._closed = False  # close() was called: every record is refused from then on
        self._closed_with: str | None = None  # the kind of trainer whose close() closed it

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
        self.check_open()

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

    def _parts(self) -> tuple[BaseLogger, ...]:
        """This logger and every logger it forwards to (a MultiLogger's, nested too)."""
        return (self,)

    def _used_by_another(self, user: object | None) -> tuple[BaseLogger, object] | None:
        """``(part, other)`` if this logger or one it forwards to (``part``) logs for a
        live object ``other`` that is not ``user`` (the trainer asking), else ``None``."""
        for part in self._parts():
            other = None if part._user is None else part._user()
            if other is not None and other is not user:
                return part, other
        return None

    def _closed_by(self) -> tuple[BaseLogger, str] | None:
        """``(part, trainer kind)`` if this logger or one it forwards to (``part``) was
        closed by a trainer's ``close()`` (:meth:`_close_with`), else ``None``."""
        for part in self._parts():
            _check_initialised(part)
            if part._closed_with is not None:
                return part, part._closed_with
        return None

    def _claim(self, user: object) -> None:
        """Mark this logger and those it forwards to as logging for ``user`` (a trainer),
        until :meth:`_release` or until ``user`` is garbage-collected. A
        :class:`LazyLogger` records nothing: it is never claimed and may be shared."""
        for part in self._parts():
            if not isinstance(part, LazyLogger):
                part._user = weakref.ref(user)

    def _close_with(self, user: object) -> None:
        """Close this logger as ``user`` (a trainer) closes, remembering it for the error
        of a trainer given it later (a closed logger cannot write); a part its user
        closed before keeps that as the reason."""
        for part in self._parts():
            if not isinstance(part, LazyLogger) and not part._closed:
                part._closed_with = type(user).__name__
        self.close()

    def check_open(self, label: str | None = None) -> None:
        """Raise :class:`LoggerClosedError` if this logger, or one it forwards to, was
        closed: it cannot write. ``label`` is the argument the logger was given as
        (``"logger"``), named at the start of the error. A trainer checks it when given the
        logger, before any work; every record checks it first (a logger closed mid-run). A
        closed :class:`LazyLogger` records nothing anyway and passes."""
        for part in self._parts():
            _check_initialised(part)
            if part._closed and not isinstance(part, LazyLogger):
                raise LoggerClosedError(self._closed_message(part, label))

    def _closed_message(self, part: BaseLogger, label: str | None) -> str:
        inside = "" if part is self else f" (inside {self._describe()})"
        how = (
            f"by the close() of the {part._closed_with} it logged for"
            if part._closed_with is not None
            else "by a direct close() call"
        )
        head = f"{part._describe()}{inside} was closed {how}, so it cannot write: "
        again = (
            f"a new {part.kind} on the same destination with resume_from=<the run's "
            "checkpoint> continues a checkpointed run there"
        )
        if label is not None:
            return f"{label}: this {head}give the trainer a new logger ({again})"
        return (
            f"{head}close a trainer's logger through the trainer (trainer.close() closes it "
            f"when the run is over), and build a new logger for more records ({again})"
        )

    def _release(self, user: object) -> None:
        """Undo :meth:`_claim` for the parts ``user`` holds (a trainer's close or reset)."""
        for part in self._parts():
            if part._user is not None and part._user() is user:
                part._user = None

    @property
    def kind(self) -> str:
        """The logger's class name: a checkpoint's logger state is matched to it by this."""
        return type(self).__name__

    @property
    def destination(self) -> str | None:  # loggers that own a file or directory override it
        """Where the logger writes (its file or directory), ``None`` if nowhere in particular."""
        return None

    def state_dict(self) -> dict[str, object]:
        """The last logged step of each scope (``None`` if never), e.g. ``{"train": 1000, ...}``,
        under ``"written"`` the largest step written per scope (the position), and the
        logger's ``"kind"`` and ``"destination"``, by which a resume matches it."""
        state: dict[str, object] = {scope: last for scope, last in self._last_logged.items()}
        state["written"] = dict(self._written)
        state["kind"], state["destination"] = self.kind, self.destination
        return state

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore what :meth:`state_dict` returned, so a resumed run skips logged steps.

        ``state`` may be the state of other loggers (a :class:`~epochtrain.logger.MultiLogger`'s,
        when loggers were dropped on resume): this logger takes the one of its kind and
        destination (:func:`match_states`); if there is none, it was added on resume and
        starts fresh, holding the run's records from the resumed steps on (a warning says
        so). A state without ``"written"`` (older) takes the last logged steps as the position.
        A closed logger raises :class:`LoggerClosedError` (it could not continue the run).
        """
        self.check_open()
        states = logger_states(state)
        own = match_states([self], states)[0]
        if own is None:
            warn_added([self], states)
            return
        self._restore(own)

    def _restore(self, state: Mapping[str, object]) -> None:
        """Restore this logger's own state (subclasses that own files trim them here)."""
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
        it before the first epoch to have the error before any work. A closed logger
        raises :class:`LoggerClosedError`."""
        self.check_open()
        if not self._restored and not self._begun:
            earlier = self._earlier_records()
            if earlier is not None:
                raise ExistingRecordsError("".join(earlier), found=earlier[0])

    def _earlier_records(self) -> tuple[str, str] | None:  # loggers owning a place override it
        """What another run already wrote where this logger writes (``"path 'x' already
        holds 3 records of an earlier run"``) and the rest of the error message (why and
        the fixes); ``None`` if nothing (the default: the logger owns no destination)."""
        return None

    def _begin(self) -> None:
        """Before every record: refuse a closed logger; before the first, a new run checks
        its destination, then prepares it."""
        self.check_open()
        if not self._begun:
            if not self._restored:
                self.check_new_run()
                self._start_new_run()
            self._begun = True

    def _start_new_run(self) -> None:  # e.g. JSONL/CSV with mode="w" empty their file
        """Prepare the destination for a new run's first record (default: nothing)."""

    def check_resume(self, state: Mapping[str, object]) -> None:
        """Raise :class:`LoggerResumeError` if this logger cannot continue the run ``state``
        (a checkpoint's :meth:`state_dict`) was logged to; changes nothing. Called before a
        checkpoint is restored. A logger with no state in ``state`` (added on resume) is
        refused if its destination already holds records (:meth:`check_added`)."""
        try:
            states = logger_states(state)
            own = match_states([self], states)[0]
        except ValueError:
            return  # states that cannot be matched: load_state_dict says so
        if own is None:
            self.check_added(states)
        else:
            self._check_resume(own)

    def check_added(self, states: Sequence[Mapping[str, object]]) -> None:
        """Refuse (:class:`LoggerResumeError`, before anything changes) to add this logger on
        a resume whose checkpoint holds the logger ``states`` when its destination already
        holds records: earlier records of this run (a logger dropped on an earlier resume),
        or of another run, and the resumed steps would follow them."""
        try:
            self.check_new_run()
        except ExistingRecordsError as exc:
            saved = ", ".join(describe_state(s) for s in states) or "none"
            raise LoggerResumeError(
                f"loggers: {self._describe()} is not among the checkpoint's loggers ({saved}), "
                f"so it would start fresh, but {exc.found}: move them away, or resume "
                "without this logger"
            ) from exc

    def _check_resume(self, state: Mapping[str, object]) -> None:  # optional: see MLflow
        """:meth:`check_resume` with this logger's own state. Default: every logger can."""

    def _describe(self) -> str:
        return describe_state({"kind": self.kind, "destination": self.destination})

    def flush(self) -> None:  # optional: loggers that buffer override it
        """Write anything buffered to its destination now (the trainer calls it per epoch);
        nothing once closed."""

    def close(self) -> None:
        """Flush and release resources; safe to call more than once. From then on the logger
        refuses records (:meth:`check_open`). Subclasses that hold resources override it,
        calling ``super().close()``."""
        self._closed = True


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
