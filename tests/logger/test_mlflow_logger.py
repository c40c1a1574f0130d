"""MLflowLogger on a SQLite tracking store in tmp_path: metrics and steps, params,
checkpoint artifacts, a resumed run that continues the same MLflow run."""

from __future__ import annotations

import http.server
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mlflow", reason="the mlflow extra is not installed")

from mlflow.tracking import MlflowClient

from epochtrain.errors import CheckpointError
from epochtrain.extras import MissingExtraError
from epochtrain.logger import JSONLLogger, LoggerResumeError, MLflowLogger, MultiLogger
from epochtrain.logger.mlflow import flatten_params
from epochtrain.stats import InfoStats
from tests.trainer.tiny import build


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite store for the module (creating its schema takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"


@pytest.fixture(autouse=True)
def _store(tracking_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)


def make(tmp_path: Path, **kwargs: Any) -> MLflowLogger:
    """A logger on the module's store, in an experiment of the test's own."""
    return MLflowLogger(
        experiment_name=tmp_path.name,
        artifact_location=(tmp_path / "artifacts").as_uri(),
        **kwargs,
    )


def store(tmp_path: Path) -> MlflowClient:
    """A client of its own on the tracking store (``MLFLOW_TRACKING_URI``)."""
    return MlflowClient()


def history(tmp_path: Path, run_id: str, tag: str) -> list[tuple[int, float]]:
    """``(step, value)`` of every point of ``tag``, by step (duplicates kept)."""
    return sorted((m.step, m.value) for m in store(tmp_path).get_metric_history(run_id, tag))


def test_metrics_keep_their_steps_and_the_config_becomes_params(tmp_path: Path) -> None:
    config = {"algo": "dqn", "trainer": {"max_epoch": 3, "step_per_epoch": 1000}}
    with make(tmp_path, config=config, run_name="dqn-cartpole") as logger:
        logger.log_data("train", 1000, {"train/n_collected_steps": 1000.0})
        logger.log_data("update", 50, {"update/loss": 0.5})
        logger.log_data("train", 2000, {"train/n_collected_steps": 1000.0})
        logger.log_info_data(InfoStats(epoch=1, env_step=2000), 1)
    client = store(tmp_path)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "dqn-cartpole"
    assert run.data.params == {
        "algo": "dqn",
        "trainer.max_epoch": "3",
        "trainer.step_per_epoch": "1000",
    }
    assert history(tmp_path, logger.run_id, "train/n_collected_steps") == [
        (1000, 1000.0),
        (2000, 1000.0),
    ]
    assert history(tmp_path, logger.run_id, "update/loss") == [(50, 0.5)]
    assert history(tmp_path, logger.run_id, "info/env_step") == [(1, 2000.0)]


def test_a_resumed_trainer_continues_the_run_and_writes_no_step_twice(tmp_path: Path) -> None:
    """2 epochs, a checkpoint, a 3rd epoch that the resumed run repeats, then a 4th; the
    checkpoint directory is uploaded as an artifact when the logger closes."""
    ckpt = tmp_path / "ckpt"
    logger = make(tmp_path, artifact_dir=ckpt)
    trainer = build("off", max_epoch=4, logger=logger)
    next(trainer), next(trainer)
    trainer.save_checkpoint(ckpt / "epoch_2")
    next(trainer)  # logged, then the process "dies" (no close: the run stays RUNNING)
    resumed_logger = make(tmp_path, artifact_dir=ckpt)
    resumed = build("off", max_epoch=4, logger=resumed_logger, resume_from=str(ckpt / "epoch_2"))
    resumed.run()
    resumed_logger.close()
    assert resumed_logger.run_id == logger.run_id
    client = store(tmp_path)
    assert (
        len(client.search_runs([client.get_experiment_by_name(tmp_path.name).experiment_id])) == 1
    )
    assert [step for step, _ in history(tmp_path, logger.run_id, "info/epoch")] == [1, 2, 3, 4]
    for tag in ("update/loss", "train/n_collected_steps", "test/returns_stat/mean"):
        steps = [step for step, _ in history(tmp_path, logger.run_id, tag)]
        assert steps == sorted(set(steps)), tag
        assert steps[-1] == (
            resumed.state.gradient_step if tag == "update/loss" else resumed.state.env_step
        )
    artifacts = [a.path for a in client.list_artifacts(logger.run_id, "checkpoints")]
    assert artifacts == ["checkpoints/epoch_2"]
    assert client.get_run(logger.run_id).info.status == "FINISHED"


def test_a_resume_into_another_tracking_store_is_refused_before_anything_changes(
    tmp_path: Path,
) -> None:
    """Before, it only warned: a new MLflow run held the resumed epochs, and a JSONL logger
    listed after the MLflow one was neither trimmed nor restored (duplicate steps)."""
    ckpt = tmp_path / "ckpt"
    jsonl = tmp_path / "log.jsonl"
    trainer = build("off", max_epoch=4, logger=MultiLogger(make(tmp_path), JSONLLogger(jsonl)))
    next(trainer)
    trainer.save_checkpoint(ckpt)
    next(trainer)  # logged past the checkpoint, then the process "dies"
    written = jsonl.read_bytes()
    elsewhere = MLflowLogger(tracking_uri=f"sqlite:///{tmp_path}/other.db")
    logger = MultiLogger(elsewhere, JSONLLogger(jsonl))
    with pytest.raises(CheckpointError, match=r"is not a run of the tracking store .*other\.db"):
        build("off", max_epoch=4, logger=logger, resume_from=str(ckpt))
    assert jsonl.read_bytes() == written  # not trimmed: nothing was restored
    assert isinstance(LoggerResumeError("x"), ValueError)  # the CLI's one-line exit 2


def test_a_video_is_stored_as_an_artifact(tmp_path: Path) -> None:
    video = tmp_path / "epoch_0002.mp4"
    video.write_bytes(b"not decoded by MLflow")
    with make(tmp_path) as logger:
        logger.log_video(video, 1000)
    artifacts = store(tmp_path).list_artifacts(logger.run_id, "test/video")
    assert [a.path for a in artifacts] == ["test/video/epoch_0002.mp4"]
    assert logger.written_step("test") == 1000


def test_a_logger_that_never_logged_creates_no_run(tmp_path: Path) -> None:
    make(tmp_path).close()
    client = store(tmp_path)
    experiment = client.get_experiment_by_name(tmp_path.name)
    assert experiment is None or client.search_runs([experiment.experiment_id]) == []


def test_restoring_into_a_started_run_or_from_another_logger_raises(tmp_path: Path) -> None:
    logger = make(tmp_path)
    with pytest.raises(ValueError, match="mlflow_run_id"):
        logger.load_state_dict({"train": None, "test": None, "update": None, "info": None})
    logger.log_data("info", 1, {"info/epoch": 1.0})
    with pytest.raises(ValueError, match="already started"):
        logger.load_state_dict({**logger.state_dict(), "mlflow_run_id": "other"})
    logger.close()
    with pytest.raises(ValueError, match="tracking_uri"):
        make(tmp_path, run_id="0123456789abcdef")


def test_flatten_params_joins_nested_keys_with_dots() -> None:
    assert flatten_params({"a": {"b": 1, "c": {"d": None}}, "e": [1, 2]}) == {
        "a.b": "1",
        "a.c.d": "None",
        "e": "[1, 2]",
    }


def test_without_mlflow_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'epochtrain\[mlflow\]'"):
        MLflowLogger()


def test_a_tracking_server_that_does_not_answer_is_refused_at_construction() -> None:
    with socket.socket() as sock:  # a port with nothing listening once the socket closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    start = time.perf_counter()
    with pytest.raises(ValueError, match=f"tracking_uri 'http://127.0.0.1:{port}' does not answer"):
        MLflowLogger(tracking_uri=f"http://127.0.0.1:{port}")
    assert time.perf_counter() - start < 30  # MLflow's own retries take about four minutes


def test_a_server_that_answers_any_status_is_accepted() -> None:
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(404)

        def log_message(self, *args: Any) -> None:
            pass

    with http.server.HTTPServer(("127.0.0.1", 0), NotFound) as server:
        thread = threading.Thread(target=server.handle_request)
        thread.start()
        logger = MLflowLogger(tracking_uri=f"http://127.0.0.1:{server.server_address[1]}")
        thread.join(timeout=10)
    assert logger.client.tracking_uri.startswith("http://127.0.0.1:")
    assert not thread.is_alive()  # the probe reached the server
