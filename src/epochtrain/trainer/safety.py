"""What a trainer does when something goes wrong mid-epoch: non-finite numbers, env errors, Ctrl-C.

* :func:`on_nonfinite` applies the trainer's ``on_nonfinite`` setting to a
  :class:`~epochtrain.errors.NonFiniteError` (a loss, a gradient norm or env data):
  ``"raise"`` re-raises it with the gradient or env step, the epoch and the last good
  checkpoint; ``"stop"`` (and ``"skip"`` for env data, which cannot be skipped) ends the
  run with ``stop_reason == "nonfinite"`` and no checkpoint of that epoch.
* :func:`with_run_context` closes every env of the trainer (:func:`close_envs`) and
  re-raises an :class:`~epochtrain.errors.EnvError` with the absolute env step and the
  epoch, wherever the env failed (warm-up, training collect step, test step).
* :class:`EpochSnapshot` is taken when an epoch starts; ``KeyboardInterrupt`` inside the
  epoch rolls the trainer back to it (:meth:`EpochSnapshot.roll_back`), so the trainer is
  at the end of its last complete epoch and ``save_checkpoint`` saves that. Envs that
  cannot restart their episodes then (a terminal's Ctrl-C stopped their worker processes
  too) are closed.
* :func:`restore_collector` restores a collector's state for a resume or a roll-back;
  envs that cannot be pickled restart their episodes, and the hooks that keep per-episode
  state forget it (``episodes_restarted()``).
* :func:`note_last_checkpoint` adds the last checkpoint's path to an interrupt or error
  that leaves the run (the CLI prints it).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from epochtrain.data.buffer import ReplayBuffer
from epochtrain.data.buffer_ring import BufferMark
from epochtrain.data.collector import Collector
from epochtrain.data.env_faults import nonfinite_tensor
from epochtrain.errors import LAST_CHECKPOINT_NOTE, RESUMED_FROM_NOTE, EnvError, NonFiniteError

if TYPE_CHECKING:
    from epochtrain.trainer.base import BaseTrainer
    from epochtrain.trainer.hooks import TrainerHook

__all__ = [
    "EpochSnapshot",
    "close_envs",
    "last_checkpoint_text",
    "note_last_checkpoint",
    "on_nonfinite",
    "restore_collector",
    "run_position",
    "with_run_context",
]


def last_checkpoint_text(trainer: BaseTrainer[Any]) -> str:
    """``"the last good checkpoint is '...'"``, or that there is none."""
    last = trainer.last_checkpoint
    if last is None:
        return "no checkpoint was written or loaded yet"
    return f"the last good checkpoint is {os.fspath(last)!r} (resume_from={os.fspath(last)!r})"


def on_nonfinite(
    trainer: BaseTrainer[Any],
    exc: NonFiniteError,
    step: str,
    *,
    skippable: bool | None = None,
    applied: bool = False,
) -> None:
    """Apply ``trainer.params.on_nonfinite`` to ``exc`` (``step`` says where it happened).
    ``skippable``: whether ``"skip"`` would skip it (by default: not env data, which has an
    env step); what cannot be skipped stops the run under ``"skip"`` as under ``"stop"``.
    ``applied``: ``exc`` is a statistic a gradient step reported after its optimizer step
    (not the loss it stepped on): the message says the step was applied, and what
    ``"skip"`` does with such a statistic (lets it through)."""
    message = (
        f"{exc} at {step} (epoch {trainer.state.epoch}); {_weights_text(trainer, applied)}; "
        f"{last_checkpoint_text(trainer)}"
    )
    if trainer.params.on_nonfinite == "raise":
        # env data (it has an env step) cannot be skipped: "skip" stops there as "stop" does
        if skippable is None:
            skippable = exc.env_step is None
        skip = ", or 'skip' to skip such gradient steps" if skippable else ""
        if applied:
            skip = (
                "; 'skip' would not undo it: it skips gradient steps whose loss or gradient "
                "norm is NaN or inf, and lets a reported statistic through (report "
                "SequenceSummaryStats.not_measured() for a value a step cannot compute)"
            )
        raise NonFiniteError(
            f"{message}. Set on_nonfinite='stop' to end the run there instead{skip}",
            where=exc.where,
        ) from exc
    if trainer.nonfinite_message is None:  # the cause; a collect step in flight may add one
        trainer.nonfinite_message = message
    trainer.request_stop("nonfinite")


def _weights_text(trainer: BaseTrainer[Any], applied: bool = False) -> str:
    """What a fault message says of the weights: unchanged and finite (the failed step was
    not applied; ``applied``: that step was applied, they are finite), unless a gradient step
    whose loss was finite, or a hook, left a NaN or inf in one (scanned here, on the fault
    path only): then its name and the last gradient step."""
    bad = nonfinite_tensor(trainer.policy)
    if bad is None and applied:
        return "that gradient step was applied and the weights are finite"
    if bad is None:
        return "the weights are unchanged and finite"
    return (
        f"the policy's tensor {bad!r} already holds NaN or inf (the last gradient step was "
        f"{trainer.state.gradient_step})"
    )


def note_last_checkpoint(trainer: BaseTrainer[Any], exc: BaseException) -> None:
    """At an interrupt or error: close the progress bars, so that what is printed next starts on
    a line of its own, and add ``epochtrain: last checkpoint: <path>`` to ``exc`` (the
    CLI prints it), once: or ``epochtrain: resumed from: <path>`` when that checkpoint is
    not in the trainer's ``checkpoint_dir`` (another run's, which it resumed from)."""
    trainer._progress.close()
    notes = getattr(exc, "__notes__", [])
    last = trainer.last_checkpoint
    if last is None or any(n.startswith((LAST_CHECKPOINT_NOTE, RESUMED_FROM_NOTE)) for n in notes):
        return
    own = trainer.params.checkpoint_dir
    if own is not None and Path(own).resolve() == Path(last).parent.resolve():
        exc.add_note(LAST_CHECKPOINT_NOTE + os.fspath(last))
    else:
        exc.add_note(RESUMED_FROM_NOTE + os.fspath(last))


def close_envs(trainer: BaseTrainer[Any]) -> None:
    """End ``trainer``'s background collect step and thread (a collect step in flight
    finishes first), then close every collector's vector env (an ``AsyncVectorEnv``'s
    worker processes with it, joined). Each is closed even if closing another raised (a
    Ctrl-C, or one relayed by a worker it stopped); the first such error is raised last."""
    closers = [trainer._stop_workers, *(c.close for _, c in trainer._collectors())]
    first: BaseException | None = None
    for close in closers:
        try:
            close()
        except BaseException as exc:  # the others are closed all the same
            first = first or exc
    if first is not None:
        raise first


def run_position(trainer: BaseTrainer[Any]) -> str:
    """Where the run is, in its trainer's unit: an offline run counts gradient steps (it
    takes no env step), an online one env steps."""
    if trainer.kind == "offline":
        return f"gradient step {trainer.state.gradient_step}"
    return f"env step {trainer.state.env_step}"


def with_run_context(
    trainer: BaseTrainer[Any], exc: EnvError, env_step: int, prefix: str = ""
) -> EnvError:
    """Close all of ``trainer``'s envs and its collect thread (:func:`close_envs`: no
    worker process or thread outlives the error), then return ``exc`` again with the
    run's env step and epoch in its message (after ``prefix``, e.g. "the test envs: ")."""
    close_envs(trainer)
    where = run_position(trainer) if trainer.kind == "offline" else f"env step {env_step}"
    error = EnvError(
        f"{prefix}{exc} at {where} (epoch {trainer.state.epoch}); the envs were closed; "
        f"{last_checkpoint_text(trainer)}",
        sub_env=exc.sub_env,
        env_id=exc.env_id,
        env_step=env_step,
    )
    error.__cause__ = exc.__cause__
    return error


def _copy_hook_state(hook: TrainerHook) -> dict[str, Any]:
    """A deep copy of ``hook.state_dict()``; a tensor in it that is part of an autograd
    graph (deepcopy refuses those) raises ``TypeError`` naming the hook and the entry."""
    state = hook.state_dict()
    try:
        return copy.deepcopy(state)
    except RuntimeError as exc:
        where = _graph_tensor(state, "state_dict()")
        if where is None:
            raise
        raise TypeError(
            f"{type(hook).__qualname__}.{where} is a tensor that is part of an autograd graph "
            "(it requires grad and is not a leaf), so the hook's state cannot be copied or "
            "saved, and it keeps the graph alive: store tensor.detach() in the hook (or return "
            "it from state_dict)"
        ) from exc


def _graph_tensor(value: object, path: str) -> str | None:
    """The path of the first non-leaf tensor that requires grad in ``value``, or None."""
    if isinstance(value, torch.Tensor):
        return path if value.requires_grad and value.grad_fn is not None else None
    items: Iterable[tuple[object, object]] = ()
    if isinstance(value, Mapping):
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    for key, item in items:
        found = _graph_tensor(item, f"{path}[{key!r}]")
        if found is not None:
            return found
    return None


def restore_collector(
    trainer: BaseTrainer[Any], collector: Collector, state: dict[str, Any]
) -> None:
    """Restore ``collector`` (one of ``trainer``'s) from ``state`` (its ``state_dict``),
    after the hooks' states were restored.

    Envs saved without a snapshot (``include_env=True`` gave ``env=None``: they do not
    pickle, as an ``AsyncVectorEnv``) cannot continue their episodes: they restart them
    with a reset seeded from the run's seed and env step (deterministic), and then every
    hook of ``trainer`` is told (``TrainerHook.episodes_restarted``), so that no partial
    episode of the abandoned ones (e.g. a running discounted return) carries into the new.
    """
    restart_seed = (trainer.params.seed * 1_000_003 + trainer.state.env_step) % 2**31
    collector.load_state_dict(state, restart_seed=restart_seed)
    if "env" in state and state["env"] is None:  # no snapshot: the episodes restarted
        for hook in trainer.hooks:
            hook.episodes_restarted()


@dataclass
class EpochSnapshot:
    """A trainer's state at the start of an epoch, kept in memory (no copy of the buffer).

    Holds a copy of the policy's and hooks' states, the run counters, the smoothing
    windows, the logger's position and the collectors' states (training envs included
    when they pickle), and a :class:`~epochtrain.data.buffer.BufferMark` per buffer: while
    the snapshot lives, each buffer copies the rows of older data the epoch overwrites
    before it does (:class:`~epochtrain.data.buffer_ring.SavedRows`), so a rewind is exact
    in a full ring too.
    """

    attrs: dict[str, Any]
    policy: dict[str, Any]
    hooks: list[dict[str, Any]]
    logger: dict[str, object]
    collectors: list[tuple[Collector, dict[str, Any]]]
    buffers: list[tuple[ReplayBuffer, BufferMark]]

    @classmethod
    def take(cls, trainer: BaseTrainer[Any]) -> EpochSnapshot:
        """Snapshot ``trainer`` (call between epochs)."""
        # lists and dicts the epoch appends to in place (pending stats, ...) are copied
        attrs = {k: v.copy() if type(v) in (list, dict) else v for k, v in vars(trainer).items()}
        attrs["state"] = dataclasses.replace(trainer.state)
        attrs["_mov_avg"] = copy.deepcopy(trainer._mov_avg)
        collectors = [c for _, c in trainer._collectors()]
        return cls(
            attrs=attrs,
            policy=copy.deepcopy(trainer.policy.state_dict()),
            hooks=[_copy_hook_state(hook) for hook in trainer.hooks],
            logger=trainer.logger.state_dict(),
            collectors=[(c, c.state_dict(include_env=c.buffer is not None)) for c in collectors],
            buffers=[(c.buffer, c.buffer.mark()) for c in collectors if c.buffer is not None],
        )

    def restore(self, trainer: BaseTrainer[Any]) -> None:
        """Put ``trainer`` back as it was when the snapshot was taken.

        Buffer rows written since are dropped and the rows of older data they overwrote
        (in a full ring) are put back: each buffer is as it was, byte for byte.
        """
        trainer.policy.load_state_dict(self.policy)
        for hook, state in zip(trainer.hooks, self.hooks, strict=True):
            hook.load_state_dict(state)
        vars(trainer).clear()
        vars(trainer).update(self.attrs)
        for buffer, mark in self.buffers:
            buffer.rewind(mark)
        trainer.logger.load_state_dict(self.logger)
        # last: envs that cannot restart their episodes leave the rest restored
        for collector, state in self.collectors:
            restore_collector(trainer, collector, state)

    def roll_back(self, trainer: BaseTrainer[Any], exc: KeyboardInterrupt) -> None:
        """Ctrl-C inside the epoch: end the collect thread, :meth:`restore` ``trainer``
        (back to the last complete epoch) and say so, and where the last checkpoint is, in
        ``exc``'s notes.

        Envs that cannot restart their episodes (the Ctrl-C of a terminal reaches an
        ``AsyncVectorEnv``'s worker processes too, and stops them) are closed, all of them
        (:func:`close_envs`), and a note says so.
        """
        trainer._stop_workers()  # no collect step may use the envs while they restart
        try:
            self.restore(trainer)
        except BaseException as failure:  # e.g. the Ctrl-C a stopped worker relays
            with contextlib.suppress(BaseException):  # exc, already raised, says it all
                close_envs(trainer)
            why = (
                "the Ctrl-C stopped their worker processes too"
                if isinstance(failure, KeyboardInterrupt)
                else f"{type(failure).__name__}: {failure}"
            )
            exc.add_note(
                f"epochtrain: the envs were closed: they could not restart their episodes "
                f"({why}); this trainer cannot collect any more, a new one can resume"
            )
        exc.add_note(
            f"epochtrain: the trainer is back at the end of epoch {trainer.state.epoch}; "
            "trainer.save_checkpoint(path) saves it"
        )
        note_last_checkpoint(trainer, exc)
