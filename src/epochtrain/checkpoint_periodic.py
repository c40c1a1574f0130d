"""A run's ``checkpoint_dir``: its writer lock, and periodic saves with rotation.

Each epoch's checkpoint is saved as ``epoch_<epoch>`` (:func:`save_periodic`, written by
:func:`~epochtrain.checkpoint_save.save_checkpoint`) and the oldest are rotated out, keeping
the last ``keep_last`` and, with ``keep_best``, the best; one process at a time writes
there (:func:`hold_checkpoint_dir`), and a run from scratch never writes among another
run's checkpoints (:func:`refuse_another_runs_checkpoints`). :mod:`epochtrain.checkpoint`
re-exports the public names.
"""

from __future__ import annotations

import json
import os
import warnings
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochtrain.checkpoint_files import CheckpointLock, remove_dir, sweep
from epochtrain.checkpoint_save import (
    _PERIODIC_PREFIX,
    MANIFEST,
    check_finite_weights,
    find_checkpoints,
    save_checkpoint,
)
from epochtrain.errors import CheckpointError, NonFiniteError

if TYPE_CHECKING:
    from epochtrain.trainer.base import BaseTrainer

__all__ = [
    "adopt_checkpoint_lock",
    "hold_checkpoint_dir",
    "refuse_another_runs_checkpoints",
    "save_periodic",
]


def _test_return(ckpt: Path) -> float | None:
    try:
        value = json.loads((ckpt / MANIFEST).read_text(encoding="utf-8")).get("test_return")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) else None


def hold_checkpoint_dir(trainer: BaseTrainer[Any]) -> None:
    """Take the writer lock of ``trainer.checkpoint_dir`` (idempotent; released when the
    trainer is garbage-collected, the process exits or the run finishes)."""
    root = trainer.checkpoint_dir
    if root is None:
        return
    lock = trainer._checkpoint_lock
    if lock is None or lock.root != root:
        if lock is not None:
            lock.release()
        lock = CheckpointLock(root)
        trainer._checkpoint_lock = lock
        weakref.finalize(trainer, lock.release)
    lock.acquire()


def adopt_checkpoint_lock(trainer: BaseTrainer[Any], lock: CheckpointLock) -> None:
    """Give ``trainer`` the writer lock of its ``checkpoint_dir`` that the caller took before
    building it (a sweep's run: nothing is created in the run's directory unlocked); the
    trainer's saves and loads hold it from here, and :func:`hold_checkpoint_dir` keeps it."""
    if trainer.checkpoint_dir is None or lock.root != trainer.checkpoint_dir:
        raise ValueError(
            f"the lock of {os.fspath(lock.root)!r} is not that of the trainer's "
            f"checkpoint_dir {trainer.checkpoint_dir!r}"
        )
    trainer._checkpoint_lock = lock


def refuse_another_runs_checkpoints(trainer: BaseTrainer[Any]) -> None:
    """Raise :class:`CheckpointError` before a run starts from scratch (nothing loaded, no
    epoch done, nothing saved by this trainer) in a ``checkpoint_dir`` that holds another
    run's checkpoints: its ``epoch_*`` would replace some of them, rotation would delete
    others, and a later resume would take the newest epoch, whichever run wrote it."""
    root = trainer.checkpoint_dir
    if root is None or trainer.state.epoch > 0 or trainer.last_checkpoint is not None:
        return
    found = find_checkpoints(root)
    if found:
        if trainer._checkpoint_lock is not None:
            trainer._checkpoint_lock.release()  # this run never writes there
        raise CheckpointError(
            f"checkpoint_dir {os.fspath(root)!r} holds the checkpoints of another run "
            f"({', '.join(p.name for p in found)}), and this run starts from scratch: its "
            "checkpoints would replace and rotate out those. Continue that run instead "
            "(resume_from, epochtrain train --resume DIR), give this run another "
            "checkpoint_dir, or delete those checkpoints"
        )


def save_periodic(trainer: BaseTrainer[Any], root: Path) -> Path | None:
    """Save ``root/epoch_<epoch>`` and rotate: keep the last ``trainer.params.keep_last`` and, with
    ``trainer.params.keep_best``, the one of the best test return.

    Holds ``root``'s writer lock; on the first save under it (and after a failed save)
    first puts back a checkpoint whose replacement was killed and removes the leftovers of
    killed saves and rotations: while the lock is held no other writer leaves any, so later
    saves do not read the directory again (with ``keep_last=None`` they read no
    checkpoint at all; before, each save re-read every one). A rotated-out
    checkpoint is renamed out of ``epoch_*`` before it is deleted. Nothing is saved for
    an epoch that ended the run on a non-finite value (``stop_reason == "nonfinite"``),
    or, with ``on_nonfinite`` other than ``"raise"``, from non-finite weights (a warning
    says so); with ``"raise"`` such weights raise :class:`NonFiniteError`.
    """
    hold_checkpoint_dir(trainer)
    try:
        return _save_and_rotate(trainer, root)
    finally:
        if trainer.finished and trainer._checkpoint_lock is not None:
            trainer._checkpoint_lock.release()


def _save_and_rotate(trainer: BaseTrainer[Any], root: Path) -> Path | None:
    if trainer.stop_reason == "nonfinite":
        return None
    try:
        check_finite_weights(trainer, root / f"{_PERIODIC_PREFIX}{trainer.state.epoch:06d}")
    except NonFiniteError as exc:
        if trainer.params.on_nonfinite == "raise":
            raise
        warnings.warn(str(exc), stacklevel=4)
        return None
    lock = trainer._checkpoint_lock
    if lock is None or not lock.swept:  # what killed writers left, once per lock taken
        sweep(root, owned=True)
        if lock is not None:
            lock.swept = True
    try:
        path = save_checkpoint(trainer, root / f"{_PERIODIC_PREFIX}{trainer.state.epoch:06d}")
    except BaseException:
        if lock is not None:
            lock.swept = False  # a failed save may leave a partial copy: clean it next time
        raise
    if trainer.params.keep_last is None:  # all are kept: no need to read them
        return path
    found = find_checkpoints(root)
    keep = set(found if trainer.params.keep_last is None else found[-trainer.params.keep_last :])
    if trainer.params.keep_best:
        returns = [(_test_return(p), p) for p in found]
        scored = [(r, p) for r, p in returns if r is not None]
        if scored:
            best = max(r for r, _ in scored)
            keep.add(next(p for r, p in scored if r == best))
    for old in found:
        if old not in keep:
            remove_dir(old)
    return path
