"""MLflow logger: metrics with their steps, the run's settings as params, checkpoints as
artifacts; the MLflow run id kept for resuming.

Every tag (``train/returns_stat/mean``, ``update/loss``, ...) is an MLflow metric whose
``step`` is the record's step in its scope's unit (env steps, gradient steps, epochs);
MLflow keeps one step axis per metric, so the units never mix. The logger talks to the
tracking store through its own ``MlflowClient``, never through ``mlflow``'s global active
run, so zipped trainers can each log to their own run.

Resuming: the MLflow run id is part of :meth:`MLflowLogger.state_dict`, which checkpoints
save; a logger restored with :meth:`MLflowLogger.load_state_dict` continues that run. MLflow
has no call that deletes metric values (``MlflowClient`` deletes runs and tags, not
points), and a value logged again at a step is kept beside the first. So the points the
interrupted process wrote after its checkpoint stay, with that process's values: the
last step of each metric is read from the run, and the resumed process logs a metric
only past it (no point twice, none missing). Which steps those are is warned about and
recorded in the run's tag ``epochtrain.kept_from_interrupted``.

A logger given the ``run_id`` of a run that holds metrics, and not restored from a
checkpoint, is a new run in an old one: it raises
:class:`~epochtrain.logger.ExistingRecordsError` before its first record.

Needs the ``mlflow`` extra (``pip install 'epochtrain[mlflow]'``).
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from epochtrain.extras import require
from epochtrain.logger.base import BaseLogger, LoggerResumeError
from epochtrain.logger.resume import kept_past_position
from epochtrain.logger.tags import SCOPES, Scope, tag_scope, video_scope

__all__ = ["KEPT_TAG", "MLflowLogger", "flatten_params"]

KEPT_TAG = "epochtrain.kept_from_interrupted"
"""The run tag listing, per resume, the steps that keep the interrupted process's values."""

_MAX_BATCH = 1000  # MLflow's limit on metrics per log_batch call
_PROBE_TIMEOUT = 10.0  # seconds to wait for a tracking server's first answer
_MAX_TAG = 5000  # characters of a tag value every MLflow version stores


def _check_server(uri: str) -> None:
    """Raise unless the tracking server at an http(s) ``uri`` answers (any HTTP status).

    MLflow itself would retry a refused connection for about four minutes at the first
    record, after the first collect, and then end the run; a typo in the URI or a server
    not started is better said before any work.
    """
    if not uri.startswith(("http://", "https://")):
        return  # a file or database store: created on first use
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=_PROBE_TIMEOUT):
            pass
    except urllib.error.HTTPError:
        pass  # the server answered: /health is missing or needs a login, the API may not
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ValueError(
            f"tracking_uri {uri!r} does not answer ({reason}): start the MLflow server "
            "(mlflow server --port ...) or fix the URI"
        ) from exc


def flatten_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``: nested settings as MLflow params (strings)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_params(value, f"{name}."))
        else:
            out[name] = str(value)
    return out


class MLflowLogger(BaseLogger):
    """Log every record to an MLflow run.

    :param tracking_uri: the tracking store, e.g. ``"sqlite:///mlflow.db"`` or a server
        ``"http://host:5000"`` (MLflow 3 refuses a plain directory unless
        ``MLFLOW_ALLOW_FILE_STORE=true``); ``None``: ``MLFLOW_TRACKING_URI``, else MLflow's
        default (``sqlite:///mlflow.db`` in MLflow 3).
    :param experiment_name: experiment holding the run; created if missing.
    :param run_name: display name of the run.
    :param config: the run's settings, e.g. ``spec.to_dict()`` of a ``RunSpec``; logged as
        params once, when the run is created (nested keys joined with ``.``).
    :param tags: MLflow tags of the run.
    :param artifact_dir: a directory (e.g. the run's ``checkpoint_dir``) logged under the
        artifact path ``checkpoints`` when the logger is closed; ``None``: nothing.
    :param artifact_location: where a newly created experiment stores artifacts (``None``:
        the tracking store's default, ``./mlruns`` for a database store).
    :param run_id: id of an existing MLflow run to log to; ``None`` creates a run. Unless
        the logger is then restored from a checkpoint, the run must hold no metrics of the
        ``train/``, ``test/``, ``update/``, ``info/`` namespaces.
    :param train_interval: env steps between training-collect records.
    :param test_interval: env steps between test records.
    :param update_interval: gradient steps between update records.
    :param info_interval: epochs between info records.
    """

    def __init__(
        self,
        *,
        tracking_uri: str | None = None,
        experiment_name: str = "epochtrain",
        run_name: str | None = None,
        config: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
        artifact_dir: str | os.PathLike[str] | None = None,
        artifact_location: str | None = None,
        run_id: str | None = None,
        train_interval: int = 1,
        test_interval: int = 1,
        update_interval: int = 1,
        info_interval: int = 1,
    ) -> None:
        super().__init__(train_interval, test_interval, update_interval, info_interval)
        tracking = require("mlflow.tracking", extra="mlflow")
        self._entities = require("mlflow.entities", extra="mlflow")
        self._exceptions = require("mlflow.exceptions", extra="mlflow")
        if not isinstance(experiment_name, str) or not experiment_name:
            raise ValueError(f"experiment_name must be a non-empty str, got {experiment_name!r}")
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(f"config must be a mapping (e.g. spec.to_dict()), got {config!r}")
        self.client: Any = tracking.MlflowClient(tracking_uri=tracking_uri)
        _check_server(self.client.tracking_uri)
        self.artifact_dir = Path(artifact_dir) if artifact_dir is not None else None
        self._new_run: dict[str, Any] = {
            "experiment_name": experiment_name,
            "run_name": run_name,
            "config": dict(config) if config is not None else {},
            "tags": dict(tags) if tags is not None else {},
            "artifact_location": artifact_location,
        }
        self._held: dict[str, int] = {}  # tag -> last step the run holds
        self._run_id: str | None = self._continue(run_id) if run_id is not None else None

    @property
    def run_id(self) -> str:
        """The MLflow run's id; the run is created on first use (first record, or a
        checkpoint's :meth:`state_dict`), so a restored logger creates no empty run."""
        if self._run_id is None:
            self._run_id = self._create_run()
        return self._run_id

    def _create_run(self) -> str:
        new = self._new_run
        experiment = self.client.get_experiment_by_name(new["experiment_name"])
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment(
                new["experiment_name"], artifact_location=new["artifact_location"]
            )
        )
        run = self.client.create_run(experiment_id, run_name=new["run_name"], tags=new["tags"])
        run_id: str = run.info.run_id
        params = [self._entities.Param(k, v) for k, v in flatten_params(new["config"]).items()]
        for start in range(0, len(params), 100):  # MLflow takes 100 params per batch
            self.client.log_batch(run_id, params=params[start : start + 100])
        return run_id

    def _continue(self, run_id: str) -> str:
        """Mark ``run_id`` running again and read the last step of each of its metrics."""
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(f"run_id must be a non-empty str (an MLflow run id), got {run_id!r}")
        run = self._get_run(run_id)
        self.client.update_run(run_id, status="RUNNING")
        for key in run.data.metrics:
            if tag_scope(key) is not None:
                history = self.client.get_metric_history(run_id, key)
                self._held[key] = max(m.step for m in history)
        return run_id

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        """Log every tag of ``data`` as a metric at ``step``, but for tags the run already
        holds at ``step`` or later (a resumed run's re-done steps)."""
        now = int(time.time() * 1000)
        metrics = [
            self._entities.Metric(tag, float(v), now, step)
            for tag, v in data.items()
            if step > self._held.get(tag, step - 1)
        ]
        for start in range(0, len(metrics), _MAX_BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[start : start + _MAX_BATCH])
            for metric in metrics[start : start + _MAX_BATCH]:
                self._held[metric.key] = step  # a rolled-back epoch's re-run skips it too

    def log_video(
        self, path: str | os.PathLike[str], step: int, *, tag: str = "test/video"
    ) -> None:
        """Upload the video file at ``path`` as an artifact under ``tag`` (``test/video``)."""
        scope = video_scope(tag)
        self._begin()
        self.client.log_artifact(self.run_id, os.fspath(path), artifact_path=tag)
        self._mark_written(scope, step)

    def _get_run(self, run_id: str) -> Any:
        try:
            return self.client.get_run(run_id)
        except self._exceptions.MlflowException as exc:  # no such run in this store
            raise LoggerResumeError(
                f"run_id {run_id!r} is not a run of the tracking store "
                f"{self.client.tracking_uri!r} ({exc}): pass the tracking_uri it was logged to"
            ) from exc

    def _earlier_records(self) -> tuple[str, str] | None:
        if not self._held:
            return None
        tag, step = max(self._held.items(), key=lambda item: item[1])
        return (
            f"run_id {self._run_id!r} already holds the metrics of an earlier run "
            f"({len(self._held)} metrics, e.g. {tag!r} up to step {step})",
            ", and this logger was not "
            "restored from a checkpoint: this run's points at steps the run holds would be "
            "dropped and the rest mixed into it. Leave run_id=None for a new MLflow run, or "
            "resume the earlier run from its checkpoint (resume_from=...)",
        )

    def _note_kept(self) -> None:
        """Warn about, and tag the run with, the steps that keep the interrupted process's
        values (MLflow cannot delete them)."""
        kept = kept_past_position({s: self.written_step(s) for s in SCOPES}, self._held)
        if kept is None:
            return
        run_id = self.run_id
        earlier = self.client.get_run(run_id).data.tags.get(KEPT_TAG)
        note = kept if not earlier else f"{earlier}; {kept}"
        self.client.set_tag(run_id, KEPT_TAG, note[-_MAX_TAG:])  # the latest resumes
        warnings.warn(
            f"the MLflow run {run_id!r} holds points past the checkpoint ({kept}), logged by "
            "the interrupted process; MLflow cannot delete them, so they keep that process's "
            f"values and this run logs from the next step on (tag {KEPT_TAG!r})",
            stacklevel=2,
        )

    def _check_resume(self, state: Mapping[str, object]) -> None:
        """Raise :class:`LoggerResumeError` unless the checkpoint's ``"mlflow_run_id"`` is a
        run of this tracking store (a resume would otherwise start a new MLflow run)."""
        run_id = state.get("mlflow_run_id")
        if isinstance(run_id, str) and run_id and self._run_id is None:
            self._get_run(run_id)

    def state_dict(self) -> dict[str, object]:
        """The positions of :meth:`BaseLogger.state_dict` and ``"mlflow_run_id"``."""
        state = super().state_dict()
        state["mlflow_run_id"] = self.run_id
        return state

    def _restore(self, state: Mapping[str, object]) -> None:
        """Restore the positions and continue the checkpointed MLflow run.

        Call it before the first record: a run that has already started cannot switch ids.
        """
        run_id = state.get("mlflow_run_id")
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(
                f"logger state['mlflow_run_id'] must be the MLflow run id (str), got "
                f"{run_id!r}: the checkpoint was not written with an MLflowLogger"
            )
        if self._run_id is not None and self._run_id != run_id:
            raise ValueError(
                f"the MLflow run {self._run_id!r} has already started, so it cannot continue "
                f"the checkpointed run {run_id!r}: restore the checkpoint before logging"
            )
        super()._restore(state)
        if self._run_id is None:
            self._run_id = self._continue(run_id)
        self._note_kept()

    def close(self) -> None:
        """Upload ``artifact_dir`` (if set and present), end the run; safe to call twice."""
        if self._closed:
            return
        super().close()
        if self._run_id is None:
            return  # nothing was logged: no run was created
        if self.artifact_dir is not None and self.artifact_dir.is_dir():
            self.client.log_artifacts(
                self.run_id, os.fspath(self.artifact_dir), artifact_path="checkpoints"
            )
        self.client.set_terminated(self.run_id, status="FINISHED")
