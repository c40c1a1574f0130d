"""Progress display of one trainer: the run and epoch bars, their postfix, the verbose epoch line.

Each trainer keeps its two bars open from its first epoch to the end of its run, so tqdm
gives them their own lines (``position``: the first free ones when they open) and
trainers zipped together each keep their lines instead of taking turns on one; in a
notebook each bar is its own widget. The run bar counts epochs from where the run
stands, so a run resumed at epoch 5 of 10 shows ``5/10`` and its ETA is the rest of the
whole run, estimated from the epochs this process has run. The epoch bar is reset each
epoch (``step_per_epoch`` units) and cleared when the run ends; the run bar stays.

Beside the count both bars show :func:`progress_postfix`; with ``verbose`` the trainer also
prints :func:`epoch_line` after each epoch.

Bars are drawn only where someone watches them (:func:`bars_watched`): in a terminal or a
notebook. With stderr redirected to a file (a cluster job, ``2> log``) tqdm would append a
redraw, escape codes included, several times a second for the whole run; there the
``verbose`` epoch lines are the log.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

from tqdm import autonotebook, std
from tqdm.auto import tqdm

if TYPE_CHECKING:
    from epochtrain.stats import EpochStats, RunState
    from epochtrain.trainer.base import BaseTrainer

__all__ = ["RunProgress", "bars_watched", "epoch_line", "progress_postfix", "write_line"]


def bars_watched() -> bool:
    """Whether progress bars would be seen: in a notebook, or with stderr a terminal."""
    if autonotebook.tqdm is not std.tqdm:  # tqdm.auto chose notebook widgets
        return True
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty is not None and isatty())


def write_line(line: str) -> None:
    """Print ``line`` on stdout without breaking a bar, and flush it: redirected to a file,
    stdout is block-buffered, and ``tail -f`` would show the lines 8 KiB at a time."""
    tqdm.write(line)
    if sys.stdout is not None:
        sys.stdout.flush()


class RunProgress:
    """The run bar and the epoch bar of one trainer (none while ``show_progress`` is off or
    nobody watches them, :func:`bars_watched`)."""

    def __init__(self) -> None:
        self.run_bar: tqdm[NoReturn] | None = None
        """Epochs of the run: ``epoch/max_epoch``, whole-run ETA."""
        self.epoch_bar: tqdm[NoReturn] | None = None
        """Steps of the current epoch (``step_per_epoch`` units)."""

    def start_epoch(self, epoch: int, max_epoch: int, step_per_epoch: int, *, show: bool) -> None:
        """Epoch ``epoch`` (1-based) begins; open the bars on the first call."""
        if not show or (self.run_bar is None and not bars_watched()):
            return
        if self.run_bar is None or self.epoch_bar is None:
            self.run_bar = tqdm(
                total=max_epoch, initial=epoch - 1, desc="Run", unit="epoch", dynamic_ncols=True
            )
            self.epoch_bar = epoch_bar = tqdm(total=step_per_epoch, dynamic_ncols=True, leave=False)
        else:
            self.run_bar.total = max_epoch  # a resumed run may have been given more epochs
            epoch_bar = self.epoch_bar
            epoch_bar.reset(total=step_per_epoch)
        epoch_bar.set_description(f"Epoch #{epoch}", refresh=False)

    def advance(self, done: int, postfix: dict[str, str]) -> None:
        """``done`` more units of the epoch (capped at its total); ``postfix`` shown beside."""
        bar = self.epoch_bar
        if bar is None:
            return
        total = bar.total if bar.total is not None else done
        bar.update(max(0, min(done, total - bar.n)))
        bar.set_postfix(postfix, refresh=False)

    def end_epoch(self, postfix: dict[str, str], *, finished: bool) -> None:
        """The epoch is done: one more on the run bar; close both bars if the run ended."""
        if self.run_bar is None:
            return
        self.run_bar.set_postfix(postfix, refresh=False)
        self.run_bar.update(1)
        if finished:
            self.close()

    def close(self) -> None:
        """Clear the epoch bar and leave the run bar's last line; safe to call twice."""
        if self.epoch_bar is not None:
            self.epoch_bar.close()
        if self.run_bar is not None:
            self.run_bar.close()
        self.run_bar = self.epoch_bar = None


def progress_postfix(trainer: BaseTrainer[Any]) -> dict[str, str]:
    """What the bars show beside the count: env steps, the smoothed losses, the last test
    return and the values hooks log with ``log_pbar``."""
    post = {"env_step": str(trainer.state.env_step)}
    for key, value in trainer._smoothed().items():
        if key.startswith("loss"):
            post[key] = f"{value:.3g}"
    if trainer.last_test_stat is not None and trainer.last_test_stat.returns_stat is not None:
        post["test_return"] = f"{trainer.last_test_stat.returns_stat.mean:.1f}"
    post.update(trainer._hook_postfix)
    return post


def epoch_line(stats: EpochStats[Any], state: RunState) -> str:
    """The line ``verbose`` prints after an epoch: steps, test return, best, time."""
    line = f"Epoch #{stats.epoch}: env_step={state.env_step} grad_step={state.gradient_step}"
    test = stats.test_collect_stat
    if test is not None and test.returns_stat is not None:
        line += (
            f" test_return={test.returns_stat.mean:.2f} ± {test.returns_stat.std:.2f}"
            f" best={state.best_test_return:.2f} (epoch {state.best_epoch})"
        )
    line += f" time={state.total_time:.1f}s"
    return line
