"""The trainer's side of asynchronous collection: the off-policy training step that runs
update k's gradient steps while collect k+1 runs in the worker thread, and the actor's
random stream in the trainer state (its start, checkpoint entry, check and restore).

The contract these follow (what each training step collects, learns from and lands) is
stated in :mod:`epochtrain.trainer.async_collection`, which holds the machinery they drive
(:class:`~epochtrain.trainer.async_collection.AsyncCollection`: actor copy, shadow
collector, worker thread) and re-exports every public name of this module; the rows and
statistics a collect step stages are in :mod:`epochtrain.trainer.async_staging`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from epochtrain.errors import EnvError, NonFiniteError
from epochtrain.stats import CollectStats
from epochtrain.trainer.safety import with_run_context

if TYPE_CHECKING:
    from epochtrain.trainer.async_collection import AsyncCollection, _Outcome
    from epochtrain.trainer.offpolicy import OffpolicyTrainer

__all__ = [
    "async_training_step",
    "check_async_state",
    "initial_actor_rng_state",
    "load_async_state",
    "save_async_state",
]

_STREAM = 0x61637431  # tells the actor's stream apart from the other streams of a seed


# --------------------------------------------------------------- the training step
def async_training_step(trainer: OffpolicyTrainer[Any]) -> int:
    """One training step with asynchronous collection; returns the env steps of the
    collect step whose data its update step learned from (the contract:
    :mod:`epochtrain.trainer.async_collection`)."""
    runner = trainer.async_collection
    assert runner is not None
    stat = trainer._collected_ahead
    trainer._collected_ahead = None
    if stat is None:  # the epoch's first training step: its collect runs now
        trainer._epoch_start_env_step = trainer.state.env_step
        _start(trainer, background=False)
        stat = _record(trainer, runner.join(), overlap=0.0)
        if stat is None or _test_in_train_stopped(trainer, stat):
            return 0 if stat is None else stat.n_collected_steps
    progress = trainer.state.env_step - trainer._epoch_start_env_step
    launch = progress < trainer.params.step_per_epoch and not trainer.finished
    if launch:
        _start(trainer, background=True)
    update_start = time.perf_counter()
    try:
        trainer._update(stat)
    except BaseException as exc:
        # the rows are dropped; the collector keeps up with its envs, unless Ctrl-C's grace
        # period ended first (a hung env): the trainer rolls the collector back anyway
        if launch and _settled(runner, interrupted=isinstance(exc, KeyboardInterrupt)):
            runner.land(trainer.train_collector, keep_rows=False)
        raise
    update_end = time.perf_counter()
    if launch:
        outcome = runner.join()
        overlap = min(outcome.end, update_end) - max(outcome.start, update_start)
        ahead = _record(trainer, outcome, overlap=max(0.0, overlap))
        if (
            ahead is not None
            and not trainer.finished
            and not _test_in_train_stopped(trainer, ahead)
        ):
            trainer._collected_ahead = ahead
    return stat.n_collected_steps


def _settled(runner: AsyncCollection, *, interrupted: bool) -> bool:
    """After the update step raised: wait for the collect step in flight (within the grace
    period when ``interrupted``); True when it has finished."""
    if interrupted:
        return runner.wait_grace()
    runner.join()
    return True


def _start(trainer: OffpolicyTrainer[Any], *, background: bool) -> None:
    """``train_fn`` and ``set_progress`` as before a synchronous collect, then start one."""
    if trainer.train_fn is not None:
        trainer.train_fn(trainer.state.epoch, trainer.state.env_step)
    trainer.policy.set_progress(trainer.state.env_step)
    p = trainer.params
    runner = trainer.async_collection
    assert runner is not None
    try:
        runner.start(
            trainer.policy,
            trainer.train_collector,
            env_step=trainer.state.env_step,
            rng_state=trainer._actor_rng_state,
            n_step=p.step_per_collect,
            n_episode=p.episode_per_collect,
            background=background,
        )
    except EnvError as exc:  # envs given up at an earlier stop: named as a collect's error
        raise with_run_context(trainer, exc, trainer.state.env_step) from exc.__cause__


def _record(
    trainer: OffpolicyTrainer[Any], outcome: _Outcome, overlap: float
) -> CollectStats | None:
    """Land a joined collect step and do its bookkeeping as ``OnlineTrainer._collect``
    does (counters, logging, ``on_nonfinite``, env errors); None when it stopped the run."""
    runner = trainer.async_collection
    assert runner is not None
    runner.land(trainer.train_collector)
    trainer._actor_rng_state = runner.generator.get_state()
    error = outcome.error
    if isinstance(error, NonFiniteError | EnvError):
        trainer._collect_failed(error)
        return None
    if error is not None:
        raise error
    stat = outcome.stat
    assert stat is not None
    trainer._count_collect(stat)
    trainer.async_overlap_time += overlap
    state, logger = trainer.state, trainer.logger
    if logger.last_logged_step("train") == state.env_step:
        # the update-to-data ratio in gradient steps; the UTDRatio hook's
        # train/utd_ratio counts transitions learned from, so the tags differ
        utd = state.gradient_step / max(state.env_step, 1)
        logger.log_data(
            "train",
            state.env_step,
            {"train/gradient_steps_per_env_step": utd, "train/overlap_time": overlap},
        )
    return stat


def _test_in_train_stopped(trainer: OffpolicyTrainer[Any], stat: CollectStats) -> bool:
    """The ``test_in_train`` test after a collect step; True when ``stop_fn`` ended the run."""
    if trainer._should_test_in_train(stat.returns):
        trainer._test_step()
        if trainer._stop_fn_fired():
            trainer._finish("stop_fn")
            return True
    return False


# ------------------------------------------------- the actor's stream and checkpoints
def initial_actor_rng_state(seed: int, device: torch.device) -> Tensor:
    """The state of the actor copy's generator at the start of a run seeded ``seed``."""
    derived = np.random.SeedSequence([seed, _STREAM]).generate_state(1, dtype=np.uint64)[0]
    generator = torch.Generator(device=device)
    generator.manual_seed(int(derived))
    return generator.get_state()


def save_async_state(trainer: OffpolicyTrainer[Any]) -> dict[str, Any]:
    """The trainer state's ``async_collection`` entry: the actor's generator state and the
    overlap time so far."""
    return {"actor_rng": trainer._actor_rng_state, "overlap_time": trainer.async_overlap_time}


def check_async_state(trainer: OffpolicyTrainer[Any], state: Any) -> None:
    """Raise ``ValueError`` unless :func:`load_async_state` can restore ``state``."""
    entry = state.get("async_collection")
    if not isinstance(entry, dict):
        raise ValueError(
            "the trainer state lacks the entry 'async_collection' (the actor's random "
            "stream): it was saved by a run with async_collection=False; resume it with "
            "async_collection=False"
        )
    rng = entry.get("actor_rng")
    own = trainer._actor_rng_state
    if not isinstance(rng, Tensor) or rng.dtype != own.dtype or rng.shape != own.shape:
        raise ValueError(
            f"the trainer state's async_collection.actor_rng is not a generator state "
            f"({own.dtype}, {tuple(own.shape)}) of this device"
        )
    if not isinstance(entry.get("overlap_time"), float):
        raise ValueError("the trainer state's async_collection.overlap_time is not a float")


def load_async_state(trainer: OffpolicyTrainer[Any], state: Any) -> None:
    """Restore :func:`save_async_state`'s entry (checked by :func:`check_async_state`)."""
    entry = state["async_collection"]
    trainer._actor_rng_state = entry["actor_rng"].clone()
    trainer.async_overlap_time = float(entry["overlap_time"])
