"""BaseTrainer: the epoch loop as an iterator; each ``next()`` runs one epoch.

Glossary (units in brackets):

* **epoch** — training steps until ``step_per_epoch`` units have passed [env steps for the
  online trainers, gradient steps for the offline trainer], then one test step.
* **training step** — one collect step followed by one update step (online), or one
  gradient step (offline).
* **collect step** — one ``Collector.collect`` call on the training envs.
* **update step** — one call of ``policy_update_fn``; it runs one or more gradient steps.
* **gradient step** — one ``Policy.learn`` call: one optimizer step on one minibatch.
* **test step** — ``episode_per_test`` deterministic episodes on the test collector.
* **hook point** — a named place in the loop where registered functions run
  (:mod:`epochtrain.trainer.hooks`, ``docs/hooks.md``).
* **checkpoint** — one directory holding everything a resumed run needs
  (:mod:`epochtrain.checkpoint`, ``docs/checkpointing.md``).

Iterator contract: ``iter(trainer)`` is the trainer itself and never resets it; the first
``next()`` starts the run; ``max_epoch=k`` yields exactly k :class:`EpochStats` unless
``stop_fn`` fires first; after the end every ``next()`` raises ``StopIteration`` and
``stop_reason`` says why. ``reset()`` is the only way to start over; ``run()`` iterates to
the end. Each trainer owns its random streams (python, numpy, torch): they are swapped in
on entry to ``next()`` and out on exit, so zipped trainers do not disturb each other.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
from tqdm.auto import tqdm

from epochtrain.algorithms.base import Policy
from epochtrain.checkpoint import load_checkpoint, save_checkpoint, save_periodic
from epochtrain.data.batch import Batch
from epochtrain.data.buffer import ReplayBuffer
from epochtrain.data.collector import Collector
from epochtrain.logger import BaseLogger, LazyLogger, Scope
from epochtrain.stats import (
    CollectStats,
    EpochStats,
    InfoStats,
    MovAvg,
    TrainingStats,
    TTrainingStats,
    aggregate_training_stats,
)
from epochtrain.trainer.hooks import HookOp, HookTable, TrainerHook
from epochtrain.trainer.params import (
    check_base_params,
    check_hooks,
    check_path,
    check_positive_int,
)
from epochtrain.trainer.state import load_trainer_state, rng_scope, trainer_state

__all__ = ["BaseTrainer", "StopFn"]

TTrainer = TypeVar("TTrainer", bound="BaseTrainer[Any]")

StopFn = Callable[[float], bool]
"""``stop_fn(best_test_return) -> bool``: True stops training after this epoch."""


class BaseTrainer(Generic[TTrainingStats], ABC):
    """Abstract epoch trainer, generic in the policy's training-stats type.

    Subclasses supply :meth:`policy_update_fn` and :meth:`_training_step`, and call
    :meth:`_complete_init` at the end of their ``__init__``. All parameters are
    keyword-only and validated here, before any work starts.

    Hooks and checkpoints: ``hooks`` are :class:`~epochtrain.trainer.hooks.TrainerHook`
    objects registered when the trainer is built; ``checkpoint_dir`` receives a checkpoint
    every ``checkpoint_every`` epochs (and at the end of the run), of which the last
    ``keep_last`` (``None``: all) and, with ``keep_best``, the one of the best test return
    are kept; ``resume_from`` (a checkpoint, or a ``checkpoint_dir`` whose latest
    checkpoint is taken) restores the run before the first epoch.
    """

    def __init__(
        self,
        *,
        policy: Policy[TTrainingStats],
        test_collector: Collector | None = None,
        max_epoch: int,
        step_per_epoch: int,
        episode_per_test: int = 10,
        train_fn: Callable[[int, int], None] | None = None,
        test_fn: Callable[[int, int], None] | None = None,
        stop_fn: StopFn | None = None,
        save_best_fn: Callable[[Policy[TTrainingStats]], None] | None = None,
        logger: BaseLogger | None = None,
        show_progress: bool = True,
        verbose: bool = False,
        test_in_train: bool = False,
        test_before_train: bool = False,
        seed: int = 0,
        hooks: Sequence[TrainerHook] | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        checkpoint_every: int = 1,
        keep_last: int | None = 3,
        keep_best: bool = True,
        resume_from: str | os.PathLike[str] | None = None,
    ) -> None:
        check_base_params(
            policy=policy,
            test_collector=test_collector,
            max_epoch=max_epoch,
            step_per_epoch=step_per_epoch,
            episode_per_test=episode_per_test,
            callbacks={
                "train_fn": train_fn,
                "test_fn": test_fn,
                "stop_fn": stop_fn,
                "save_best_fn": save_best_fn,
            },
            test_in_train=test_in_train,
            test_before_train=test_before_train,
            seed=seed,
            logger=logger,
        )
        hook_list = check_hooks(hooks)
        self.checkpoint_dir = check_path("checkpoint_dir", checkpoint_dir)
        check_positive_int("checkpoint_every", checkpoint_every)
        if keep_last is not None:
            check_positive_int("keep_last", keep_last)
        resume_path = check_path("resume_from", resume_from, must_exist=True)
        self.policy = policy
        self.test_collector = test_collector
        self.max_epoch = max_epoch
        self.step_per_epoch = step_per_epoch
        self.episode_per_test = episode_per_test
        self.train_fn = train_fn
        self.test_fn = test_fn
        self.stop_fn = stop_fn
        self.save_best_fn = save_best_fn
        self.logger: BaseLogger = logger if logger is not None else LazyLogger()
        self.show_progress = show_progress
        self.verbose = verbose
        self.test_in_train = test_in_train
        self.test_before_train = test_before_train
        self.seed = seed
        self.checkpoint_every = checkpoint_every
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.config: dict[str, Any] = {}
        """JSON-able description of how the run was built, written to checkpoint manifests
        (``make_trainer`` records ``algo``, ``env_id``, ``seed`` and its overrides here)."""
        self.hooks: list[TrainerHook] = []
        """Registered hook objects, in registration order (their states are checkpointed)."""
        self._ops = HookTable()
        self._pending_hooks = hook_list
        self._pending_resume = resume_path
        self._in_next = False
        self._init_state()

    def _complete_init(self) -> None:
        """Register the ``hooks`` and restore ``resume_from``; leaf ``__init__``s end with it.

        Idempotent; also run before the first epoch in case a subclass did not call it.
        """
        pending, self._pending_hooks = self._pending_hooks, []
        for hook in pending:
            self.register_hook(hook)
        resume, self._pending_resume = self._pending_resume, None
        if resume is not None:
            self.load_checkpoint(resume)

    # ------------------------------------------------------------------ state
    def _init_state(self) -> None:
        """Counters and flags of a fresh run (all on the instance)."""
        self.epoch = 0
        self.env_step = 0
        self.gradient_step = 0
        self.train_episode = 0
        self.test_step = 0
        self.test_episode = 0
        self.best_test_return = float("-inf")
        self.best_test_return_std = 0.0
        self.best_epoch = 0
        self.collect_time = 0.0
        self.update_time = 0.0
        self.test_time = 0.0
        self.total_time = 0.0
        self.stop_reason: str | None = None
        self.last_test_stat: CollectStats | None = None
        self._started = False
        self._finished = False
        self._rng_state: dict[str, Any] | None = None
        self._mov_avg: defaultdict[str, MovAvg] = defaultdict(MovAvg)
        self._pending_steps: list[TTrainingStats] = []
        self._epoch_steps: list[TTrainingStats] = []
        self._epoch_collects: list[CollectStats] = []
        self._epoch_update_time = 0.0
        self._tested_this_epoch: CollectStats | None = None
        self._hook_postfix: dict[str, str] = {}

    def reset(self) -> None:
        """Start over: counters, random streams, envs, smoothing windows and hook states.

        The policy's weights are not re-initialised; build a new policy for a fresh run.
        """
        self._init_state()
        for hook in self.hooks:
            hook.reset()

    @property
    def finished(self) -> bool:
        """True once the run has ended (``stop_reason`` says why)."""
        return self._finished

    def _finish(self, reason: str) -> None:
        self._finished = True
        self.stop_reason = reason

    def request_stop(self, reason: str) -> None:
        """End the run: the current epoch stops its training steps, runs its test step and
        is returned; later ``next()`` calls raise ``StopIteration``. ``stop_reason`` becomes
        ``reason`` (hooks use it, e.g. ``"early_stopping"``)."""
        if not self._finished:
            self._finish(reason)

    # ------------------------------------------------------------------- hooks
    def register_op(self, point: str, op: HookOp) -> None:
        """Add ``op`` at hook ``point`` (see :mod:`epochtrain.trainer.hooks` for signatures).

        ``"optimizer"`` ops join ``policy.optimizer_hooks``: they run inside
        ``Policy.optimize`` between ``backward`` and ``step``.
        """
        self._ops.add(point, op)
        if point == "optimizer":
            self.policy.optimizer_hooks.append(op)

    def register_hook(self, hook: TrainerHook) -> None:
        """Register ``hook`` (it adds its ops) and keep it, so checkpoints save its state."""
        if not isinstance(hook, TrainerHook):
            raise TypeError(f"hook must be a TrainerHook, got {hook!r}")
        hook.register(self)
        self.hooks.append(hook)

    def _log_ops(self, point: str, scope: Scope, step: int, *args: Any) -> None:
        self._ops.log(point, self.logger, scope, step, self._hook_postfix, *args)

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> BaseTrainer[TTrainingStats]:
        return self

    def __next__(self) -> EpochStats[TTrainingStats]:
        self._complete_init()
        if self._finished:
            raise StopIteration
        start = time.perf_counter()
        self._in_next = True
        try:
            with rng_scope(self):
                if not self._started:
                    self._started = True
                    self._start()
                    if self.test_before_train:
                        self._test_step()
                        if self._stop_fn_fired():
                            self._finish("stop_fn")
                if self._finished:
                    self.total_time += time.perf_counter() - start
                    raise StopIteration
                stats = self._run_epoch()
                self.total_time += time.perf_counter() - start
                stats.info_stat.total_time = self.total_time
                self._ops.call("epoch_end", stats)
        finally:
            self._in_next = False
        self.logger.log_info_data(stats.info_stat, self.epoch)
        self.logger.flush()  # an epoch's curves reach disk even if the user never closes
        self._report(stats)
        if self.checkpoint_dir is not None and (
            self._finished or self.epoch % self.checkpoint_every == 0
        ):
            save_periodic(self, self.checkpoint_dir)
        return stats

    def run(self) -> InfoStats:
        """Iterate to the end of the run and return the final :class:`InfoStats`."""
        for _ in self:
            pass
        return self.info_stat()

    def _start(self) -> None:
        """Work done once when the run starts (seeding envs, warm-up); default: nothing."""

    def _run_epoch(self) -> EpochStats[TTrainingStats]:
        self.epoch += 1
        self._epoch_steps = []
        self._epoch_collects = []
        self._epoch_update_time = 0.0
        self._tested_this_epoch = None
        self._ops.call("epoch_start", self.epoch)
        with tqdm(
            total=self.step_per_epoch,
            desc=f"Epoch #{self.epoch}",
            disable=not self.show_progress,
            dynamic_ncols=True,
            leave=False,
        ) as pbar:
            progress = 0
            while progress < self.step_per_epoch and not self._finished:
                done = self._training_step()
                progress += done
                pbar.update(min(done, self.step_per_epoch - pbar.n))
                pbar.set_postfix(self._progress_postfix(), refresh=False)
        test_stat = self._tested_this_epoch
        if test_stat is None and self.test_collector is not None:
            test_stat = self._test_step()
        if not self._finished and self._stop_fn_fired():
            self._finish("stop_fn")
        if not self._finished and self.epoch >= self.max_epoch:
            self._finish("max_epoch")
        training_stat = aggregate_training_stats(self._epoch_steps, self._epoch_update_time)
        if training_stat is not None:
            training_stat.smoothed_loss = self._smoothed()
        return EpochStats(
            epoch=self.epoch,
            train_collect_stat=(
                CollectStats.merge(self._epoch_collects) if self._epoch_collects else None
            ),
            test_collect_stat=test_stat,
            training_stat=training_stat,
            info_stat=self.info_stat(),
        )

    @abstractmethod
    def _training_step(self) -> int:
        """Run one training step; return the progress made in ``step_per_epoch`` units."""

    @abstractmethod
    def policy_update_fn(self, collect_stats: CollectStats | None) -> TTrainingStats | None:
        """One update step after a collect step; returns stats over its gradient steps."""

    # ------------------------------------------------------------- gradient steps
    def _learn(self, batch: Batch) -> Batch:
        """One gradient step; its stats join the current update and epoch.

        Fires ``process_optim_batch`` (its result is learned from and returned), then after
        ``learn``: ``post_loss``, ``post_optim`` and ``post_optim_log``.
        """
        ops = self._ops.ops  # the plain dict: no method call per gradient step
        if ops["process_optim_batch"]:
            batch = self._ops.process("process_optim_batch", batch)
        start = time.perf_counter()
        stats = self.policy.learn(batch)
        stats.train_time = time.perf_counter() - start
        self.gradient_step += 1
        for key, value in stats.loss_stats().items():
            self._mov_avg[key].add(value)
        self._pending_steps.append(stats)
        if ops["post_loss"] or ops["post_optim"] or ops["post_optim_log"]:
            self._after_gradient_step(stats)
        return batch

    def _after_gradient_step(self, stats: TrainingStats) -> None:
        self._ops.call("post_loss", stats)
        self._ops.call("post_optim")
        self._log_ops("post_optim_log", "update", self.gradient_step, stats)

    def _learn_sampled(self, buffer: ReplayBuffer, batch_size: int) -> None:
        """One gradient step on a minibatch sampled from ``buffer``.

        The policy prepares the sample (``process_sample``: n-step targets, ...) and sees
        it again after learning (``post_learn``: priority updates, ...).
        """
        batch = self.policy.process_sample(buffer.sample(batch_size), buffer)
        batch = self._learn(batch)
        self.policy.post_learn(batch, buffer)

    def _finish_update(self, update_time: float) -> TTrainingStats | None:
        """Aggregate the gradient steps of this update step, log them, return them."""
        self.update_time += update_time
        self._epoch_update_time += update_time
        steps, self._pending_steps = self._pending_steps, []
        self._epoch_steps.extend(steps)
        stats = aggregate_training_stats(steps, update_time)
        if stats is not None:
            stats.smoothed_loss = self._smoothed()
            self.logger.log_update_data(stats, self.gradient_step)
        return stats

    def _smoothed(self) -> dict[str, float]:
        return {k: v.get() for k, v in self._mov_avg.items()}

    # ---------------------------------------------------------------- testing
    def _test_step(self) -> CollectStats:
        """Run ``episode_per_test`` deterministic episodes; update the best record."""
        assert self.test_collector is not None
        if self.test_fn is not None:
            self.test_fn(self.epoch, self.env_step)
        self.test_collector.reset(seed=int(np.random.randint(2**31 - 1)))
        stat = self.test_collector.collect(n_episode=self.episode_per_test)
        self.test_time += stat.collect_time
        self.test_step += stat.n_collected_steps
        self.test_episode += stat.n_collected_episodes
        assert stat.returns_stat is not None
        if stat.returns_stat.mean > self.best_test_return:
            self.best_test_return = stat.returns_stat.mean
            self.best_test_return_std = stat.returns_stat.std
            self.best_epoch = self.epoch
            if self.save_best_fn is not None:
                self.save_best_fn(self.policy)
        self.last_test_stat = stat
        self._tested_this_epoch = stat
        self.logger.log_test_data(stat, self.env_step)
        self._ops.call("test_end", stat)
        return stat

    def _stop_fn_fired(self) -> bool:
        return self.stop_fn is not None and bool(self.stop_fn(self.best_test_return))

    # -------------------------------------------------------------- persisting
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs (subclasses add their collectors and buffer).

        Holds references to live tensors: ``torch.save`` it (or deep-copy it) at once.
        """
        self._complete_init()
        return trainer_state(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned into this (identically built) trainer."""
        self._complete_init()
        load_trainer_state(self, state)

    def save_checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Write a checkpoint directory at ``path`` atomically; returns its path.

        Call it between epochs (not from inside ``next()``); see ``docs/checkpointing.md``.
        """
        if self._in_next:
            raise RuntimeError(
                "save_checkpoint cannot run inside next() (mid-epoch state is not saved): "
                "call it between epochs or set checkpoint_dir/checkpoint_every"
            )
        return save_checkpoint(self, path)

    def load_checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Restore the checkpoint at ``path`` (or the latest one in a ``checkpoint_dir``).

        Returns the checkpoint directory that was loaded.
        """
        if self._in_next:
            raise RuntimeError("load_checkpoint cannot run inside next(): call it between epochs")
        return load_checkpoint(self, path)

    @classmethod
    def resume(cls: type[TTrainer], path: str | os.PathLike[str], **kwargs: Any) -> TTrainer:
        """Build the trainer from ``kwargs`` (as the checkpointed run was built) and restore
        ``path`` into it: ``OffpolicyTrainer.resume("ckpt/epoch_000010", policy=..., ...)``."""
        return cls(resume_from=path, **kwargs)

    # --------------------------------------------------------------- reporting
    def info_stat(self) -> InfoStats:
        """Totals and timings of the run so far."""
        return InfoStats(
            epoch=self.epoch,
            env_step=self.env_step,
            gradient_step=self.gradient_step,
            train_episode=self.train_episode,
            test_step=self.test_step,
            test_episode=self.test_episode,
            best_test_return=self.best_test_return,
            best_test_return_std=self.best_test_return_std,
            best_epoch=self.best_epoch,
            collect_time=self.collect_time,
            update_time=self.update_time,
            test_time=self.test_time,
            total_time=self.total_time,
            collect_speed=self.env_step / self.collect_time if self.collect_time > 0 else 0.0,
            update_speed=self.gradient_step / self.update_time if self.update_time > 0 else 0.0,
        )

    def _progress_postfix(self) -> dict[str, str]:
        post = {"env_step": str(self.env_step)}
        for key, value in self._smoothed().items():
            if key.startswith("loss"):
                post[key] = f"{value:.3g}"
        if self.last_test_stat is not None and self.last_test_stat.returns_stat is not None:
            post["test_return"] = f"{self.last_test_stat.returns_stat.mean:.1f}"
        post.update(self._hook_postfix)
        return post

    def _report(self, stats: EpochStats[TTrainingStats]) -> None:
        if not self.verbose:
            return
        line = f"Epoch #{stats.epoch}: env_step={self.env_step} grad_step={self.gradient_step}"
        test = stats.test_collect_stat
        if test is not None and test.returns_stat is not None:
            line += (
                f" test_return={test.returns_stat.mean:.2f} ± {test.returns_stat.std:.2f}"
                f" best={self.best_test_return:.2f} (epoch {self.best_epoch})"
            )
        line += f" time={self.total_time:.1f}s"
        tqdm.write(line)
