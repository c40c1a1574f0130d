"""A logger logs one run of one trainer; reset() starts a new run only between epochs."""

from __future__ import annotations

import gc
import itertools
import json
from pathlib import Path

import pytest

from epochtrain.logger import JSONLLogger, LazyLogger, MultiLogger
from tests.trainer.tiny import build


def steps(path: Path) -> list[tuple[str, int]]:
    return [(r["scope"], r["step"]) for r in map(json.loads, path.read_text().splitlines())]


def test_reset_from_a_hook_is_refused_and_the_run_still_ends_at_max_epoch() -> None:
    trainer = build("off", max_epoch=3)
    refused: list[str] = []

    def reset_at_epoch_2(epoch: int) -> None:
        if epoch == 2:
            try:
                trainer.reset()
            except RuntimeError as exc:
                refused.append(str(exc))

    trainer.register_op("epoch_start", reset_at_epoch_2)
    epochs = [s.epoch for s in itertools.islice(trainer, 10)]  # endless before the fix
    assert epochs == [1, 2, 3]
    assert trainer.stop_reason == "max_epoch"
    assert len(refused) == 1
    assert "inside next()" in refused[0] and "request_stop" in refused[0]


def test_reset_of_a_closed_trainer_is_refused_naming_a_new_trainer() -> None:
    trainer = build("on", max_epoch=1)
    trainer.run()
    trainer.close()
    with pytest.raises(RuntimeError, match=r"closed.*build a new trainer"):
        trainer.reset(logger=LazyLogger())
    assert trainer.state.epoch == 1 and trainer.finished  # nothing was reset


@pytest.mark.parametrize("wrap", [False, True], ids=["logger", "inside_multilogger"])
def test_a_logger_another_live_trainer_logs_to_is_refused(tmp_path: Path, wrap: bool) -> None:
    shared = JSONLLogger(tmp_path / "log.jsonl")
    first = build("off", max_epoch=2, logger=shared)
    second_logger = MultiLogger(JSONLLogger(tmp_path / "own.jsonl"), shared) if wrap else shared
    with pytest.raises(ValueError, match=r"logger: .*log\.jsonl.*another trainer"):
        build("off", max_epoch=2, logger=second_logger)
    first.run()
    assert [s for s, _ in steps(shared.path)].count("info") == 2  # the first run's, whole
    lazy = LazyLogger()  # records nothing: may be shared
    pair = build("off", max_epoch=2, logger=lazy), build("off", max_epoch=2, logger=lazy)
    assert [a.epoch for a, _ in zip(*pair, strict=True)] == [1, 2]


def test_a_logger_of_a_running_trainer_is_refused_by_another_trainers_reset(
    tmp_path: Path,
) -> None:
    shared = JSONLLogger(tmp_path / "log.jsonl")
    first = build("off", max_epoch=2, logger=shared)
    second = build("off", max_epoch=2)
    second.run()
    second_before = second.logger
    with pytest.raises(ValueError, match="another trainer"):
        second.reset(logger=shared)
    assert second.logger is second_before and second.state.epoch == 2  # nothing changed
    first.run()
    assert shared.has_records()


def test_reset_refuses_the_logger_holding_the_run_so_far(tmp_path: Path) -> None:
    logger = JSONLLogger(tmp_path / "log.jsonl")
    trainer = build("on", max_epoch=2, logger=logger)
    trainer.run()
    first = steps(logger.path)
    with pytest.raises(ValueError, match=r"run so far.*new logger"):
        trainer.reset(logger=trainer.logger)
    assert trainer.state.epoch == 2  # refused before anything was reset
    second = JSONLLogger(tmp_path / "second.jsonl")
    trainer.reset(logger=second)
    trainer.run()
    assert steps(second.path) == first  # the new run logged all of its records
    assert steps(logger.path) == first


def test_the_logger_of_a_closed_trainer_is_refused_naming_a_new_logger(tmp_path: Path) -> None:
    logger = JSONLLogger(tmp_path / "log.jsonl")
    build("off", max_epoch=1, logger=logger).close()  # closed its logger, though unused
    with pytest.raises(
        ValueError,
        match=r"closed by the close\(\) of the OffpolicyTrainer.*new logger.*resume_from",
    ):
        build("off", max_epoch=1, logger=logger)


def test_a_logger_holding_an_earlier_runs_records_only_resumes_that_run(tmp_path: Path) -> None:
    logger = JSONLLogger(tmp_path / "log.jsonl")
    build("off", max_epoch=1, logger=logger)  # never run, dropped: releases the logger
    ckpt = tmp_path / "ckpt"
    trainer = build("off", max_epoch=2, logger=logger, checkpoint_dir=ckpt)
    trainer.run()
    first = steps(logger.path)
    del trainer  # dropped, not closed: the logger is free again but holds the records
    gc.collect()
    with pytest.raises(ValueError, match=r"holds the records of an earlier run.*resume_from"):
        build("off", max_epoch=2, logger=logger)
    resumed = build("off", max_epoch=3, logger=logger, checkpoint_dir=ckpt, resume_from=ckpt)
    resumed.run()
    resumed.close()
    assert steps(logger.path)[: len(first)] == first
    assert steps(logger.path)[-1] == ("info", 3)  # the resumed run continued the file
