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

The body of ``next()`` (one epoch, its test step, its log and checkpoint) is in
:mod:`epochtrain.trainer.epoch`; the bookkeeping of gradient steps in
:mod:`epochtrain.trainer.updates`.
"""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic

from epochtrain.algorithms.base import Policy, TrainerKind
from epochtrain.checkpoint import (
    load_checkpoint,
    save_checkpoint,
)
from epochtrain.checkpoint_files import CheckpointLock
from epochtrain.closing import Closing
from epochtrain.data.batch import Batch
from epochtrain.data.buffer import ReplayBuffer
from epochtrain.data.collector import Collector
from epochtrain.data.writes import check_writable_dir
from epochtrain.logger import BaseLogger, LazyLogger, Scope
from epochtrain.stats import (
    CollectStats,
    EpochStats,
    InfoStats,
    MovAvg,
    RunState,
    TTrainingStats,
)
from epochtrain.trainer.checks import check_arguments, check_env_spaces, check_reset
from epochtrain.trainer.epoch import next_epoch, test_step
from epochtrain.trainer.hooks import (
    HookOp,
    HookTable,
    TrainerHook,
    call_callback,
    claim_hook,
    register_claimed,
)
from epochtrain.trainer.params import TrainerParams, setting_defaults_of, settings_of
from epochtrain.trainer.progress import RunProgress
from epochtrain.trainer.safety import (
    close_envs,
    last_checkpoint_text,
    note_last_checkpoint,
)
from epochtrain.trainer.state import (
    check_trainer_state,
    load_logger_state,
    load_trainer_state,
    restore_on_error,
    trainer_state,
)
from epochtrain.trainer.updates import finish_update, learn

__all__ = ["BaseTrainer", "StopFn", "check_policy_initialised"]

StopFn = Callable[[float], bool]
"""``stop_fn(best_test_return) -> bool``: True stops training after this epoch."""


# what Policy.__init__ (and nn.Module.__init__ before it) sets on the instance
_POLICY_INIT_ATTRS = ("observation_space", "action_space", "optimizers", "_modules")


def check_policy_initialised(policy: Policy[Any]) -> None:
    """Raise ``TypeError`` if ``policy``'s constructor did not run ``Policy.__init__`` (a
    custom policy that forgot ``super().__init__(...)``), before anything reads its spaces."""
    missing = [name for name in _POLICY_INIT_ATTRS if name not in vars(policy)]
    if missing:
        cls = type(policy).__name__
        raise TypeError(
            f"{cls}.__init__ did not call Policy.__init__ (the policy has no {missing[0]}): "
            "call super().__init__(observation_space, action_space, config, device=device) "
            f"in {cls}.__init__, before it builds its networks and optimizers"
        )


class BaseTrainer(Closing, Generic[TTrainingStats], ABC):
    """Abstract epoch trainer, generic in the policy's training-stats type.

    ``params`` holds the run's settings as data (:class:`TrainerParams`, or the subclass
    named by ``params_cls``; default: its class defaults); the other keyword arguments are
    the objects the trainer works on. Each trainer kind takes the objects it needs:
    ``train_collector`` (online trainers) or ``buffer`` (the offline dataset). Everything
    is validated here, before any work starts: the params, the objects, the policy's kind
    against the trainer's (:attr:`kind`), and the policy's spaces against the envs' and
    the dataset's. Subclasses supply :meth:`policy_update_fn` and :meth:`_training_step`.

    Hooks and checkpoints: ``hooks`` are :class:`~epochtrain.trainer.hooks.TrainerHook`
    objects registered when the trainer is built; ``params.checkpoint_dir`` receives a
    checkpoint every ``checkpoint_every`` epochs (and at the end of the run), of which the
    last ``keep_last`` (``None``: all) and, with ``keep_best``, the one of the best test
    return are kept; ``params.resume_from`` (a checkpoint, or a ``checkpoint_dir`` whose
    latest checkpoint is taken) restores the run before the first epoch.
    """

    kind: ClassVar[TrainerKind]
    """How this trainer feeds its policy; a policy declares the kinds it supports."""
    params_cls: ClassVar[type[TrainerParams]] = TrainerParams
    """The params dataclass this trainer takes."""

    def __init__(
        self,
        *,
        policy: Policy[TTrainingStats],
        params: TrainerParams | None = None,
        train_collector: Collector | None = None,
        test_collector: Collector | None = None,
        buffer: ReplayBuffer | None = None,
        logger: BaseLogger | None = None,
        hooks: Sequence[TrainerHook] | None = None,
        train_fn: Callable[[int, int], None] | None = None,
        test_fn: Callable[[int, int], None] | None = None,
        stop_fn: StopFn | None = None,
        save_best_fn: Callable[[Policy[TTrainingStats]], None] | None = None,
    ) -> None:
        if params is None:
            params = self.params_cls()
        hook_list = check_arguments(
            type(self),
            policy=policy,
            params=params,
            test_collector=test_collector,
            callbacks={
                "train_fn": train_fn,
                "test_fn": test_fn,
                "stop_fn": stop_fn,
                "save_best_fn": save_best_fn,
            },
            logger=logger,
            hooks=hooks,
        )
        check_policy_initialised(policy)
        self.params = params
        self.policy = policy
        self.test_collector = test_collector
        self.train_fn = train_fn
        self.test_fn = test_fn
        self.stop_fn = stop_fn
        self.save_best_fn = save_best_fn
        self.logger: BaseLogger = logger if logger is not None else LazyLogger()
        self.checkpoint_dir = None if params.checkpoint_dir is None else Path(params.checkpoint_dir)
        if self.checkpoint_dir is not None:
            check_writable_dir(self.checkpoint_dir, "checkpoint_dir")
        self.last_checkpoint: Path | None = None
        """The checkpoint last written or loaded (named in fault messages)."""
        self._checkpoint_lock: CheckpointLock | None = None
        policy.skip_nonfinite = params.on_nonfinite == "skip"
        self.spec: dict[str, Any] | None = None
        """The :class:`~epochtrain.spec.RunSpec` (as a dict) this trainer was built from, if
        any; checkpoints store it and a resume into a different spec is refused."""
        self.hooks: list[TrainerHook] = []
        """Registered hook objects, in registration order (their states are checkpointed)."""
        self._ops = HookTable()
        self._in_next = False
        self._next_lock = threading.Lock()  # one next() at a time: a hook's, a thread's
        self._closed = False  # close() released the envs and the logger: no epoch after it
        self._attach(train_collector, buffer)
        self._check_spaces()
        self._init_state()
        self._pending_hooks = hook_list
        self._pending_resume = None if params.resume_from is None else Path(params.resume_from)
        self._complete_init()
        self.logger._claim(self)  # checked free above; released by close() or reset(logger=)

    def _attach(self, train_collector: Collector | None, buffer: ReplayBuffer | None) -> None:
        """Check and keep the objects of this trainer kind (a training collector, a dataset)."""
        for label, given in (("train_collector", train_collector), ("buffer", buffer)):
            if given is not None:
                raise TypeError(f"{type(self).__name__} takes no {label}")

    def _check_spaces(self) -> None:
        """The policy's spaces must be the envs' (and the dataset's; subclasses add that)."""
        check_env_spaces(self.policy, self._collectors())

    def _collectors(self) -> list[tuple[str, Collector]]:
        return [] if self.test_collector is None else [("test_collector", self.test_collector)]

    def dataset_record(self) -> dict[str, Any] | None:
        """What a checkpoint records about the trainer's dataset (the offline trainer's
        fingerprint of it, so a resume onto other data is refused); None: no dataset."""
        return None

    def resume_settings(self) -> dict[str, Any]:
        """What a checkpoint must agree with to be resumed into this trainer: the
        :class:`~epochtrain.spec.RunSpec` this trainer was built from, or else its params,
        the policy's config, the buffer kind and the env id (``docs/checkpointing.md``)."""
        return settings_of(self)

    def setting_defaults(self) -> dict[str, Any]:
        """The declared defaults of the ``trainer`` and ``config`` settings of
        :meth:`resume_settings`: a checkpoint written before a setting existed resumes
        while the setting is at its default."""
        return setting_defaults_of(self)

    def _buffer_kind(self) -> str | None:
        return None

    def _complete_init(self) -> None:
        """Register the ``hooks`` and restore ``resume_from`` (once, before first use)."""
        pending, self._pending_hooks = self._pending_hooks, []
        for hook in pending:
            self.register_hook(hook)
        resume, self._pending_resume = self._pending_resume, None
        if resume is not None:
            self.load_checkpoint(resume)

    # ------------------------------------------------------------------ state
    def _init_state(self) -> None:
        """Counters and flags of a fresh run (all on the instance)."""
        self.state = RunState()
        """The run's counters (epochs, env and gradient steps, best return, timings)."""
        self.stop_reason: str | None = None
        self.nonfinite_message: str | None = None
        """Why the run stopped with ``stop_reason == "nonfinite"`` (``on_nonfinite="stop"``):
        the first fault found (an asynchronous collect step in flight may find a second)."""
        self.last_test_stat: CollectStats | None = None
        self._broken: str | None = None  # why an epoch stopped part-way (an error in it)
        self._started = False
        self._finished = False
        self._rng_state: dict[str, Any] | None = None
        self._mov_avg: defaultdict[str, MovAvg] = defaultdict(MovAvg)
        self._pending_steps: list[TTrainingStats] = []
        self._n_read_steps = 0  # of _pending_steps, read by _read_steps
        self._checked_stats_type: type | None = None  # what learn returns, checked once
        self._epoch_steps: list[TTrainingStats] = []
        self._epoch_collects: list[CollectStats] = []
        self._epoch_update_time = 0.0
        self._tested_this_epoch: CollectStats | None = None
        self._hook_postfix: dict[str, str] = {}
        self._progress = RunProgress()

    def reset(self, *, logger: BaseLogger | None = None) -> None:
        """Start over: counters, random streams, envs, smoothing windows and hook states.

        The policy's weights are not re-initialised; build a new policy for a fresh run.
        ``logger`` replaces the trainer's logger (the old one is closed); it is required
        once the old one holds records, since the new run's records at steps already
        written would be dropped, and it must be a new one: a logger that holds records
        (the old one included) or that another trainer logs to is refused. A
        ``checkpoint_dir`` that holds checkpoints is refused: the new run would replace
        them (build a new trainer with another directory). Call it between epochs: inside
        ``next()`` (from a hook) and on a closed trainer it raises ``RuntimeError``.
        """
        check_reset(self, logger)
        self._progress.close()
        if logger is not None and logger is not self.logger:
            self.logger._close_with(self)
            self.logger._release(self)
            self.logger = logger
            logger._claim(self)
        self._init_state()
        self.last_checkpoint = None
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
        """End the run: the current epoch stops its training steps (from inside an update
        step, the gradient steps after the current one do not run), runs its test step and
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
        """Register ``hook`` (it adds its ops) and keep it, so checkpoints save its state.

        A hook object is registered once, on one trainer: a second registration, here or
        on another trainer, raises ``ValueError`` (build a new hook object per trainer).
        """
        if not isinstance(hook, TrainerHook):
            raise TypeError(f"hook must be a TrainerHook, got {hook!r}")
        claim_hook(hook, self)
        register_claimed(hook, self)  # an error in register() names the hook
        self.hooks.append(hook)

    def _log_ops(self, point: str, scope: Scope, step: int, *args: Any) -> None:
        self._ops.log(point, self.logger, scope, step, self._hook_postfix, *args)

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> BaseTrainer[TTrainingStats]:
        return self

    def __next__(self) -> EpochStats[TTrainingStats]:
        if not self._next_lock.acquire(blocking=False):
            raise RuntimeError(
                "next() is already running on this trainer (called from one of its hooks, or "
                "from a second thread): a trainer runs one epoch at a time"
            )
        try:
            return next_epoch(self)
        finally:
            self._next_lock.release()

    def run(self) -> InfoStats:
        """Iterate to the end of the run and return the final :class:`InfoStats`.

        A Ctrl-C or an error anywhere in the run (between epochs too: after a checkpoint
        was written and before the next epoch starts) carries the last checkpoint's path as
        a note.
        """
        try:
            for _ in self:
                pass
        except BaseException as exc:
            note_last_checkpoint(self, exc)
            raise
        return self.info_stat()

    def close(self) -> None:
        """Release what the trainer holds: a background collect step (finished first), its
        collectors' vector envs (an ``AsyncVectorEnv``'s worker processes with them) and
        its logger. Safe to call more than once; the trainer cannot train on afterwards.
        ``with make_trainer(...) as trainer:`` calls it when the block ends, however it
        ends. The closed logger stays this trainer's: another trainer given it is refused
        (a new logger on the same path, with ``resume_from``, continues the run)."""
        self._closed = True
        self._progress.close()  # a run stopped early: its bars end here, not at exit
        try:
            close_envs(self)
        finally:
            try:
                self.logger._close_with(self)  # a trainer given it later is refused, naming why
            finally:
                if self._checkpoint_lock is not None:  # another trainer may now use the dir
                    self._checkpoint_lock.release()

    def _stop_workers(self) -> None:
        """End background work before :meth:`close` closes the envs; default: none."""

    def _start(self) -> None:
        """Work done once when the run starts (seeding envs, warm-up); default: nothing."""

    @abstractmethod
    def _training_step(self) -> int:
        """Run one training step; return the progress made in ``step_per_epoch`` units."""

    @abstractmethod
    def policy_update_fn(self, collect_stats: CollectStats | None) -> TTrainingStats | None:
        """One update step after a collect step; returns stats over its gradient steps."""

    # ------------------------------------------------------------- gradient steps
    def _learn(self, batch: Batch) -> Batch:
        """One gradient step; its stats join the current update and epoch (``updates.learn``).

        Fires ``process_optim_batch`` (its result is learned from and returned), then after
        ``learn``: ``post_loss``, ``post_optim`` and ``post_optim_log``.
        """
        return learn(self, batch)

    def _learn_sampled(self, buffer: ReplayBuffer, batch_size: int) -> None:
        """One gradient step on a minibatch sampled from ``buffer``.

        The policy draws and prepares the sample (``sample_batch``: n-step transitions,
        ...) and sees it again after learning (``post_learn``: priority updates, ...).
        """
        batch = self.policy.sample_batch(buffer, batch_size)
        batch = self._learn(batch)
        self.policy.post_learn(batch, buffer)

    def _finish_update(self, update_time: float) -> TTrainingStats | None:
        """Aggregate the gradient steps of this update step, log them, return them."""
        return finish_update(self, update_time)

    def _smoothed(self) -> dict[str, float]:
        return {k: v.get() for k, v in self._mov_avg.items()}

    # ---------------------------------------------------------------- testing
    def _test_step(self) -> CollectStats | None:
        """Run ``episode_per_test`` deterministic episodes; update the best record. None
        when the test envs gave NaN or inf and ``on_nonfinite`` stopped the run."""
        return test_step(self)

    def _stop_fn_fired(self) -> bool:
        if self.stop_fn is None:
            return False
        return bool(call_callback("stop_fn", self.stop_fn, self.state.best_test_return))

    # -------------------------------------------------------------- persisting
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs (subclasses add their collectors and buffer).

        Holds references to live tensors: ``torch.save`` it (or deep-copy it) at once.
        """
        self._complete_init()
        return trainer_state(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned into this (identically built) trainer.

        All or nothing: :meth:`check_state_dict` runs first, a failure while restoring
        puts everything back, and the logger (which rewrites its files) comes last. The
        state is checked to fit (its parts, shapes and hook classes); the settings it was
        run with (the spec, hook arguments, the dataset's content) are in a checkpoint's
        manifest, and only :meth:`load_checkpoint` compares them.
        """
        self._complete_init()
        self.check_state_dict(state)
        with restore_on_error(self):
            self._load_parts(state)
        load_logger_state(self, state)

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """Raise (naming what differs) unless ``state`` fits this trainer; changes nothing."""
        check_trainer_state(self, state)

    def _load_parts(self, state: Mapping[str, Any]) -> None:
        """Restore everything but the logger (subclasses add their collector and buffer)."""
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
        self._refuse_if_broken("save_checkpoint")
        return save_checkpoint(self, path)

    def _refuse_if_broken(self, what: str) -> None:
        """After an error inside an epoch the trainer holds half of it: refuse to go on
        or to save that (a checkpoint must be of a complete epoch)."""
        if self._broken is not None:
            raise RuntimeError(
                f"{what} refused: {self._broken}, so this trainer holds half an epoch; "
                f"{last_checkpoint_text(self)} (load it, or call reset() to start over)"
            )

    def load_checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Restore the checkpoint at ``path`` (or the latest one in a ``checkpoint_dir``).

        Returns the checkpoint directory that was loaded.
        """
        if self._in_next:
            raise RuntimeError("load_checkpoint cannot run inside next(): call it between epochs")
        loaded = load_checkpoint(self, path)
        self._broken = None  # the state of a complete epoch again
        return loaded

    # --------------------------------------------------------------- reporting
    def info_stat(self) -> InfoStats:
        """Totals and timings of the run so far."""
        return InfoStats.of(self.state)
