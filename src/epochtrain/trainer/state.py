"""A trainer's resumable state: what ``BaseTrainer.state_dict`` holds and how it is restored.

Saved between epochs: the policy (weights, optimizers and the algorithm's extra state),
the counters and best record, the trainer's random streams (python, numpy, torch), the
moving-average windows of the smoothed losses, the logger's position, every hook's state
and the collectors' in-flight episodes (the online trainers add the training collector,
its envs and the replay buffer).
"""

from __future__ import annotations

import random
import warnings
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from epochtrain.stats import MovAvg

if TYPE_CHECKING:
    from epochtrain.trainer.base import BaseTrainer

__all__ = ["COUNTERS", "load_trainer_state", "rng_scope", "trainer_state"]

COUNTERS = (
    "epoch",
    "env_step",
    "gradient_step",
    "train_episode",
    "test_step",
    "test_episode",
    "best_test_return",
    "best_test_return_std",
    "best_epoch",
    "collect_time",
    "update_time",
    "test_time",
    "total_time",
    "stop_reason",
    "last_test_stat",
    "_started",
    "_finished",
)
"""Trainer attributes saved as they are."""


@contextmanager
def rng_scope(trainer: BaseTrainer[Any]) -> Iterator[None]:
    """Swap the trainer's random streams (python, numpy, torch) in, and out on exit.

    The first time, the streams are seeded with ``trainer.seed``; the caller's streams are
    restored on exit, so zipped trainers do not disturb each other.
    """
    outer = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    if trainer._rng_state is None:
        random.seed(trainer.seed)
        np.random.seed(trainer.seed)
        torch.manual_seed(trainer.seed)
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
        "counters": {name: getattr(trainer, name) for name in COUNTERS},
        "rng": trainer._rng_state,
        "mov_avg": {key: avg.state_dict() for key, avg in trainer._mov_avg.items()},
        "logger": trainer.logger.state_dict(),
        "hooks": [
            {"type": type(hook).__qualname__, "state": hook.state_dict()} for hook in trainer.hooks
        ],
        "test_collector": None if test is None else test.state_dict(),
    }


def load_trainer_state(trainer: BaseTrainer[Any], state: Mapping[str, Any]) -> None:
    """Restore what :func:`trainer_state` returned into an identically built trainer."""
    saved_hooks = [entry["type"] for entry in state["hooks"]]
    own_hooks = [type(hook).__qualname__ for hook in trainer.hooks]
    if saved_hooks != own_hooks:
        raise ValueError(
            f"the checkpoint holds the states of hooks {saved_hooks}, this trainer has "
            f"{own_hooks}: register the same hooks in the same order"
        )
    trainer.policy.load_state_dict(state["policy"])
    for hook, entry in zip(trainer.hooks, state["hooks"], strict=True):
        hook.load_state_dict(entry["state"])
    for name, value in state["counters"].items():
        setattr(trainer, name, value)
    if trainer.stop_reason == "max_epoch" and trainer.epoch < trainer.max_epoch:
        # resumed with a larger max_epoch: the run goes on
        trainer._finished, trainer.stop_reason = False, None
    trainer._rng_state = state["rng"]
    trainer._mov_avg = defaultdict(MovAvg)
    for key, avg_state in state["mov_avg"].items():
        trainer._mov_avg[key].load_state_dict(avg_state)
    try:
        trainer.logger.load_state_dict(state["logger"])
    except (ValueError, KeyError, TypeError) as exc:
        warnings.warn(
            f"the logger position was not restored ({exc}): this trainer's logger differs "
            "from the checkpointed run's",
            stacklevel=3,
        )
    if trainer.test_collector is not None and state["test_collector"] is not None:
        trainer.test_collector.load_state_dict(state["test_collector"])
