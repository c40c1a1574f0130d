"""One epoch of a trainer: ``next()``'s body, the epoch's training steps, its test step,
and the logging and checkpoint at its end (:class:`~epochtrain.trainer.base.BaseTrainer`
calls these; the glossary is in :mod:`epochtrain.trainer.base`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from epochtrain.checkpoint import hold_checkpoint_dir, save_periodic
from epochtrain.checkpoint_periodic import refuse_another_runs_checkpoints
from epochtrain.envs import seed_spaces
from epochtrain.errors import EnvError, NonFiniteError
from epochtrain.stats import CollectStats, EpochStats, TTrainingStats, aggregate_training_stats
from epochtrain.trainer.hooks import call_callback
from epochtrain.trainer.progress import epoch_line, progress_postfix, write_line
from epochtrain.trainer.safety import (
    EpochSnapshot,
    last_checkpoint_text,
    note_last_checkpoint,
    on_nonfinite,
    run_position,
    with_run_context,
)
from epochtrain.trainer.state import rng_scope

if TYPE_CHECKING:
    from epochtrain.trainer.base import BaseTrainer

__all__ = ["log_and_save", "next_epoch", "run_epoch", "test_step"]

_TEST_SPACES = 0x7465
"""The test envs' stream of :func:`~epochtrain.envs.seed_spaces` (``trainer.online``'s
``_TRAIN_SPACES`` is the training envs')."""


def next_epoch(trainer: BaseTrainer[TTrainingStats]) -> EpochStats[TTrainingStats]:
    """The body of ``next(trainer)``: start the run if needed, run one epoch inside the
    trainer's random streams, then log it and save its checkpoint when due."""
    trainer._refuse_if_broken("next()")
    trainer._complete_init()
    if trainer._finished:
        trainer._progress.close()  # a hook may have ended the run after the last epoch
        raise StopIteration
    if trainer._closed:
        raise RuntimeError(
            "next() refused: this trainer was closed (close(), or the end of its `with` "
            "block), so its envs and logger are released; build a new trainer, or one "
            f"that resumes: {last_checkpoint_text(trainer)}"
        )
    if not trainer._started:  # another run's records where this one logs: before any work
        trainer.logger.check_new_run()
    hold_checkpoint_dir(trainer)
    if not trainer._started:
        refuse_another_runs_checkpoints(trainer)
    for name, collector in trainer._collectors():  # a killed env process: before any work
        try:
            collector.check_env_processes(f"before epoch {trainer.state.epoch + 1} started")
        except EnvError as exc:
            envs = "the test envs: " if name == "test_collector" else ""
            raise with_run_context(trainer, exc, trainer.state.env_step, envs) from exc.__cause__
    start = time.perf_counter()
    snapshot = EpochSnapshot.take(trainer)
    trainer._in_next = True
    try:
        with rng_scope(trainer):
            if not trainer._started:
                trainer._started = True
                trainer._start()
                if trainer.params.test_before_train:
                    trainer._test_step()
                    if trainer._stop_fn_fired():
                        trainer._finish("stop_fn")
            if trainer._finished and trainer.stop_reason != "nonfinite":
                trainer.state.total_time += time.perf_counter() - start
                raise StopIteration
            stats = run_epoch(trainer)  # NaN env data at the start: epoch 1 says so
            trainer.state.total_time += time.perf_counter() - start
            stats.info_stat.total_time = trainer.state.total_time
            trainer._ops.call("epoch_end", stats)
    except KeyboardInterrupt as exc:
        snapshot.roll_back(trainer, exc)  # back to the last complete epoch
        raise
    except Exception as exc:  # the epoch stopped part-way: its state is half an epoch's
        trainer._broken = (
            f"epoch {trainer.state.epoch} stopped part-way ({type(exc).__name__}: {exc})"
        )
        note_last_checkpoint(trainer, exc)  # e.g. a log write on a full disk: where to resume
        raise
    finally:
        trainer._in_next = False
    after_epoch = time.perf_counter()
    log_and_save(trainer, stats)
    # logging and saving count too, from the next epoch's total on (a checkpoint
    # cannot hold the time of its own save)
    trainer.state.total_time += time.perf_counter() - after_epoch
    return stats


def log_and_save(trainer: BaseTrainer[TTrainingStats], stats: EpochStats[TTrainingStats]) -> None:
    """After a complete epoch: its run totals to the logger, its line, its checkpoint
    when due. A logger that fails does not cost the epoch its checkpoint: the error is
    raised after the save, naming it."""
    failed: Exception | None = None
    try:
        trainer.logger.log_info_data(stats.info_stat, trainer.state.epoch)
        trainer.logger.flush()  # an epoch's curves reach disk even if the user never closes
    except Exception as exc:
        failed = exc
    if trainer.params.verbose:
        write_line(epoch_line(stats, trainer.state))
    if trainer.checkpoint_dir is not None and (
        trainer._finished or trainer.state.epoch % trainer.params.checkpoint_every == 0
    ):
        try:
            save_periodic(trainer, trainer.checkpoint_dir)
        except KeyboardInterrupt as exc:  # the save cleaned up; the epoch is complete
            note_last_checkpoint(trainer, exc)
            raise
    if failed is not None:
        note_last_checkpoint(trainer, failed)
        raise failed


def run_epoch(trainer: BaseTrainer[TTrainingStats]) -> EpochStats[TTrainingStats]:
    """Training steps until ``step_per_epoch`` units have passed (or the run ends), the
    test step unless one ran during them, the end-of-run checks; the epoch's stats."""
    trainer.state.epoch += 1
    trainer._epoch_steps = []
    trainer._epoch_collects = []
    trainer._epoch_update_time = 0.0
    trainer._tested_this_epoch = None
    trainer._ops.call("epoch_start", trainer.state.epoch)
    p = trainer.params
    trainer._progress.start_epoch(
        trainer.state.epoch, p.max_epoch, p.step_per_epoch, show=p.show_progress
    )
    progress = 0
    while progress < p.step_per_epoch and not trainer._finished:
        done = trainer._training_step()
        progress += done
        trainer._progress.advance(done, progress_postfix(trainer))
    test_stat = trainer._tested_this_epoch
    stopped_by_nan = trainer.stop_reason == "nonfinite"  # on_nonfinite: end the run there
    if test_stat is None and trainer.test_collector is not None and not stopped_by_nan:
        test_stat = trainer._test_step()
    if not trainer._finished and trainer._stop_fn_fired():
        trainer._finish("stop_fn")
    if not trainer._finished and trainer.state.epoch >= trainer.params.max_epoch:
        trainer._finish("max_epoch")
    trainer._progress.end_epoch(progress_postfix(trainer), finished=trainer._finished)
    training_stat = aggregate_training_stats(trainer._epoch_steps, trainer._epoch_update_time)
    if training_stat is not None:
        training_stat.smoothed_loss = trainer._smoothed()
    return EpochStats(
        epoch=trainer.state.epoch,
        train_collect_stat=(
            CollectStats.merge(trainer._epoch_collects) if trainer._epoch_collects else None
        ),
        test_collect_stat=test_stat,
        training_stat=training_stat,
        info_stat=trainer.info_stat(),
    )


def test_step(trainer: BaseTrainer[Any]) -> CollectStats | None:
    """Run ``episode_per_test`` deterministic episodes; update the best record. None
    when the test envs gave NaN or inf and ``on_nonfinite`` stopped the run."""
    assert trainer.test_collector is not None
    # the test envs' spaces are seeded from where the run is, as their reset: a resumed
    # run tests as an uninterrupted one (test envs are not in checkpoints)
    stream = (_TEST_SPACES, trainer.state.epoch, trainer.state.env_step)
    seed_spaces(trainer.test_collector.env, trainer.params.seed, stream=stream)
    # exploration set by the user holds for its phase: train_fn's for training, and
    # test_fn's (if any) for this test step only
    train_exploration, trainer.policy.exploration = trainer.policy.exploration, None
    try:
        if trainer.test_fn is not None:
            call_callback("test_fn", trainer.test_fn, trainer.state.epoch, trainer.state.env_step)
        trainer.test_collector.reset(seed=int(np.random.randint(2**31 - 1)))
        stat = trainer.test_collector.collect(n_episode=trainer.params.episode_per_test)
    except NonFiniteError as exc:
        on_nonfinite(trainer, exc, f"the test after {run_position(trainer)}")
        return None
    except EnvError as exc:  # named as a training env's error is, as the test envs'
        raise with_run_context(trainer, exc, trainer.state.env_step, "the test envs: ") from (
            exc.__cause__
        )
    finally:
        trainer.policy.exploration = train_exploration
    trainer.state.test_time += stat.collect_time
    trainer.state.test_step += stat.n_collected_steps
    trainer.state.test_episode += stat.n_collected_episodes
    assert stat.returns_stat is not None
    if stat.returns_stat.mean > trainer.state.best_test_return:
        trainer.state.best_test_return = stat.returns_stat.mean
        trainer.state.best_test_return_std = stat.returns_stat.std
        trainer.state.best_epoch = trainer.state.epoch
        if trainer.save_best_fn is not None:
            call_callback("save_best_fn", trainer.save_best_fn, trainer.policy)
    trainer.last_test_stat = stat
    trainer._tested_this_epoch = stat
    # the step the run advances by: env steps, or gradient steps offline (no env steps)
    step = trainer.state.gradient_step if trainer.kind == "offline" else trainer.state.env_step
    trainer.logger.log_test_data(stat, step)
    trainer._ops.call("test_end", stat)
    return stat
