"""Progress bars: zipped trainers keep their own lines, a resumed run shows its true
position, the run bar counts epochs of the whole run."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from epochtrain.trainer.progress import RunProgress, bars_watched
from tests.trainer.tiny import build


def test_zipped_trainers_each_keep_two_lines_of_their_own(terminal: None) -> None:
    a = build("off", max_epoch=3, show_progress=True)
    b = build("off", max_epoch=3, show_progress=True)
    positions = []
    for _ in zip(a, b, strict=True):
        bars = [a._progress.run_bar, a._progress.epoch_bar, b._progress.run_bar]
        bars.append(b._progress.epoch_bar)
        if all(bar is not None for bar in bars):
            positions.append(tuple(abs(bar.pos) for bar in bars))
        assert a._progress.run_bar is None or a._progress.run_bar.n == a.info_stat().epoch
    # while both runs are going, four bars on four different lines, the same ones each epoch
    assert positions and all(len(set(p)) == 4 for p in positions)
    assert len(set(positions)) == 1
    assert a._progress.run_bar is None and b._progress.run_bar is None  # closed at the end


def test_a_resumed_run_shows_its_true_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], terminal: None
) -> None:
    trainer = build("off", max_epoch=2)
    trainer.run()
    trainer.save_checkpoint(tmp_path / "ckpt")
    capsys.readouterr()
    resumed = build("off", max_epoch=4, show_progress=True, resume_from=str(tmp_path / "ckpt"))
    next(resumed)
    assert resumed._progress.run_bar is not None
    assert (resumed._progress.run_bar.n, resumed._progress.run_bar.total) == (3, 4)
    resumed.run()
    err = capsys.readouterr().err
    assert "Run:  50%|" in err and "| 2/4 " in err and "| 4/4 " in err
    assert "| 0/4 " not in err and "| 1/4 " not in err


@pytest.mark.parametrize("how", ["close", "with"])
def test_a_run_stopped_early_closes_its_bars_when_the_trainer_closes(
    how: str, terminal: None
) -> None:
    trainer = build("off", max_epoch=5, show_progress=True)
    if how == "close":
        next(trainer)
        run_bar, epoch_bar = trainer._progress.run_bar, trainer._progress.epoch_bar
        trainer.close()
    else:
        with trainer:
            next(trainer)
            run_bar, epoch_bar = trainer._progress.run_bar, trainer._progress.epoch_bar
    assert run_bar is not None and epoch_bar is not None
    assert run_bar.disable and epoch_bar.disable  # tqdm's mark of a closed bar
    assert trainer._progress.run_bar is None and trainer._progress.epoch_bar is None


def test_no_bar_is_opened_without_show_progress() -> None:
    trainer = build("off", max_epoch=2, show_progress=False)
    next(trainer)
    assert trainer._progress.run_bar is None and trainer._progress.epoch_bar is None


def test_run_progress_caps_the_epoch_bar_and_closes_twice_safely(terminal: None) -> None:
    progress = RunProgress()
    progress.start_epoch(1, 2, 100, show=True)
    progress.advance(70, {})
    progress.advance(70, {"loss": "0.1"})
    assert progress.epoch_bar is not None and progress.epoch_bar.n == 100
    progress.end_epoch({}, finished=False)
    progress.start_epoch(2, 2, 100, show=True)
    assert progress.epoch_bar.n == 0 and progress.run_bar is not None and progress.run_bar.n == 1
    progress.end_epoch({}, finished=True)
    assert progress.run_bar is None
    progress.close()


def test_stderr_redirected_to_a_file_gets_no_bars_and_keeps_the_epoch_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # under pytest stderr is a capture, not a terminal: as with `epochtrain train 2> log`
    trainer = build("off", max_epoch=2, show_progress=True, verbose=True)
    next(trainer)
    assert trainer._progress.run_bar is None and trainer._progress.epoch_bar is None
    trainer.run()
    captured = capsys.readouterr()
    assert captured.err == ""
    assert [ln[:9] for ln in captured.out.splitlines()] == ["Epoch #1:", "Epoch #2:"]


def test_bars_are_watched_in_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with open(tmp_path / "log", "w") as log:
        monkeypatch.setattr(sys, "stderr", log)
        assert not bars_watched()
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not bars_watched()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert bars_watched()


def test_a_run_logged_to_files_gets_each_epoch_line_at_once_and_no_redraws(
    tmp_path: Path,
) -> None:
    # os._exit skips the flush at exit: the lines in the file were flushed as written
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    script = (
        "import os\n"
        "from tests.trainer.tiny import build\n"
        "build('off', max_epoch=2, show_progress=True, verbose=True).run()\n"
        "os._exit(0)\n"
    )
    with open(tmp_path / "out.log", "w") as out, open(tmp_path / "err.log", "w") as err:
        subprocess.run(
            [sys.executable, "-c", script],
            stdout=out,
            stderr=err,
            cwd=Path(__file__).parents[2],
            env=env,
            check=True,
        )
    assert (tmp_path / "err.log").read_text() == ""
    assert (tmp_path / "out.log").read_text().count("Epoch #") == 2
