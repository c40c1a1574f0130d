"""Weights & Biases logger: every scope on its own x-axis, the run id kept for resuming.

W&B's own step (``_step``) must only grow, but our scopes count in different units (env
steps, gradient steps, epochs). So each record is logged with its scope's step metric
beside its tags, and ``define_metric("<scope>/*", step_metric=...)`` plots each tag
against it:

============  =========================
scope         step metric (x-axis)
============  =========================
``train/``    ``train/env_step``
``test/``     ``test/env_step``
``update/``   ``update/gradient_step``
``info/``     ``info/epoch``
============  =========================

Resuming: the W&B run id is part of :meth:`WandbLogger.state_dict`, which checkpoints
save; a logger restored with :meth:`WandbLogger.load_state_dict` continues that run
(``resume="must"``). A W&B run's history cannot be cut back (W&B's "rewind" is a private
preview that needs W&B's support, and does not exist offline), so the points the
interrupted process logged after its checkpoint stay, with that process's values. The
resumed process logs each tag only past the last step the run holds for it: the local
run files of the earlier processes (in the same W&B ``dir``) give it per tag, online and
offline; online, the run's summary gives the last step of each scope, which bounds
what those files do not show. So no point appears twice and none is missing; which
steps keep the interrupted process's values is warned about and recorded in the run's
config under ``epochtrain_kept_from_interrupted``. Offline (``mode="offline"``), each
process writes its own ``offline-run-*-<id>`` directory with the same id; ``wandb sync``
uploads them, in order, into one run.

A logger given the ``run_id`` of a run that holds points, and not restored from a
checkpoint, is a new run in an old one: it raises
:class:`~epochtrain.logger.ExistingRecordsError` before its first record.

Needs the ``wandb`` extra (``pip install 'epochtrain[wandb]'``).
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from epochtrain.extras import require
from epochtrain.logger.base import BaseLogger
from epochtrain.logger.resume import kept_past_position
from epochtrain.logger.tags import SCOPES, Scope, tag_scope, video_scope
from epochtrain.logger.wandb_files import local_run_dirs, read_local_run

__all__ = ["KEPT_KEY", "STEP_METRICS", "WandbLogger"]

STEP_METRICS: dict[Scope, str] = {
    "train": "train/env_step",
    "test": "test/env_step",
    "update": "update/gradient_step",
    "info": "info/epoch",
}
"""The x-axis metric of each scope (logged with every record of the scope)."""

_MODES = ("online", "offline", "disabled")

KEPT_KEY = "epochtrain_kept_from_interrupted"
"""The config key listing, per resume, the steps that keep the interrupted process's values."""


class WandbLogger(BaseLogger):
    """Log every record to a Weights & Biases run.

    The run starts with the first record (or the first access of :attr:`run`), so a
    logger that :meth:`load_state_dict` restores before the first epoch continues the
    checkpointed run instead of opening a new one.

    :param project: W&B project (``None``: W&B's default, ``WANDB_PROJECT``).
    :param name: display name of the run.
    :param entity: W&B user or team (``None``: the default entity).
    :param group: group of the run (e.g. the experiment of a sweep).
    :param tags: tags of the run.
    :param config: the run's settings shown as the W&B config, e.g. ``spec.to_dict()``
        of a ``RunSpec``; JSON-able values only.
    :param dir: directory of W&B's local files (``wandb/`` is created inside); ``None``:
        ``WANDB_DIR`` or the working directory.
    :param mode: ``"online"``, ``"offline"`` (local files only, upload later with
        ``wandb sync``) or ``"disabled"``; ``None``: ``WANDB_MODE`` or online.
    :param run_id: id of the W&B run; ``None`` draws a fresh one. An explicit id joins
        that run if it exists (``resume="allow"``); unless the logger is then restored
        from a checkpoint, the run must hold no points yet.
    :param train_interval: env steps between training-collect records.
    :param test_interval: env steps between test records.
    :param update_interval: gradient steps between update records.
    :param info_interval: epochs between info records.
    """

    def __init__(
        self,
        *,
        project: str | None = None,
        name: str | None = None,
        entity: str | None = None,
        group: str | None = None,
        tags: Sequence[str] | None = None,
        config: Mapping[str, Any] | None = None,
        dir: str | os.PathLike[str] | None = None,
        mode: Literal["online", "offline", "disabled"] | None = None,
        run_id: str | None = None,
        train_interval: int = 1,
        test_interval: int = 1,
        update_interval: int = 1,
        info_interval: int = 1,
    ) -> None:
        super().__init__(train_interval, test_interval, update_interval, info_interval)
        self._wandb = require("wandb", extra="wandb")
        if mode is not None and mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES} or None, got {mode!r}")
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(f"config must be a mapping (e.g. spec.to_dict()), got {config!r}")
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise ValueError(f"run_id must be a non-empty str or None, got {run_id!r}")
        if (mode or os.environ.get("WANDB_MODE") or "online") in ("online", "run"):
            self._check_login(explicit=mode == "online")
        if dir is not None:
            Path(dir).mkdir(parents=True, exist_ok=True)
        self._init_kwargs: dict[str, Any] = {
            "project": project,
            "name": name,
            "entity": entity,
            "group": group,
            "tags": list(tags) if tags is not None else None,
            "config": dict(config) if config is not None else None,
            "dir": os.fspath(dir) if dir is not None else None,
            "mode": mode,
        }
        # uuid4 draws from os.urandom, so the trainers' seeded random streams stay untouched
        self.run_id: str = run_id if run_id is not None else uuid.uuid4().hex[:12]
        self._resume: Literal["allow", "must"] | None = "allow" if run_id is not None else None
        self._run: Any = None
        self._held: dict[str, float] = {}  # tag -> last step the run holds (local files)
        self._scope_floor: dict[Scope, float] = {}  # scope -> last step, from the summary
        self._earlier_config: dict[str, Any] = {}  # config of the run's earlier processes

    def _check_login(self, *, explicit: bool) -> None:
        """Online, W&B needs an API key; find it now (or ask for it, in a terminal) rather
        than at the first record, after the first collect. (Without an ``explicit`` mode, a
        process whose W&B was set up offline runs offline: no key needed.)"""
        try:
            if not self._wandb.login(verify=False) and explicit:
                raise self._wandb.errors.UsageError("W&B is set up offline in this process")
        except (self._wandb.errors.UsageError, self._wandb.errors.AuthenticationError) as exc:
            raise ValueError(
                f"mode 'online' (WANDB_MODE or the default) needs a valid W&B API key ({exc}): "
                "run `wandb login`, set WANDB_API_KEY, or pass mode='offline' and upload "
                "later with `wandb sync`"
            ) from exc

    @property
    def run(self) -> Any:
        """The ``wandb.Run``, started on first use (with the step metrics defined)."""
        if self._run is None:
            self.check_open()  # a closed logger starts no run
            self._run = self._wandb.init(
                id=self.run_id, resume=self._resume, reinit="create_new", **self._init_kwargs
            )
            for scope, step_metric in STEP_METRICS.items():
                self._run.define_metric(step_metric, hidden=False)
                self._run.define_metric(f"{scope}/*", step_metric=step_metric)
            if self._resume is not None:
                self._read_held()
            if self._restored:
                self._note_kept()
        return self._run

    def _read_held(self) -> None:
        """What the run already holds: per tag, the last step in the local files of its
        earlier processes (online and offline); per scope, the last step in its summary
        (online) where that is past what the files show."""
        own = Path(self._run.settings.sync_dir).resolve()
        earlier = [
            read_local_run(d)
            for d in local_run_dirs(own.parent, self.run_id)
            if d.resolve() != own and any(d.glob("run-*.wandb"))  # W&B may not have written it
        ]
        self._earlier_config = {k: v for run in earlier for k, v in run.config.items()}
        for row in (row for run in earlier for row in run.history):
            for tag in row:
                scope = tag_scope(tag)
                step = None if scope is None else row.get(STEP_METRICS[scope])
                if isinstance(step, int | float):
                    self._held[tag] = max(float(step), self._held.get(tag, float(step)))
        for scope, step_metric in STEP_METRICS.items():
            value = self._run.summary.get(step_metric)
            if isinstance(value, int | float) and value > self._held.get(step_metric, -1.0):
                self._scope_floor[scope] = float(value)

    def _fresh(self, scope: Scope, step: int, tags: Iterable[str]) -> list[str]:
        """The ``tags`` the run does not hold at ``step`` yet."""
        floor = self._scope_floor.get(scope, -1.0)
        return [tag for tag in tags if step > max(self._held.get(tag, -1.0), floor)]

    def _note_kept(self) -> None:
        """Warn about, and note in the run's config, the steps that keep the interrupted
        process's values (W&B cannot cut a run's history back)."""
        held = dict(self._held)
        for scope, floor in self._scope_floor.items():
            held[STEP_METRICS[scope]] = max(floor, held.get(STEP_METRICS[scope], floor))
        kept = kept_past_position({s: self.written_step(s) for s in SCOPES}, held)
        if kept is None:
            return
        earlier = self._run.config.get(KEPT_KEY) or self._earlier_config.get(KEPT_KEY)
        note = f"{earlier}; {kept}" if earlier else kept
        self._run.config.update({KEPT_KEY: note}, allow_val_change=True)
        warnings.warn(
            f"the W&B run {self.run_id!r} holds points past the checkpoint ({kept}), logged by "
            "the interrupted process; W&B cannot cut a run's history back, so they keep that "
            f"process's values and this run logs from the next step on (config {KEPT_KEY!r})",
            stacklevel=2,
        )

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Log ``data`` with ``<scope>'s step metric = step``, but for tags the run already
        holds at ``step`` or later (a resumed run's re-done steps)."""
        run = self.run
        fresh = self._fresh(scope, step, data)
        if fresh:
            run.log({**{tag: data[tag] for tag in fresh}, STEP_METRICS[scope]: step})
            self._held.update(dict.fromkeys(fresh, float(step)))  # a rolled-back epoch too

    def log_video(
        self, path: str | os.PathLike[str], step: int, *, tag: str = "test/video"
    ) -> None:
        """Log the mp4 at ``path`` as a ``wandb.Video`` named ``tag`` at ``step``; a step the
        resumed run already has is skipped, as for scalars."""
        scope = video_scope(tag)
        self._begin()
        run = self.run  # reads what the run holds on a resume
        if self._fresh(scope, step, [tag]):
            kind = Path(path).suffix.lstrip(".") or "mp4"
            video = self._wandb.Video(os.fspath(path), format=kind)
            run.log({tag: video, STEP_METRICS[scope]: step})
            self._held[tag] = float(step)
        self._mark_written(scope, step)

    def _earlier_records(self) -> tuple[str, str] | None:
        if self._resume != "allow":
            return None  # a fresh id holds nothing; a restored logger is not asked
        _ = self.run  # starts the run, which reads what it holds
        held = {**self._held, **{STEP_METRICS[s]: v for s, v in self._scope_floor.items()}}
        if not held:
            return None
        last = max(held.items(), key=lambda item: item[1])
        return (
            f"run_id {self.run_id!r} already holds the points of an earlier run (e.g. "
            f"{last[0]!r} up to step {last[1]:.15g})",
            ", and this logger was not restored from a "
            "checkpoint: this run's steps would be logged again beside them. Leave "
            "run_id=None for a new W&B run, or resume the earlier run from its checkpoint "
            "(resume_from=...)",
        )

    def state_dict(self) -> dict[str, object]:
        """The positions of :meth:`BaseLogger.state_dict` and ``"wandb_run_id"``."""
        state = super().state_dict()
        state["wandb_run_id"] = self.run_id
        return state

    def _restore(self, state: Mapping[str, object]) -> None:
        """Restore the positions and continue the checkpointed W&B run (``resume="must"``).

        Call it before the first record: a run that has already started cannot switch ids.
        """
        run_id = state.get("wandb_run_id")
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(
                f"logger state['wandb_run_id'] must be the W&B run id (str), got {run_id!r}: "
                "the checkpoint was not written with a WandbLogger"
            )
        if self._run is not None and run_id != self.run_id:
            raise ValueError(
                f"the W&B run {self.run_id!r} has already started, so it cannot continue the "
                f"checkpointed run {run_id!r}: restore the checkpoint before logging anything"
            )
        super()._restore(state)
        if self._run is None:
            self.run_id, self._resume = run_id, "must"  # the run starts (and notes) later
        else:
            self._note_kept()  # rolled back in this process: the points it logged since stay

    def close(self) -> None:
        """Finish the W&B run (uploads the rest when online); safe to call more than once."""
        if self._run is not None and not self._closed:
            self._run.finish()
        super().close()
