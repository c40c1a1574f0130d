"""A logger closed by its user is refused with an error naming it and the fix.

Before, a logger closed by a direct ``close()`` (not through a trainer) was taken by a
trainer and failed at its first record with whatever its backend said: "I/O operation on
closed file" (JSONL, CSV, a MultiLogger of them), a W&B ``UsageError`` (the run is
finished), or no error at all: TensorBoard opened a second event file that was never
flushed, MLflow logged into the run it had already marked FINISHED.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from epochtrain.logger import (
    BaseLogger,
    CSVLogger,
    JSONLLogger,
    LazyLogger,
    LoggerClosedError,
    MLflowLogger,
    MultiLogger,
    TensorboardLogger,
    WandbLogger,
)
from tests.trainer.tiny import build

Make = Callable[[Path], BaseLogger]
MAKERS: dict[str, Make] = {
    "jsonl": lambda d: JSONLLogger(d / "log.jsonl"),
    "csv": lambda d: CSVLogger(d / "log.csv"),
    "tensorboard": lambda d: TensorboardLogger(d / "tb"),
    "wandb": lambda d: WandbLogger(project="tests", dir=d, mode="offline"),
    "mlflow": lambda d: MLflowLogger(experiment_name="closed"),
    "multi": lambda d: MultiLogger(JSONLLogger(d / "a.jsonl"), CSVLogger(d / "b.csv")),
}
NAMED = {  # what the error names: the kind, and the destination where there is one
    "jsonl": r"JSONLLogger\('[^']*log\.jsonl'\)",
    "csv": r"CSVLogger\('[^']*log\.csv'\)",
    "tensorboard": r"TensorboardLogger\('[^']*tb'\)",
    "wandb": r"WandbLogger",
    "mlflow": r"MLflowLogger",
    "multi": r"MultiLogger\(JSONLLogger\('[^']*a\.jsonl'\), CSVLogger\('[^']*b\.csv'\)\)",
}
EXTRA = {"wandb": "wandb", "mlflow": "mlflow"}


@pytest.fixture(autouse=True)
def stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")


def make(kind: str, tmp_path: Path) -> BaseLogger:
    if kind in EXTRA:
        pytest.importorskip(EXTRA[kind], reason=f"the {EXTRA[kind]} extra is not installed")
    return MAKERS[kind](tmp_path)


def files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but the MLflow store, with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith("mlflow.db")
    }


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_logger_closed_by_its_user_is_refused_by_a_trainer_naming_it_and_the_fix(
    tmp_path: Path, kind: str
) -> None:
    logger = make(kind, tmp_path)
    logger.close()
    before = files(tmp_path)
    with pytest.raises(LoggerClosedError, match=rf"^logger: this {NAMED[kind]} was closed") as e:
        build("off", max_epoch=1, logger=logger)
    assert "was closed by a direct close() call" in str(e.value)
    assert "give the trainer a new logger" in str(e.value)
    assert isinstance(e.value, ValueError)  # bad input, as the trainer's other checks raise
    assert files(tmp_path) == before  # refused before anything was written


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_logger_closed_mid_run_fails_at_the_next_record_naming_it(
    tmp_path: Path, kind: str
) -> None:
    logger = make(kind, tmp_path)
    trainer = build("off", max_epoch=3, logger=logger)
    next(trainer)
    logger.close()  # by the user, while the trainer still logs to it
    with pytest.raises(LoggerClosedError, match=rf"^{NAMED[kind]} was closed") as e:
        next(trainer)
    assert "cannot write" in str(e.value) and "new logger" in str(e.value)
    assert "trainer.close()" in str(e.value)  # how to close it when the run is over
    trainer.close()
    logger.close()  # a second close is harmless


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_closed_logger_refuses_every_record_and_closing_twice_is_harmless(
    tmp_path: Path, kind: str
) -> None:
    logger = make(kind, tmp_path)
    logger.log_data("info", 1, {"info/epoch": 1.0})
    logger.close()
    logger.close()
    for call in (
        lambda: logger.log_data("info", 2, {"info/epoch": 2.0}),
        lambda: logger.log_video(tmp_path / "v.mp4", 2),
        logger.check_new_run,
        lambda: logger.load_state_dict(logger.state_dict()),
    ):
        with pytest.raises(LoggerClosedError, match=NAMED[kind]):
            call()
    logger.flush()  # nothing buffered: harmless, as before
    logger.close()


def test_a_logger_closed_inside_a_multilogger_is_named_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    inner = JSONLLogger(tmp_path / "inner.jsonl")
    other = JSONLLogger(tmp_path / "other.jsonl")
    both = MultiLogger(other, inner)
    inner.close()
    with pytest.raises(
        LoggerClosedError,
        match=r"^logger: this JSONLLogger\('[^']*inner\.jsonl'\) \(inside MultiLogger\(",
    ):
        build("off", max_epoch=1, logger=both)
    with pytest.raises(LoggerClosedError, match=r"inner\.jsonl"):
        both.log_data("info", 1, {"info/epoch": 1.0})
    assert other.path.read_text() == ""  # refused before any logger wrote
    other.check_open()  # the one not closed passes


def test_a_closed_logger_is_refused_by_reset_before_anything_is_reset(tmp_path: Path) -> None:
    trainer = build("off", max_epoch=1)
    trainer.run()
    new = JSONLLogger(tmp_path / "log.jsonl")
    new.close()
    with pytest.raises(LoggerClosedError, match=r"^reset\(logger=...\): this JSONLLogger"):
        trainer.reset(logger=new)
    assert trainer.state.epoch == 1 and trainer.finished  # nothing was reset


def test_the_logger_closed_by_its_trainer_keeps_the_trainers_error(tmp_path: Path) -> None:
    logger = JSONLLogger(tmp_path / "log.jsonl")
    trainer = build("off", max_epoch=1, logger=logger)
    trainer.run()
    trainer.close()
    logger.close()  # closed again by the user: harmless
    with pytest.raises(LoggerClosedError, match=r"closed by the close\(\) of the OffpolicyTrainer"):
        logger.log_data("info", 2, {"info/epoch": 2.0})
    with pytest.raises(ValueError, match=r"closed by the close\(\) of the OffpolicyTrainer"):
        build("off", max_epoch=1, logger=logger)


def test_a_closed_lazylogger_records_nothing_and_may_still_be_given_to_a_trainer(
    tmp_path: Path,
) -> None:
    lazy = LazyLogger()
    first = build("off", max_epoch=1, logger=lazy)
    first.run()
    first.close()  # closes the LazyLogger too
    assert build("off", max_epoch=1, logger=lazy).run().epoch == 1  # shared, as before
    both = MultiLogger(JSONLLogger(tmp_path / "log.jsonl"), lazy)
    assert build("off", max_epoch=1, logger=both).run().epoch == 1
    closed = JSONLLogger(tmp_path / "closed.jsonl")
    closed.close()
    with pytest.raises(LoggerClosedError, match=r"closed\.jsonl"):
        build("off", max_epoch=1, logger=MultiLogger(lazy, closed))
