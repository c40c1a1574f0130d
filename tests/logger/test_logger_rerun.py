"""A new run into a log that already holds another run's records is refused; a resume is not.

Before, re-running a script into the same JSONL/CSV file appended the second run's steps
after the first's (steps 1..N twice), and into the same TensorBoard logdir added a second
event file that TensorBoard draws as one zig-zag curve with the first. ``mode="w"`` emptied
the file when the logger was built, so a resumed run with ``mode="w"`` lost the records up
to its checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event
from torch.utils.tensorboard import SummaryWriter

from epochtrain.logger import (
    BaseLogger,
    CSVLogger,
    ExistingRecordsError,
    JSONLLogger,
    MultiLogger,
    TensorboardLogger,
)
from epochtrain.stats import InfoStats
from tests.trainer.tiny import build

Make = Callable[[Path], BaseLogger]
MAKERS: dict[str, Make] = {
    "jsonl": lambda d: JSONLLogger(d / "log.jsonl"),
    "csv": lambda d: CSVLogger(d / "log.csv"),
    "tensorboard": lambda d: TensorboardLogger(d / "tb"),
}


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def epochs_logged(root: Path, kind: str) -> list[int]:
    """The ``info/epoch`` steps in the log of ``kind`` under ``root``, in file order."""
    if kind == "jsonl":
        lines = (root / "log.jsonl").read_text().splitlines()
        return [r["step"] for r in map(json.loads, lines) if r["scope"] == "info"]
    if kind == "csv":
        rows = [line.split(",") for line in (root / "log.csv").read_text().splitlines()[1:]]
        return [int(row[1]) for row in rows if row[2] == "info/epoch"]
    steps = []
    for path in sorted((root / "tb").glob("events.out.tfevents.*")):
        for record in RawEventFileLoader(str(path)).Load():
            event = Event.FromString(record)
            steps += [event.step for v in event.summary.value if v.tag == "info/epoch"]
    return steps


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_second_fresh_run_into_the_same_log_is_refused_and_the_log_is_unchanged(
    tmp_path: Path, kind: str
) -> None:
    with MAKERS[kind](tmp_path) as first:
        build("off", max_epoch=2, logger=first).run()
    before = snapshot(tmp_path)
    second = MAKERS[kind](tmp_path)
    with pytest.raises(ExistingRecordsError) as raised:
        build("off", max_epoch=2, logger=second).run()
    second.close()
    message = str(raised.value)
    assert str(tmp_path) in message and "not restored from a checkpoint" in message
    assert "resume the earlier run" in message and "another" in message
    assert ("mode='w'" in message) == (kind != "tensorboard")
    assert snapshot(tmp_path) == before  # no event file, row or line added
    assert epochs_logged(tmp_path, kind) == [1, 2]
    assert isinstance(raised.value, ValueError)  # the CLI's one-line usage error


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_fresh_run_into_a_used_log_is_refused_before_any_env_step(
    tmp_path: Path, kind: str
) -> None:
    with MAKERS[kind](tmp_path) as first:
        build("off", max_epoch=1, logger=first).run()
    trainer = build("off", max_epoch=2, logger=MAKERS[kind](tmp_path))
    with pytest.raises(ExistingRecordsError):
        next(trainer)
    assert trainer.state.env_step == 0 and trainer.state.epoch == 0  # no work was done
    trainer.logger.close()


@pytest.mark.parametrize("kind", list(MAKERS))
def test_check_new_run_refuses_before_any_record_and_a_restored_logger_passes(
    tmp_path: Path, kind: str
) -> None:
    with MAKERS[kind](tmp_path) as first:
        first.log_data("info", 1, {"info/epoch": 1.0})
        state = first.state_dict()
    second = MAKERS[kind](tmp_path)
    with pytest.raises(ExistingRecordsError):
        second.check_new_run()
    second.load_state_dict(state)  # a resume
    second.check_new_run()
    second.log_data("info", 2, {"info/epoch": 2.0})
    second.close()
    assert epochs_logged(tmp_path, kind) == [1, 2]


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_resume_from_a_checkpoint_continues_the_log_as_before(tmp_path: Path, kind: str) -> None:
    logger = MAKERS[kind](tmp_path)
    trainer = build("off", max_epoch=4, logger=logger)
    next(trainer), next(trainer)
    trainer.save_checkpoint(tmp_path / "ckpt")
    next(trainer)  # logged after the checkpoint, then the process "dies"
    logger.close()
    with MAKERS[kind](tmp_path) as resumed_logger:
        build("off", max_epoch=4, logger=resumed_logger, resume_from=tmp_path / "ckpt").run()
    assert epochs_logged(tmp_path, kind) == [1, 2, 3, 4]


def test_starting_over_on_purpose_drops_the_old_records(tmp_path: Path) -> None:
    """What the experiment runner does for a run killed before its first checkpoint."""
    with JSONLLogger(tmp_path / "log.jsonl") as first:
        first.log_data("info", 1, {"info/epoch": 1.0})
    with JSONLLogger(tmp_path / "log.jsonl") as again:
        again.load_state_dict(again.state_dict())
        again.log_data("info", 1, {"info/epoch": 1.0})
    assert epochs_logged(tmp_path, "jsonl") == [1]


@pytest.mark.parametrize("make", [JSONLLogger, CSVLogger])
def test_mode_w_overwrites_for_a_new_run_and_continues_for_a_resume(
    tmp_path: Path, make: Callable[..., JSONLLogger | CSVLogger]
) -> None:
    path = tmp_path / ("log.jsonl" if make is JSONLLogger else "log.csv")
    kind = "jsonl" if make is JSONLLogger else "csv"
    with make(path, mode="w") as first:
        first.log_info_data(InfoStats(epoch=1), 1)
        state = first.state_dict()
        first.log_info_data(InfoStats(epoch=2), 2)  # after the checkpoint
    with make(path, mode="w") as resumed:
        resumed.load_state_dict(state)
        resumed.log_info_data(InfoStats(epoch=2), 2)
    assert epochs_logged(tmp_path, kind) == [1, 2]  # before: [2], epoch 1 was lost
    with make(path, mode="w") as new_run:
        assert epochs_logged(tmp_path, kind) == [1, 2]  # emptied by the first record only
        new_run.log_info_data(InfoStats(epoch=1), 1)
    assert epochs_logged(tmp_path, kind) == [1]
    assert path.read_text().count("scope,step,tag,value") == (kind == "csv")


@pytest.mark.parametrize("content", ["", "scope,step,tag,value\n", "scope,step,tag,val"])
def test_a_file_without_records_is_no_earlier_run(tmp_path: Path, content: str) -> None:
    path = tmp_path / "log.csv"
    path.write_text(content)  # new, header only, a torn first line
    with CSVLogger(path) as logger:
        logger.log_info_data(InfoStats(epoch=1), 1)
    assert epochs_logged(tmp_path, "csv") == [1]


def test_a_logdir_whose_event_files_hold_no_point_is_no_earlier_run(tmp_path: Path) -> None:
    SummaryWriter(log_dir=str(tmp_path / "tb")).close()  # an event file with no summary
    with TensorboardLogger(tmp_path / "tb") as logger:
        logger.log_info_data(InfoStats(epoch=1), 1)
    assert epochs_logged(tmp_path, "tensorboard") == [1]


def test_a_refused_logger_in_a_multilogger_keeps_the_others_from_writing(tmp_path: Path) -> None:
    with JSONLLogger(tmp_path / "log.jsonl") as first:
        first.log_data("info", 1, {"info/epoch": 1.0})
    fresh_dir = tmp_path / "fresh"
    both = MultiLogger(TensorboardLogger(fresh_dir), JSONLLogger(tmp_path / "log.jsonl"))
    with pytest.raises(ExistingRecordsError, match=r"log\.jsonl"):
        both.check_new_run()
    with pytest.raises(ExistingRecordsError, match=r"log\.jsonl"):
        both.log_info_data(InfoStats(epoch=1), 1)
    both.close()
    assert list(fresh_dir.glob("events.out.tfevents.*")) == []  # TensorBoard wrote nothing
    assert epochs_logged(tmp_path, "jsonl") == [1]
