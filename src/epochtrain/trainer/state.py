"""A trainer's resumable state: what ``BaseTrainer.state_dict`` holds and how it is restored.

Saved between epochs: the policy (weights, optimizers and the algorithm's extra state),
the counters and best record, the trainer's random streams (python, numpy, torch), the
moving-average windows of the smoothed losses, the logger's position, every hook's state
and the collectors' in-flight episodes (the online trainers add the training collector,
its envs and the replay buffer).

Restoring is all or nothing: :func:`check_trainer_state` checks a state against the
trainer without changing it, :func:`restore_on_error` puts the trainer back if applying
fails anyway, and the logger (which rewrites its files) is restored last.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import warnings
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from epochtrain.logger import LoggerResumeError
from epochtrain.stats import MovAvg, RunState

if TYPE_CHECKING:
    from epochtrain.algorithms.base import Policy
    from epochtrain.trainer.base import BaseTrainer

__all__ = [
    "FLAGS",
    "check_policy_state",
    "check_trainer_state",
    "load_logger_state",
    "load_policy_state",
    "load_trainer_state",
    "restore_on_error",
    "rng_scope",
    "trainer_state",
]

FLAGS = ("stop_reason", "last_test_stat", "_started", "_finished")

_INT_COUNTERS = tuple(f.name for f in dataclasses.fields(RunState) if f.type in ("int", int))
"""Trainer attributes saved beside the :class:`~epochtrain.stats.RunState` counters."""


@contextmanager
def rng_scope(trainer: BaseTrainer[Any]) -> Iterator[None]:
    """Swap the trainer's random streams (python, numpy, torch) in, and out on exit.

    The first time, the streams are seeded with ``trainer.params.seed``; the caller's streams are
    restored on exit, so zipped trainers do not disturb each other.
    """
    outer = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    if trainer._rng_state is None:
        random.seed(trainer.params.seed)
        np.random.seed(trainer.params.seed)
        torch.manual_seed(trainer.params.seed)
    else:
        random.setstate(trainer._rng_state["python"])
        np.random.set_state(trainer._rng_state["numpy"])
        torch.set_rng_state(trainer._rng_state["torch"])
    try:
        yield
    finally:
        trainer._rng_state = {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
        }
        random.setstate(outer[0])
        np.random.set_state(outer[1])
        torch.set_rng_state(outer[2])


def trainer_state(trainer: BaseTrainer[Any]) -> dict[str, Any]:
    """The state every trainer has (see the module docstring)."""
    test = trainer.test_collector
    return {
        "policy": trainer.policy.state_dict(),
        "counters": {
            **dataclasses.asdict(trainer.state),
            **{name: getattr(trainer, name) for name in FLAGS},
        },
        "rng": trainer._rng_state,
        "mov_avg": {key: avg.state_dict() for key, avg in trainer._mov_avg.items()},
        "logger": trainer.logger.state_dict(),
        "hooks": [
            {"type": type(hook).__qualname__, "state": hook.state_dict()} for hook in trainer.hooks
        ],
        "test_collector": None if test is None else test.state_dict(),
    }


_TRAINER_KEYS = ("policy", "counters", "rng", "mov_avg", "logger", "hooks", "test_collector")


def check_policy_state(policy: Policy[Any], state: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the entry if ``state`` is not a state of ``policy``'s
    architecture (keys, tensor shapes and dtypes, optimizer names); changes nothing."""
    if not isinstance(state, Mapping):
        raise ValueError(f"the policy state is a {type(state).__name__}, not a state_dict")
    own = policy.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        raise ValueError(
            f"the policy state lacks {missing} and has the unexpected entries {unexpected}: "
            f"it is not a state of this {type(policy).__name__}'s networks"
        )
    for key, tensor in own.items():
        saved = state[key]
        if isinstance(tensor, torch.Tensor) and (
            not isinstance(saved, torch.Tensor)
            or saved.shape != tensor.shape
            or saved.dtype != tensor.dtype
        ):
            got = (
                f"{tuple(saved.shape)} {saved.dtype}" if isinstance(saved, torch.Tensor) else saved
            )
            note = (
                policy.state_mismatch_note(tensor.shape, saved.shape)
                if isinstance(saved, torch.Tensor)
                else None
            )
            raise ValueError(
                f"policy tensor {key!r} is {tuple(tensor.shape)} {tensor.dtype} here, the "
                f"state has {got}: "
                + (note or "build the policy with the checkpointed run's settings")
            )
    extra = state.get("_extra_state")
    if isinstance(extra, Mapping) and isinstance(extra.get("optimizers"), Mapping):
        saved_opts, own_opts = sorted(extra["optimizers"]), sorted(policy.optimizers)
        if saved_opts != own_opts:
            raise ValueError(
                f"the policy state holds optimizers {saved_opts}, this policy has {own_opts}"
            )


def load_policy_state(policy: Policy[Any], state: Mapping[str, Any]) -> None:
    """``policy.load_state_dict(state)``, undone if it fails half-way."""
    backup = copy.deepcopy(policy.state_dict())
    try:
        policy.load_state_dict(state)
    except BaseException:
        policy.load_state_dict(backup)
        raise


def check_trainer_state(trainer: BaseTrainer[Any], state: Mapping[str, Any]) -> None:
    """Raise (``ValueError``, naming what differs) unless :func:`load_trainer_state` can
    restore ``state`` into ``trainer``; changes nothing."""
    missing = [key for key in _TRAINER_KEYS if key not in state]
    if missing:
        raise ValueError(f"the trainer state lacks the entries {missing}")
    saved_hooks = [entry["type"] for entry in state["hooks"]]
    own_hooks = [type(hook).__qualname__ for hook in trainer.hooks]
    if saved_hooks != own_hooks:
        raise ValueError(
            f"the checkpoint holds the states of hooks {saved_hooks}, this trainer has "
            f"{own_hooks}: register the same hooks in the same order"
        )
    counters = state["counters"]
    expected = {field.name for field in dataclasses.fields(RunState)} | set(FLAGS)
    if not isinstance(counters, Mapping) or set(counters) != expected:
        got = sorted(counters) if isinstance(counters, Mapping) else counters
        raise ValueError(f"the trainer state's counters are {got}, expected {sorted(expected)}")
    for name in _INT_COUNTERS:
        if isinstance(counters[name], bool) or not isinstance(counters[name], int):
            raise ValueError(f"the counter {name!r} is {counters[name]!r}, not an int")
    check_policy_state(trainer.policy, state["policy"])
    if isinstance(state.get("logger"), Mapping):
        trainer.logger.check_resume(state["logger"])  # a LoggerResumeError refuses it all
    test, saved_test = trainer.test_collector, _test_collector_state(trainer, state)
    if test is not None and saved_test is not None:
        test.check_state_dict(saved_test)


def _test_collector_state(trainer: BaseTrainer[Any], state: Mapping[str, Any]) -> Any:
    """The saved test-collector state to restore, or None to keep the trainer's own.

    Every test step resets the test envs with a seed drawn from the trainer's stream
    (``BaseTrainer._test_step``), so the test collector's in-flight episodes are not part
    of what was computed: a resume with another number of test envs (``num_test_envs``,
    or ``episode_per_test``, which caps it) leaves them out instead of refusing.
    """
    test, saved = trainer.test_collector, state["test_collector"]
    if test is None or saved is None:
        return None
    if isinstance(saved, Mapping) and isinstance(saved.get("ep_return"), np.ndarray):
        ep_return: np.ndarray = saved["ep_return"]
        if ep_return.ndim == 1 and len(ep_return) != test.num_envs:
            return None
    return saved


@contextmanager
def restore_on_error(trainer: BaseTrainer[Any]) -> Iterator[None]:
    """Put ``trainer`` back as it was if the block raises.

    Saved: the policy (a copy of its state), every hook's state, the trainer's own
    attributes, and the attributes of its collectors and their buffers (whose
    ``load_state_dict`` replaces their attributes rather than writing into them).
    """
    policy = copy.deepcopy(trainer.policy.state_dict())
    hooks = [copy.deepcopy(hook.state_dict()) for hook in trainer.hooks]
    collectors = [collector for _, collector in trainer._collectors()]
    parts = [*collectors, *(c.buffer for c in collectors if c.buffer is not None)]
    objects = [trainer, *parts]
    attrs = [dict(vars(obj)) for obj in objects]
    try:
        yield
    except BaseException:
        trainer.policy.load_state_dict(policy)
        for hook, hook_state in zip(trainer.hooks, hooks, strict=True):
            hook.load_state_dict(hook_state)
        for obj, saved in zip(objects, attrs, strict=True):
            vars(obj).clear()
            vars(obj).update(saved)
        raise


def load_trainer_state(trainer: BaseTrainer[Any], state: Mapping[str, Any]) -> None:
    """Restore what :func:`trainer_state` returned, except the logger (see
    :func:`load_logger_state`), into an identically built trainer; check it first with
    :func:`check_trainer_state` and wrap it in :func:`restore_on_error`."""
    trainer.policy.load_state_dict(state["policy"])
    for hook, entry in zip(trainer.hooks, state["hooks"], strict=True):
        hook.load_state_dict(entry["state"])
    counters = state["counters"]
    trainer.state = RunState(**{f.name: counters[f.name] for f in dataclasses.fields(RunState)})
    for name in FLAGS:
        setattr(trainer, name, counters[name])
    if _goes_on(trainer):
        trainer._finished, trainer.stop_reason = False, None
    trainer._rng_state = state["rng"]
    trainer._mov_avg = defaultdict(MovAvg)
    for key, avg_state in state["mov_avg"].items():
        trainer._mov_avg[key].load_state_dict(avg_state)
    saved_test = _test_collector_state(trainer, state)
    if trainer.test_collector is not None and saved_test is not None:
        trainer.test_collector.load_state_dict(saved_test)


def _goes_on(trainer: BaseTrainer[Any]) -> bool:
    """Whether a run that had finished goes on under the resumed trainer's settings: it
    ended by ``max_epoch``, or by ``stop_fn`` that no longer holds at the saved best test
    return (``stop_fn`` None, or a higher goal), and its ``max_epoch`` allows more epochs.
    Other endings (a hook's ``request_stop``, ``on_nonfinite``) stay final."""
    if trainer.state.epoch >= trainer.params.max_epoch:
        return False
    if trainer.stop_reason == "stop_fn":
        return not trainer._stop_fn_fired()
    return trainer.stop_reason == "max_epoch"


def load_logger_state(trainer: BaseTrainer[Any], state: Mapping[str, Any]) -> None:
    """Restore the logger's position; last, because file loggers rewrite their files."""
    try:
        trainer.logger.load_state_dict(state["logger"])
    except LoggerResumeError:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        warnings.warn(
            f"the logger position was not restored ({exc}): this trainer's logger differs "
            "from the checkpointed run's",
            stacklevel=3,
        )
