"""Hook points of the training loop and the interface of a trainer hook.

A *hook point* is a named place in the loop; ``trainer.register_op(point, fn)`` adds a
function there, and the trainer calls every function of a point, in registration order,
through a table (``dict`` of point to list). A *hook* is an object that registers its
functions itself (:meth:`TrainerHook.register`) and whose state travels in checkpoints
(:meth:`TrainerHook.state_dict` / :meth:`TrainerHook.load_state_dict`); the settings that
change what it computes (:meth:`TrainerHook.resume_settings`, e.g. ``GradClip``'s
``max_norm``) are recorded beside them, and a resume with other values is refused.

Where each point fires, what its functions receive and what they return (the full table,
with examples, is ``docs/hooks.md``):

* ``epoch_start(epoch)``: an epoch begins → nothing.
* ``batch_process(batch)``: the rows of a collect step, ``Batch [time, env]`` → the
  batch (on-policy: the rollout the update learns from).
* ``pre_steps_log(batch)``: the processed collected batch → a dict to log (``train/``).
* ``pre_optim_steps()``: an update step's gradient steps are about to run → nothing.
* ``process_optim_batch(batch)``: a minibatch → the minibatch ``learn`` receives.
* ``optimizer(name, optimizer)``: between ``backward`` and ``step`` → nothing.
* ``post_loss(stats)``: a gradient step's ``TrainingStats`` → nothing.
* ``post_optim()``: a gradient step is done → nothing.
* ``post_optim_log(stats)``: a gradient step's ``TrainingStats`` → a dict to log
  (``update/``).
* ``post_steps()``: an update step is done → nothing.
* ``post_steps_log(batch)``: the processed collected batch → a dict to log (``train/``).
* ``test_end(stats)``: a test step's ``CollectStats`` → nothing.
* ``epoch_end(stats)``: the epoch's ``EpochStats`` → nothing.

A dict returned by a logging point is written through the trainer's logger at the
current step of its scope (env steps for ``train/``, gradient steps for ``update/``); an
entry ``"log_pbar": True`` also shows its values in the progress bar. The collected-batch
points (``batch_process``, ``pre_steps_log``, ``post_steps_log``) fire in the online
trainers only; the offline trainer collects nothing.

:class:`HookTable` checks what each function returns (a non-empty ``Batch`` whose fields
fit the batch it received at a data point, a ``dict`` of ``str`` to number or ``None`` at
a logging point) and notes on any exception a function raises which function and point it
was; a hook object is registered on one trainer only (:func:`claim_hook`), and an error in
its ``register`` is noted (:func:`register_claimed`). The trainer's callbacks
(``train_fn``, ``test_fn``, ``stop_fn``, ``save_best_fn``) get the same arity check
(:func:`check_callbacks`) and notes (:func:`call_callback`).
"""

from __future__ import annotations

import gc
import inspect
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from epochtrain.data.batch import Batch
from epochtrain.data.collector import Collector
from epochtrain.logger import BaseLogger, Scope
from epochtrain.trainer.batch_checks import check_fields, value_kind

if TYPE_CHECKING:
    from epochtrain.trainer.base import BaseTrainer
    from epochtrain.trainer.online import OnlineTrainer

__all__ = [
    "CALLBACK_ARGS",
    "DATA_POINTS",
    "HOOK_ARGS",
    "HOOK_POINTS",
    "LOG_POINTS",
    "HookOp",
    "HookTable",
    "TrainerHook",
    "call_callback",
    "check_callbacks",
    "claim_hook",
    "online_collector",
    "register_claimed",
]

HOOK_ARGS: Final[dict[str, tuple[str, ...]]] = {
    "epoch_start": ("epoch",),
    "batch_process": ("batch",),
    "pre_steps_log": ("batch",),
    "pre_optim_steps": (),
    "process_optim_batch": ("batch",),
    "optimizer": ("name", "optimizer"),
    "post_loss": ("stats",),
    "post_optim": (),
    "post_optim_log": ("stats",),
    "post_steps": (),
    "post_steps_log": ("batch",),
    "test_end": ("stats",),
    "epoch_end": ("stats",),
}
"""The positional arguments each hook point passes its functions, in loop order."""

HOOK_POINTS: Final = tuple(HOOK_ARGS)
"""Every hook point, in the order the loop reaches them within an epoch."""

DATA_POINTS: Final = ("batch_process", "process_optim_batch")
"""Points whose functions receive a :class:`~epochtrain.data.Batch` and return one."""

LOG_POINTS: Final = ("pre_steps_log", "post_optim_log", "post_steps_log")
"""Points whose functions may return a ``dict[str, float]`` to log (or ``None``)."""

HookOp = Callable[..., Any]
"""A function registered at a hook point; its signature depends on the point."""


class TrainerHook(ABC):
    """Base of hook objects: register functions at points, save and restore state.

    Subclasses override :meth:`register` (calling ``trainer.register_op``) and, when they
    keep state that affects the run, :meth:`state_dict`, :meth:`load_state_dict` and
    :meth:`reset`; optionally :meth:`resume_settings`, so that a resume with other
    constructor arguments is refused. All state lives on the instance.

    A hook object belongs to one trainer: registering it twice, or on a second trainer,
    is refused (:func:`claim_hook`).
    """

    _epochtrain_trainer: weakref.ref[BaseTrainer[Any]] | None = None
    """The trainer this hook is registered on, set by :func:`claim_hook` (a class-level
    default, so subclasses need not call ``super().__init__()``; weak, so a trainer that
    is gone releases its hooks)."""

    @abstractmethod
    def register(self, trainer: BaseTrainer[Any]) -> None:
        """Add this hook's functions to ``trainer``'s hook points."""

    def state_dict(self) -> dict[str, Any]:
        """State to save in checkpoints (default: none)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # noqa: B027  # optional
        """Restore what :meth:`state_dict` returned (default: nothing to restore)."""

    def reset(self) -> None:  # noqa: B027  # optional: stateless hooks have nothing to reset
        """Forget the state of the current run (``trainer.reset()`` calls it)."""

    def episodes_restarted(self) -> None:  # noqa: B027  # optional
        """The training envs abandoned their episodes for new ones (a resume or a Ctrl-C
        roll-back of envs that do not pickle, after the hook states were restored): forget
        per-episode state (default: none; ``RewardNormalizer`` zeroes its running returns)."""

    def resume_settings(self) -> dict[str, Any]:
        """The settings of this hook that change what a run computes (JSON values).

        A checkpoint records them; loading it into a trainer whose hook returns other
        values raises ``SettingsMismatchError`` naming the hook, the setting and both
        values. Default: none, so a hook that does not override this is not compared;
        the built-in hooks return :func:`constructor_settings` (a user hook can too).
        """
        return {}


class HookTable:
    """The functions registered at each hook point, called in registration order.

    Each function's arity is checked against its point once, when it is added; each call
    checks only what the function returned (``isinstance``), and an exception raised by a
    function gets a note naming it and its point.
    """

    def __init__(self) -> None:
        self.ops: dict[str, list[HookOp]] = {point: [] for point in HOOK_POINTS}

    def add(self, point: str, op: HookOp) -> None:
        """Append ``op`` to ``point``; unknown points, non-callables and functions that
        cannot take the point's arguments raise."""
        if point not in self.ops:
            raise ValueError(f"unknown hook point {point!r}; the points are {list(HOOK_POINTS)}")
        if not callable(op):
            raise TypeError(f"op for hook point {point!r} must be callable, got {op!r}")
        _check_arity(point, op)
        self.ops[point].append(op)

    def __getitem__(self, point: str) -> list[HookOp]:
        return self.ops[point]

    def call(self, point: str, *args: Any) -> None:
        """Call every op of ``point`` with ``args``."""
        for op in self.ops[point]:
            try:
                op(*args)
            except Exception as exc:
                exc.add_note(_raised_in(op, point))
                raise

    def log(
        self,
        point: str,
        logger: BaseLogger,
        scope: Scope,
        step: int,
        postfix: dict[str, str],
        *args: Any,
    ) -> None:
        """Call the ops of a logging point; write each dict they return through ``logger``
        as ``<scope>/<key>`` at ``step``, and put it in ``postfix`` if it asks ``log_pbar``.

        An op returns a ``dict`` of ``str`` to number (or ``None``); anything else raises
        ``TypeError`` naming the op and the point."""
        for op in self.ops[point]:
            try:
                out = op(*args)
            except Exception as exc:
                exc.add_note(_raised_in(op, point))
                raise
            if out is None:
                continue
            if not isinstance(out, Mapping):
                raise TypeError(
                    f"hook op {_op_name(op)} at {point!r} returned {value_kind(out)}; a logging "
                    "point's op returns a dict of str to number (e.g. {'loss': 0.5}) or None"
                )
            if not out:
                continue
            values = {k: _log_value(op, point, k, v) for k, v in out.items() if k != "log_pbar"}
            logger.log_data(scope, step, {f"{scope}/{k}": v for k, v in values.items()})
            if out.get("log_pbar", False):
                postfix.update({k: f"{v:.3g}" for k, v in values.items()})

    def process(self, point: str, batch: Batch) -> Batch:
        """Pass ``batch`` through every op of a data point; returns the last op's batch.

        Each op must return a ``Batch``, and a non-empty one when it received one; anything
        else (``None``: a forgotten ``return batch``) raises naming the op and the point.
        So does a Batch whose fields no longer fit together (:func:`_check_fields`): a field
        the op received that is ``None`` now, a field whose rows differ from the others' or
        whose other dimensions differ from what the op received (``rew[:1]`` would be
        broadcast over the batch), or a dtype of another kind (``rew.long()``)."""
        for op in self.ops[point]:
            try:
                out = op(batch)
            except Exception as exc:
                exc.add_note(_raised_in(op, point))
                raise
            if not isinstance(out, Batch):
                raise TypeError(
                    f"hook op {_op_name(op)} at {point!r} returned {value_kind(out)}, not a Batch: "
                    f"return the Batch ({point!r} learns from what its ops return; "
                    "return the batch it received to leave it unchanged)"
                )
            if out.rew.numel() == 0 and batch.rew.numel() != 0:
                raise ValueError(
                    f"hook op {_op_name(op)} at {point!r} returned an empty Batch (shape "
                    f"{tuple(out.shape)}) for a batch of shape {tuple(batch.shape)}: return "
                    "the Batch with at least one row"
                )
            if out is not batch:
                check_fields(_op_name(op), point, batch, out)
            batch = out
        return batch


def _op_name(op: HookOp) -> str:
    name = getattr(op, "__qualname__", None)
    return name if isinstance(name, str) else repr(op)


def _raised_in(op: HookOp, point: str) -> str:
    return f"epochtrain: raised by hook op {_op_name(op)} at hook point {point!r}"


def _log_value(op: HookOp, point: str, key: object, value: Any) -> float:
    """``value`` of a logging dict as a float (numbers, numpy scalars, one-element
    tensors); ``TypeError`` naming the op, the point and the key otherwise."""
    number: float | None = None
    if type(value) is float or type(value) is int:
        number = float(value)
    elif not isinstance(value, str | bytes):  # float("1.5") would pass a string
        try:
            number = float(value)
        except (TypeError, ValueError):  # not a number, or a tensor of several elements
            number = None
    if number is None or not isinstance(key, str):
        what = f"the key {key!r}" if not isinstance(key, str) else f"{key!r}: {value_kind(value)}"
        raise TypeError(
            f"hook op {_op_name(op)} at {point!r} returned a dict holding {what}; a logging "
            "dict maps str keys to numbers (int, float, or a one-element tensor or array)"
        )
    return number


def _check_arity(point: str, op: HookOp) -> None:
    """Refuse ``op`` at ``point`` if it cannot take the point's positional arguments."""
    where = f"cannot be registered at {point!r}: the point"
    _check_signature(op, HOOK_ARGS[point], point, f"hook op {_op_name(op)}", where)


def _check_signature(
    fn: Callable[..., Any], args: tuple[str, ...], call: str, label: str, where: str
) -> None:
    """Refuse ``fn`` (named ``label``) unless it takes ``args`` positionally, as it is
    called (``call(*args)``, by ``where``)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: trusted
        return
    try:
        signature.bind(*args)
    except TypeError as exc:
        raise TypeError(
            f"{label}{signature} {where} calls it as {call}({', '.join(args)}) ({exc}); "
            f"give it {len(args)} positional argument{'' if len(args) == 1 else 's'}"
        ) from None


CALLBACK_ARGS: Final[dict[str, tuple[str, ...]]] = {
    "train_fn": ("epoch", "env_step"),
    "test_fn": ("epoch", "env_step"),
    "stop_fn": ("best_test_return",),
    "save_best_fn": ("policy",),
}
"""The positional arguments the trainer passes each callback."""

_R = TypeVar("_R")


def check_callbacks(callbacks: Mapping[str, object]) -> None:
    """Refuse a callback (``train_fn``, ``test_fn``, ``stop_fn``, ``save_best_fn``) that
    is not callable or cannot take the arguments the trainer passes it (checked once, when
    the trainer is built, as :meth:`HookTable.add` checks hook ops)."""
    for name, fn in callbacks.items():
        if fn is None:
            continue
        if not callable(fn):
            raise ValueError(f"{name} must be callable or None, got {fn!r}")
        where = "is refused: the trainer"
        _check_signature(fn, CALLBACK_ARGS[name], name, f"{name}={_op_name(fn)}", where)


def call_callback(name: str, fn: Callable[..., _R], *args: Any) -> _R:
    """``fn(*args)``; an exception it raises gains a note naming the callback."""
    try:
        return fn(*args)
    except Exception as exc:
        wanted = f"{name}({', '.join(CALLBACK_ARGS[name])})"
        exc.add_note(f"epochtrain: raised by {name} {_op_name(fn)}, called as {wanted}")
        raise


def register_claimed(hook: TrainerHook, trainer: BaseTrainer[Any]) -> None:
    """``hook.register(trainer)`` for a hook :func:`claim_hook` gave ``trainer``. If it
    raises, the exception gains a note naming the hook, the ops it had added are removed
    and the hook is released (it can be fixed and registered again)."""
    table, optimizer_hooks = trainer._ops, trainer.policy.optimizer_hooks
    sizes = {point: len(ops) for point, ops in table.ops.items()}
    n_optimizer_hooks = len(optimizer_hooks)
    try:
        hook.register(trainer)
    except Exception as exc:
        for point, size in sizes.items():
            del table.ops[point][size:]
        del optimizer_hooks[n_optimizer_hooks:]
        hook._epochtrain_trainer = None
        exc.add_note(
            f"epochtrain: raised by {type(hook).__qualname__}.register (the hook object "
            "was being registered on the trainer; it was not)"
        )
        raise


def claim_hook(hook: TrainerHook, trainer: BaseTrainer[Any]) -> None:
    """Record ``trainer`` as ``hook``'s trainer; refuse a hook registered on it already
    (its ops would run twice per point) or on another trainer still alive (the two runs
    would mix one state)."""
    owner = _owner(hook)
    name = type(hook).__qualname__
    if owner is trainer:
        raise ValueError(
            f"this {name} hook object is already registered on this trainer: registered "
            f"twice, its ops would run twice at each point; register it once (hooks=[...] "
            "or trainer.register_hook, not both), or pass a new hook object"
        )
    if owner is not None:
        gc.collect()  # error path only: a trainer no one holds may wait in a reference cycle
        owner = _owner(hook)
    if owner is not None:
        raise ValueError(
            f"this {name} hook object is already registered on another trainer "
            f"({type(owner).__name__}): one hook shared by two trainers mixes their "
            f"states; build a new hook object for each trainer (hooks=[{name}(...)])"
        )
    hook._epochtrain_trainer = weakref.ref(trainer)


def _owner(hook: TrainerHook) -> BaseTrainer[Any] | None:
    ref = hook._epochtrain_trainer
    return None if ref is None else ref()


def online_collector(trainer: BaseTrainer[Any], hook: str) -> Collector:
    """The trainer's training collector; the offline trainer has none."""
    if trainer.kind == "offline":
        raise ValueError(
            f"{hook} needs an online trainer (OnpolicyTrainer or OffpolicyTrainer): "
            f"{type(trainer).__name__} collects no data"
        )
    online = cast("OnlineTrainer[Any]", trainer)  # every trainer of an online kind is one
    return online.train_collector
