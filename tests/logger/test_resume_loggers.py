"""Changing the loggers on resume: the loggers that stayed are restored (matched by kind
and destination, not position), dropped ones are ignored, new ones start fresh, and a new
one whose destination already holds records is refused before anything changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from epochtrain.cli import main
from epochtrain.errors import CheckpointError
from epochtrain.logger import (
    BaseLogger,
    CSVLogger,
    JSONLLogger,
    MultiLogger,
    TensorboardLogger,
)
from tests.test_resume_logging import read_events
from tests.trainer.tiny import build


def _steps(path: Path, scope: str) -> list[int]:
    return [
        r["step"] for r in map(json.loads, path.read_text().splitlines()) if r["scope"] == scope
    ]


def _checkpointed(tmp_path: Path, logger: BaseLogger) -> Path:
    """Two epochs logged to ``logger``, a checkpoint, a third epoch (then "killed")."""
    trainer = build("off", max_epoch=4, logger=logger)
    next(trainer), next(trainer)
    trainer.save_checkpoint(tmp_path / "ckpt")
    next(trainer)
    logger.close()
    return tmp_path / "ckpt"


def test_a_logger_added_on_resume_starts_fresh_and_the_one_that_stayed_is_restored(
    tmp_path: Path,
) -> None:
    ckpt = _checkpointed(tmp_path, TensorboardLogger(tmp_path))  # one logger: a bare state
    logger = MultiLogger(TensorboardLogger(tmp_path), JSONLLogger(tmp_path / "log.jsonl"))
    with pytest.warns(UserWarning, match=r"JSONLLogger\(.*log.jsonl'\) is not among"):
        resumed = build("off", max_epoch=4, logger=logger, resume_from=ckpt)
    resumed.run()
    logger.close()
    assert _steps(tmp_path / "log.jsonl", "info") == [3, 4]  # from the resumed steps on
    assert [step for step, _ in read_events(tmp_path)["info/epoch"]] == [1, 2, 3, 4]


def test_dropping_loggers_on_resume_restores_the_one_that_stayed(tmp_path: Path) -> None:
    first = MultiLogger(
        TensorboardLogger(tmp_path),
        JSONLLogger(tmp_path / "log.jsonl"),
        CSVLogger(tmp_path / "log.csv"),
    )
    ckpt = _checkpointed(tmp_path, first)
    logger = JSONLLogger(tmp_path / "log.jsonl")  # a bare logger given a MultiLogger's state
    resumed = build("off", max_epoch=4, logger=logger, resume_from=ckpt)
    resumed.run()
    logger.close()
    assert _steps(tmp_path / "log.jsonl", "info") == [1, 2, 3, 4]  # epoch 3 once


def test_a_logger_added_on_resume_where_records_are_is_refused_before_anything_changes(
    tmp_path: Path,
) -> None:
    ckpt = _checkpointed(tmp_path, JSONLLogger(tmp_path / "log.jsonl"))
    (tmp_path / "log.csv").write_text("scope,step,tag,value\ninfo,1,info/epoch,1.0\n")
    logger = MultiLogger(JSONLLogger(tmp_path / "log.jsonl"), CSVLogger(tmp_path / "log.csv"))
    before = (tmp_path / "log.jsonl").read_text()
    refusal = r"loggers: CSVLogger\(.*log.csv'\) is not among .* already holds 1 row: move them"
    with pytest.raises(CheckpointError, match=refusal) as exc:
        build("off", max_epoch=4, logger=logger, resume_from=ckpt)
    # the trainer fits the checkpoint: no "build the trainer as the checkpointed run was"
    assert "does not fit" not in str(exc.value) and "build the trainer" not in str(exc.value)
    assert (tmp_path / "log.jsonl").read_text() == before  # not trimmed: nothing restored
    logger.close()


def test_two_loggers_of_a_kind_are_matched_by_destination_not_position(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    ckpt = _checkpointed(tmp_path, MultiLogger(JSONLLogger(a), JSONLLogger(b, info_interval=2)))
    logger = MultiLogger(JSONLLogger(b, info_interval=2), JSONLLogger(a))  # the other order
    build("off", max_epoch=4, logger=logger, resume_from=ckpt).run()
    logger.close()
    assert _steps(a, "info") == [1, 2, 3, 4]
    assert _steps(b, "info") == [1, 3]


def test_the_cli_resumes_with_loggers_added_and_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = ["train", "--algo", "ppo", "--env", "CartPole-v1", "--step-per-epoch", "256"]
    quiet = ["--no-progress", "--quiet", "--stop-at", "none"]
    assert main([*train, *quiet, "--max-epoch", "1", "--logdir", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    more = ["--set", 'loggers=["tensorboard","jsonl"]']
    assert main([*train, *quiet, "--max-epoch", "2", *more, "--resume", str(run_dir)]) == 0
    assert _steps(run_dir / "log.jsonl", "info") == [2]  # added: from the resumed epoch on
    assert [s for s, _ in read_events(run_dir)["info/epoch"]] == [1, 2]
    fewer = ["--set", 'loggers=["jsonl"]']
    assert main([*train, *quiet, "--max-epoch", "3", *fewer, "--resume", str(run_dir)]) == 0
    assert _steps(run_dir / "log.jsonl", "info") == [2, 3]
    capsys.readouterr()
    again = ["--set", 'loggers=["jsonl","tensorboard"]']  # its logdir holds epochs 1-2
    assert main([*train, *quiet, "--max-epoch", "4", *again, "--resume", str(run_dir)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert "loggers: TensorboardLogger(" in line and "move them away" in line
