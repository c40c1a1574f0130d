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
(``resume="must"``). Online, the run's summary tells how far each scope got before the
interrupted process died, and points at or below that step are not sent again, so no
point appears twice; the local run files of the earlier processes (in the same W&B
``dir``) tell the same offline. Offline (``mode="offline"``), each process writes its own
``offline-run-*-<id>`` directory with the same id; ``wandb sync`` uploads them, in order,
into one run.

Needs the ``wandb`` extra (``pip install 'epochtrain[wandb]'``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from epochtrain.extras import require
from epochtrain.logger.base import SCOPES, BaseLogger, Scope, video_scope
from epochtrain.logger.wandb_files import local_run_dirs, read_local_run

__all__ = ["STEP_METRICS", "WandbLogger"]

STEP_METRICS: dict[Scope, str] = {
    "train": "train/env_step",
    "test": "test/env_step",
    "update": "update/gradient_step",
    "info": "info/epoch",
}
"""The x-axis metric of each scope (logged with every record of the scope)."""

_MODES = ("online", "offline", "disabled")


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
        that run if it exists (``resume="allow"``).
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
        self._floor: dict[Scope, float | None] = dict.fromkeys(SCOPES)
        self._closed = False

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
            if self._closed:
                raise RuntimeError("the WandbLogger is closed; build a new one for a new run")
            self._run = self._wandb.init(
                id=self.run_id, resume=self._resume, reinit="create_new", **self._init_kwargs
            )
            for scope, step_metric in STEP_METRICS.items():
                self._run.define_metric(step_metric, hidden=False)
                self._run.define_metric(f"{scope}/*", step_metric=step_metric)
            if self._resume == "must":
                self._read_floor()
        return self._run

    def _read_floor(self) -> None:
        """Per scope, the last step the run already holds: from its summary (online) and
        from the local files of its earlier processes (online and offline)."""
        summary = self._run.summary
        own = Path(self._run.settings.sync_dir).resolve()
        earlier = [
            d
            for d in local_run_dirs(own.parent, self.run_id)
            if d.resolve() != own and any(d.glob("run-*.wandb"))  # W&B may not have written it
        ]
        rows = [row for d in earlier for row in read_local_run(d).history]
        for scope, step_metric in STEP_METRICS.items():
            steps = [row[step_metric] for row in rows if step_metric in row]
            value = summary.get(step_metric)
            if isinstance(value, int | float):
                steps.append(value)
            self._floor[scope] = float(max(steps)) if steps else None

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Log ``data`` with ``<scope>'s step metric = step``; skip steps the run already has."""
        run = self.run
        floor = self._floor[scope]
        if floor is not None and step <= floor:
            return
        run.log({**data, STEP_METRICS[scope]: step})

    def log_video(
        self, path: str | os.PathLike[str], step: int, *, tag: str = "test/video"
    ) -> None:
        """Log the mp4 at ``path`` as a ``wandb.Video`` named ``tag`` at ``step``; a step the
        resumed run already has is skipped, as for scalars."""
        scope = video_scope(tag)
        run = self.run  # reads the run's floor on a resume
        floor = self._floor[scope]
        if floor is not None and step <= floor:
            return
        video = self._wandb.Video(os.fspath(path), format=Path(path).suffix.lstrip(".") or "mp4")
        run.log({tag: video, STEP_METRICS[scope]: step})
        self._mark_written(scope, step)

    def state_dict(self) -> dict[str, object]:
        """The positions of :meth:`BaseLogger.state_dict` and ``"wandb_run_id"``."""
        state = super().state_dict()
        state["wandb_run_id"] = self.run_id
        return state

    def load_state_dict(self, state: Mapping[str, object]) -> None:
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
        super().load_state_dict(state)
        if self._run is None:
            self.run_id, self._resume = run_id, "must"

    def close(self) -> None:
        """Finish the W&B run (uploads the rest when online); safe to call more than once."""
        if self._run is not None and not self._closed:
            self._run.finish()
        self._closed = True
