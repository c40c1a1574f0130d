"""W&B (offline) and MLflow (SQLite in tmp_path) across a resume and a re-run.

Neither can delete a point, so after a resume the steps the interrupted process logged
past its checkpoint keep that process's values: each tag then holds every step once, the
run records which steps those are, and a warning says so. A new run given the id of a run
that already holds points is refused, as a new run into a used log file is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("wandb", reason="the wandb extra is not installed")
pytest.importorskip("mlflow", reason="the mlflow extra is not installed")

from mlflow.tracking import MlflowClient

from epochtrain.logger import ExistingRecordsError, JSONLLogger, MLflowLogger, MultiLogger
from epochtrain.logger.mlflow import KEPT_TAG
from epochtrain.logger.wandb import KEPT_KEY, STEP_METRICS, WandbLogger
from epochtrain.logger.wandb_files import LocalRun, local_run_dirs
from tests.logger.test_wandb_logger import finished
from tests.trainer.tiny import build

POSITION: dict[str, object] = {"train": None, "test": None, "update": None, "info": None}


@pytest.fixture(autouse=True)
def stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")


def wandb_logger(tmp_path: Path, **kwargs: Any) -> WandbLogger:
    return WandbLogger(project="tests", dir=tmp_path, mode="offline", **kwargs)


def mlflow_logger(tmp_path: Path, **kwargs: Any) -> MLflowLogger:
    return MLflowLogger(
        experiment_name="rerun", artifact_location=(tmp_path / "art").as_uri(), **kwargs
    )


def wandb_runs(tmp_path: Path) -> list[LocalRun]:
    return [finished(d) for d in local_run_dirs(tmp_path / "wandb")]


def wandb_points(runs: list[LocalRun], tag: str) -> list[tuple[int, float]]:
    metric = STEP_METRICS[tag.split("/", 1)[0]]
    return [(row[metric], row[tag]) for run in runs for row in run.history if tag in row]


def mlflow_points(run_id: str, tag: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in MlflowClient().get_metric_history(run_id, tag))


def interrupted(logger: WandbLogger | MLflowLogger) -> dict[str, object]:
    """Log epochs 1 and 2, checkpoint, then epoch 3 with a train/x the resume will not
    repeat and a train/y the process died before logging. Returns the checkpoint."""
    for epoch in (1, 2):
        logger.log_data("train", 100 * epoch, {"train/x": 1.0 * epoch, "train/y": 1.0 * epoch})
        logger.log_data("info", epoch, {"info/epoch": float(epoch)})
    state = logger.state_dict()
    logger.log_data("train", 300, {"train/x": -3.0})  # the killed process's value
    logger.close()
    return state


def resume(logger: WandbLogger | MLflowLogger, state: dict[str, object]) -> None:
    """The resumed process: epochs 3 and 4, epoch 3 with values of its own."""
    with pytest.warns(UserWarning, match=r"holds points past the checkpoint \(train \(200, 300\]"):
        logger.load_state_dict(state)
        for epoch in (3, 4):
            logger.log_data("train", 100 * epoch, {"train/x": 10.0 * epoch, "train/y": 1.0 * epoch})
            logger.log_data("info", epoch, {"info/epoch": float(epoch)})
    logger.close()


def test_mlflow_keeps_the_interrupted_points_once_fills_the_missing_and_names_them(
    tmp_path: Path,
) -> None:
    first = mlflow_logger(tmp_path)
    state = interrupted(first)
    resume(mlflow_logger(tmp_path), state)
    assert mlflow_points(first.run_id, "train/x") == [(100, 1), (200, 2), (300, -3), (400, 40)]
    # before: the resume skipped every train step <= 300, so train/y had no point at 300
    assert mlflow_points(first.run_id, "train/y") == [(100, 1), (200, 2), (300, 3), (400, 4)]
    assert [s for s, _ in mlflow_points(first.run_id, "info/epoch")] == [1, 2, 3, 4]
    tags = MlflowClient().get_run(first.run_id).data.tags
    assert tags[KEPT_TAG] == "train (200, 300]"


def test_wandb_keeps_the_interrupted_points_once_fills_the_missing_and_names_them(
    tmp_path: Path,
) -> None:
    first = wandb_logger(tmp_path)
    state = interrupted(first)
    wandb_runs(tmp_path)  # the first process's file is complete
    resume(wandb_logger(tmp_path), state)
    runs = wandb_runs(tmp_path)
    assert {run.run_id for run in runs} == {first.run_id}
    assert wandb_points(runs, "train/x") == [(100, 1), (200, 2), (300, -3), (400, 40)]
    assert wandb_points(runs, "train/y") == [(100, 1), (200, 2), (300, 3), (400, 4)]
    assert [s for s, _ in wandb_points(runs, "info/epoch")] == [1, 2, 3, 4]
    assert runs[-1].config[KEPT_KEY] == "train (200, 300]"


@pytest.mark.parametrize("kind", ["wandb", "mlflow"])
def test_a_rolled_back_epoch_in_the_same_process_logs_no_point_twice(
    tmp_path: Path, kind: str
) -> None:
    """The trainer rolls its logger back on Ctrl-C inside an epoch (``EpochSnapshot``) and
    runs the epoch again; before, its points were logged a second time."""
    logger = wandb_logger(tmp_path) if kind == "wandb" else mlflow_logger(tmp_path)
    logger.log_data("update", 10, {"update/loss": 1.0})
    state = logger.state_dict()
    logger.log_data("update", 20, {"update/loss": 2.0})  # then Ctrl-C
    with pytest.warns(UserWarning, match=r"update \(10, 20\]"):
        logger.load_state_dict(state)
    logger.log_data("update", 20, {"update/loss": 2.5})  # the epoch again
    logger.log_data("update", 30, {"update/loss": 3.0})
    logger.close()
    if kind == "wandb":
        points = wandb_points(wandb_runs(tmp_path), "update/loss")
    else:
        points = mlflow_points(logger.run_id, "update/loss")
    assert points == [(10, 1.0), (20, 2.0), (30, 3.0)]


def test_mlflow_a_new_run_into_a_run_with_metrics_is_refused(tmp_path: Path) -> None:
    first = mlflow_logger(tmp_path)
    build("off", max_epoch=2, logger=first).run()
    first.close()
    before = {tag: mlflow_points(first.run_id, tag) for tag in ("info/epoch", "update/loss")}
    again = mlflow_logger(tmp_path, run_id=first.run_id)
    with pytest.raises(ExistingRecordsError, match=f"run_id '{first.run_id}' already holds"):
        build("off", max_epoch=3, logger=again).run()
    again.close()
    # before: epochs 1-2 of the new run were dropped and its epoch 3 added to the old run
    assert {tag: mlflow_points(first.run_id, tag) for tag in before} == before


def test_mlflow_a_run_with_params_only_takes_a_new_run(tmp_path: Path) -> None:
    client = MlflowClient()
    experiment = client.create_experiment("outer", artifact_location=(tmp_path / "a").as_uri())
    run_id = client.create_run(experiment).info.run_id
    client.log_param(run_id, "lr", "0.01")  # a run made by the user's own code
    with mlflow_logger(tmp_path, run_id=run_id) as logger:
        logger.log_data("info", 1, {"info/epoch": 1.0})
    assert mlflow_points(run_id, "info/epoch") == [(1, 1.0)]


def test_wandb_a_new_run_into_a_run_with_points_is_refused(tmp_path: Path) -> None:
    first = wandb_logger(tmp_path)
    first.log_data("info", 1, {"info/epoch": 1.0})
    first.close()
    wandb_runs(tmp_path)
    again = wandb_logger(tmp_path, run_id=first.run_id)
    with pytest.raises(ExistingRecordsError, match=f"run_id '{first.run_id}' already holds"):
        again.log_data("info", 1, {"info/epoch": 1.0})
    again.close()
    # before: the second process logged epoch 1 again, a duplicate once synced
    assert [s for s, _ in wandb_points(wandb_runs(tmp_path), "info/epoch")] == [1]


def test_a_trainer_resumed_after_a_crash_logs_the_same_steps_as_its_jsonl(tmp_path: Path) -> None:
    """The MLflow run and the JSONL file of one resumed run: the same steps, once each."""

    def loggers() -> MultiLogger:
        return MultiLogger(JSONLLogger(tmp_path / "log.jsonl"), mlflow_logger(tmp_path))

    logger = loggers()
    trainer = build("off", max_epoch=4, logger=logger)
    next(trainer), next(trainer)
    trainer.save_checkpoint(tmp_path / "ckpt")
    next(trainer)  # logged, then the process "dies"
    logger.close()
    resumed = loggers()
    with pytest.warns(UserWarning, match=r"info \(2, 3\]"):
        build("off", max_epoch=4, logger=resumed, resume_from=tmp_path / "ckpt").run()
    resumed.close()
    run_id = resumed.loggers[1].state_dict()["mlflow_run_id"]
    assert isinstance(run_id, str)
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    for tag in ("info/epoch", "update/loss", "train/n_collected_steps", "test/returns_stat/mean"):
        jsonl_steps = [r["step"] for r in records if tag in r]
        assert [s for s, _ in mlflow_points(run_id, tag)] == jsonl_steps, tag
    kept = MlflowClient().get_run(run_id).data.tags[KEPT_TAG]
    assert kept.startswith("train (") and kept.endswith("info (2, 3]")
