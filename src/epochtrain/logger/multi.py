"""MultiLogger: one logger that forwards every call to several, each with its own intervals."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import suppress

from epochtrain.logger.base import BaseLogger, warn_added
from epochtrain.logger.resume import logger_states, match_states
from epochtrain.logger.tags import Scope
from epochtrain.stats import CollectStats, InfoStats, TrainingStats

__all__ = ["MultiLogger"]


class MultiLogger(BaseLogger):
    """Fan-out: forwards every call to several loggers, each keeping its own intervals;
    every logger gets each call even when one of them raises (the first error is raised
    after the others were called). Before the first record, every logger checks its
    destination (:meth:`check_new_run`), so a refused new run writes nowhere."""

    def __init__(self, *loggers: BaseLogger) -> None:
        super().__init__()
        for i, logger in enumerate(loggers):
            if not isinstance(logger, BaseLogger):
                raise TypeError(f"MultiLogger loggers[{i}] must be a BaseLogger, got {logger!r}")
        self.loggers: tuple[BaseLogger, ...] = loggers
        self._failed = False  # a call raised: close() does not raise an OSError after it

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Write ``data`` to every logger, bypassing their intervals."""
        self._each(lambda logger: logger.write(scope, step, data))

    def log_train_data(self, stats: CollectStats, env_step: int) -> None:
        """Forward to every logger."""
        self._begin()
        self._each(lambda logger: logger.log_train_data(stats, env_step))

    def log_test_data(self, stats: CollectStats, env_step: int) -> None:
        """Forward to every logger."""
        self._begin()
        self._each(lambda logger: logger.log_test_data(stats, env_step))

    def log_update_data(self, stats: TrainingStats, gradient_step: int) -> None:
        """Forward to every logger."""
        self._begin()
        self._each(lambda logger: logger.log_update_data(stats, gradient_step))

    def log_info_data(self, stats: InfoStats, epoch: int) -> None:
        """Forward to every logger."""
        self._begin()
        self._each(lambda logger: logger.log_info_data(stats, epoch))

    def log_data(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Forward to every logger."""
        self._begin()
        self._each(lambda logger: logger.log_data(scope, step, data))

    def log_video(
        self, path: str | os.PathLike[str], step: int, *, tag: str = "test/video"
    ) -> None:
        """Forward to every logger."""
        self._begin()
        self._each(lambda logger: logger.log_video(path, step, tag=tag))

    def _each(self, call: Callable[[BaseLogger], object]) -> None:
        """``call`` every logger, even after one raised: one failing service (W&B, MLflow)
        does not cost the others their records; the first error is raised at the end."""
        first: Exception | None = None
        for logger in self.loggers:
            try:
                call(logger)
            except Exception as exc:
                first = first or exc
        if first is not None:
            self._failed = True
            raise first

    def check_new_run(self) -> None:
        """Check every logger (the first refusal is raised after all were checked); one
        that is closed is refused first, naming it (:meth:`check_open`)."""
        self.check_open()
        self._each(lambda logger: logger.check_new_run())

    def _begin(self) -> None:
        # every logger is checked before any of them writes; each then begins on its own
        self.check_open()
        if not self._begun:
            self.check_new_run()
            self._begun = True

    def _describe(self) -> str:
        return f"{self.kind}({', '.join(logger._describe() for logger in self.loggers)})"

    def _parts(self) -> tuple[BaseLogger, ...]:
        return (self, *(part for logger in self.loggers for part in logger._parts()))

    def has_records(self) -> bool:
        """True once any of the loggers holds a record."""
        return any(logger.has_records() for logger in self.loggers)

    def state_dict(self) -> dict[str, object]:
        """``{"loggers": [state of each logger, in order]}``."""
        return {"loggers": [logger.state_dict() for logger in self.loggers]}

    def _matched(self, state: Mapping[str, object]) -> list[Mapping[str, object] | None]:
        return match_states(self.loggers, logger_states(state))

    def check_resume(self, state: Mapping[str, object]) -> None:
        """Check each logger against its state (matched by kind and destination, see
        :func:`~epochtrain.logger.resume.match_states`); a logger added on resume is refused
        if its destination already holds records. States that cannot be matched are left
        to :meth:`load_state_dict`."""
        try:
            states = logger_states(state)
            matched = self._matched(state)
        except ValueError:
            return
        pairs = iter(zip(self.loggers, matched, strict=True))
        self._each(lambda _: _check_one(*next(pairs), states))

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore each logger from its state in what :meth:`state_dict` returned, matched
        by kind and destination, not by position: a logger that was dropped on resume is
        ignored, one that was added starts fresh (a warning says so). One that fails does
        not keep the others from being restored (the first error is raised after them)."""
        self.check_open()
        states = logger_states(state)
        matched = self._matched(state)
        warn_added(
            [lg for lg, own in zip(self.loggers, matched, strict=True) if own is None], states
        )
        pairs = iter(zip(self.loggers, matched, strict=True))  # _each calls them in order
        self._each(lambda _: _restore_one(*next(pairs)))
        self._restored = True

    def flush(self) -> None:
        """Flush every logger."""
        self._each(lambda logger: logger.flush())

    def close(self) -> None:
        """Close every logger. Once a call raised (a full disk), an ``OSError`` of closing
        is not raised: the first error said it, and a second would replace it."""
        super().close()
        if self._failed:
            for logger in self.loggers:
                with suppress(OSError):
                    logger.close()
            return
        self._each(lambda logger: logger.close())


def _check_one(
    logger: BaseLogger, own: Mapping[str, object] | None, states: list[Mapping[str, object]]
) -> None:
    if own is None:
        logger.check_added(states)
    else:
        logger.check_resume(own)


def _restore_one(logger: BaseLogger, own: Mapping[str, object] | None) -> None:
    if own is not None:
        logger.load_state_dict(own)
