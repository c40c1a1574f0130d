"""Progress of an experiment on stderr: a bar per running run and an overall bar with an ETA.

The overall bar counts the epochs still to run (a resumed run's earlier epochs are not
counted, so the ETA reflects the work left); a run that stops early (``stop_fn``) takes its
remaining epochs off the total. When a run ends, one line says how. The bars are drawn
only where someone watches them (:func:`~epochtrain.trainer.progress.bars_watched`); with
stderr redirected to a file the lines are the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from tqdm import tqdm

from epochtrain.closing import Closing
from epochtrain.experiment.runs import RESULT_FILE, read_json, spec_of
from epochtrain.trainer.progress import bars_watched, write_line

__all__ = ["Progress"]


class Progress(Closing):
    """Bars for ``pending`` of ``run_dirs`` and a line per run that ends; every method is a
    no-op when not ``enabled``."""

    def __init__(self, run_dirs: Sequence[Path], pending: Sequence[Path], *, enabled: bool):
        self._enabled = enabled
        self._n_runs = len(run_dirs)
        self._n_done = len(run_dirs) - len(pending)
        self._max_epoch = {d: spec_of(d).trainer.max_epoch for d in pending} if enabled else {}
        self._epoch: dict[Path, int] = {}
        self._ended: set[Path] = set()  # a late event of a process run is ignored
        self._bars: dict[Path, tqdm[NoReturn]] = {}
        self._slots: list[Path | None] = []
        self._overall: tqdm[NoReturn] | None = None
        if enabled and bars_watched():
            self._overall = tqdm(
                total=sum(self._max_epoch.values()), unit="epoch", position=0, dynamic_ncols=True
            )
            self._describe()

    def close(self) -> None:
        """Close every bar (``with Progress(...)`` does when the block ends)."""
        for bar in self._bars.values():
            bar.close()
        if self._overall is not None:
            self._overall.close()

    def _describe(self) -> None:
        if self._overall is not None:
            self._overall.set_description(f"experiment: {self._n_done}/{self._n_runs} runs ended")

    def start(self, run_dir: Path, epoch: int) -> None:
        """``run_dir``'s trainer is built, at ``epoch`` (> 0 when resumed)."""
        if self._overall is None or run_dir in self._ended:
            return
        self._epoch[run_dir] = epoch
        self._overall.total = (self._overall.total or 0) - epoch
        self._overall.refresh()
        slot = self._slots.index(None) if None in self._slots else len(self._slots)
        if slot == len(self._slots):
            self._slots.append(None)
        self._slots[slot] = run_dir
        self._bars[run_dir] = tqdm(
            total=self._max_epoch[run_dir],
            initial=epoch,
            desc=run_dir.name,
            unit="epoch",
            position=slot + 1,
            leave=False,
            dynamic_ncols=True,
        )

    def epoch(self, run_dir: Path, epoch: int) -> None:
        """``run_dir``'s trainer has finished ``epoch``."""
        if self._overall is None or run_dir not in self._bars:
            return
        step = epoch - self._epoch[run_dir]
        self._epoch[run_dir] = epoch
        self._bars[run_dir].update(step)
        self._overall.update(step)

    def end(self, run_dir: Path, *, failed: bool) -> None:
        """``run_dir`` has ended and written its ``result.json``."""
        if not self._enabled:
            return
        self._ended.add(run_dir)
        self._n_done += 1
        left = self._max_epoch.get(run_dir, 0) - self._epoch.get(run_dir, 0)
        if self._overall is not None:
            self._overall.total = (self._overall.total or 0) - left
            self._describe()
            self._overall.refresh()
        self._drop_bar(run_dir)
        write_line(f"[{self._n_done}/{self._n_runs}] {run_dir.name}: {_outcome(run_dir, failed)}")

    def restart(self, run_dir: Path, why: str) -> None:
        """``run_dir``'s worker died (``why``); the run will start again from its latest
        checkpoint, and the epochs after it count again."""
        if not self._enabled:
            return
        if self._overall is not None:
            self._overall.total = (self._overall.total or 0) + self._epoch.pop(run_dir, 0)
            self._overall.refresh()
        self._drop_bar(run_dir)
        write_line(f"{run_dir.name}: {why}; starting it again from its latest checkpoint")

    def _drop_bar(self, run_dir: Path) -> None:
        bar = self._bars.pop(run_dir, None)
        if bar is not None:
            bar.close()
            self._slots[self._slots.index(run_dir)] = None


def _outcome(run_dir: Path, failed: bool) -> str:
    try:
        result = read_json(run_dir / RESULT_FILE)
    except (OSError, ValueError):
        return "failed" if failed else "finished"
    if failed:
        return f"failed: {result.get('error')}"
    returns = result.get("test_returns") or []
    final = f", final test return {returns[-1]:.1f}" if returns else ""
    return f"finished ({result.get('stop_reason')}, {result.get('epochs')} epochs{final})"
