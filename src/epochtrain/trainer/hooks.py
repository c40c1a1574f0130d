"""Hook points of the training loop and the interface of a trainer hook.

A *hook point* is a named place in the loop; ``trainer.register_op(point, fn)`` adds a
function there, and the trainer calls every function of a point, in registration order,
through a table (``dict`` of point to list). A *hook* is an object that registers its
functions itself (:meth:`TrainerHook.register`) and whose state travels in checkpoints
(:meth:`TrainerHook.state_dict` / :meth:`TrainerHook.load_state_dict`).

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
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, cast

from epochtrain.data.batch import Batch
from epochtrain.data.collector import Collector
from epochtrain.logger import BaseLogger, Scope

if TYPE_CHECKING:
    from epochtrain.trainer.base import BaseTrainer
    from epochtrain.trainer.online import OnlineTrainer

__all__ = [
    "DATA_POINTS",
    "HOOK_POINTS",
    "LOG_POINTS",
    "HookOp",
    "HookTable",
    "TrainerHook",
    "online_collector",
]

HOOK_POINTS: Final = (
    "epoch_start",
    "batch_process",
    "pre_steps_log",
    "pre_optim_steps",
    "process_optim_batch",
    "optimizer",
    "post_loss",
    "post_optim",
    "post_optim_log",
    "post_steps",
    "post_steps_log",
    "test_end",
    "epoch_end",
)
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
    :meth:`reset`. All state lives on the instance.
    """

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


class HookTable:
    """The functions registered at each hook point, called in registration order."""

    def __init__(self) -> None:
        self.ops: dict[str, list[HookOp]] = {point: [] for point in HOOK_POINTS}

    def add(self, point: str, op: HookOp) -> None:
        """Append ``op`` to ``point``; unknown points and non-callables raise."""
        if point not in self.ops:
            raise ValueError(f"unknown hook point {point!r}; the points are {list(HOOK_POINTS)}")
        if not callable(op):
            raise TypeError(f"op for hook point {point!r} must be callable, got {op!r}")
        self.ops[point].append(op)

    def __getitem__(self, point: str) -> list[HookOp]:
        return self.ops[point]

    def call(self, point: str, *args: Any) -> None:
        """Call every op of ``point`` with ``args``."""
        for op in self.ops[point]:
            op(*args)

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
        as ``<scope>/<key>`` at ``step``, and put it in ``postfix`` if it asks ``log_pbar``."""
        for op in self.ops[point]:
            out: Mapping[str, Any] | None = op(*args)
            if not out:
                continue
            values = {k: float(v) for k, v in out.items() if k != "log_pbar"}
            logger.log_data(scope, step, {f"{scope}/{k}": v for k, v in values.items()})
            if out.get("log_pbar", False):
                postfix.update({k: f"{v:.3g}" for k, v in values.items()})

    def process(self, point: str, batch: Batch) -> Batch:
        """Pass ``batch`` through every op of a data point; returns the last op's batch."""
        for op in self.ops[point]:
            batch = op(batch)
        return batch


def online_collector(trainer: BaseTrainer[Any], hook: str) -> Collector:
    """The trainer's training collector; the offline trainer has none."""
    if trainer.kind == "offline":
        raise ValueError(
            f"{hook} needs an online trainer (OnpolicyTrainer or OffpolicyTrainer): "
            f"{type(trainer).__name__} collects no data"
        )
    online = cast("OnlineTrainer[Any]", trainer)  # every trainer of an online kind is one
    return online.train_collector
