"""Validation of the trainers' parameters: each error names the parameter and the fix."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from epochtrain.algorithms.base import Policy
from epochtrain.data.collector import Collector
from epochtrain.logger import BaseLogger
from epochtrain.trainer.hooks import TrainerHook

__all__ = ["check_base_params", "check_hooks", "check_path", "check_positive_int"]


def check_positive_int(name: str, value: object) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_base_params(
    *,
    policy: object,
    test_collector: object,
    max_epoch: object,
    step_per_epoch: object,
    episode_per_test: object,
    callbacks: Mapping[str, object],
    test_in_train: bool,
    test_before_train: bool,
    seed: object,
    logger: object,
) -> None:
    """Check the parameters every trainer shares (see :class:`BaseTrainer`)."""
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must be an epochtrain Policy, got {type(policy).__name__}")
    check_positive_int("max_epoch", max_epoch)
    check_positive_int("step_per_epoch", step_per_epoch)
    check_positive_int("episode_per_test", episode_per_test)
    for name, fn in callbacks.items():
        if fn is not None and not callable(fn):
            raise ValueError(f"{name} must be callable or None, got {fn!r}")
    if test_collector is not None and not isinstance(test_collector, Collector):
        raise TypeError(
            f"test_collector must be a Collector or None, got {type(test_collector).__name__}"
        )
    if test_collector is None:
        needs_test: dict[str, Any] = {
            "stop_fn": callbacks.get("stop_fn"),
            "save_best_fn": callbacks.get("save_best_fn"),
            "test_in_train": test_in_train or None,
            "test_before_train": test_before_train or None,
        }
        for name, value in needs_test.items():
            if value is not None:
                raise ValueError(
                    f"{name} is set but test_collector is None: {name} needs test "
                    "returns; pass test_collector=Collector(policy, test_envs, "
                    "exploration=False)"
                )
    if test_collector is not None and test_collector.exploration:
        raise ValueError(
            "test_collector has exploration=True; tests must be deterministic: build it "
            "with Collector(policy, test_envs, exploration=False)"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if logger is not None and not isinstance(logger, BaseLogger):
        raise TypeError(f"logger must be a BaseLogger or None, got {type(logger).__name__}")


def check_hooks(hooks: object) -> list[TrainerHook]:
    """``hooks`` as a list; each must be a :class:`TrainerHook`."""
    if hooks is None:
        return []
    if not isinstance(hooks, Sequence) or isinstance(hooks, str):
        raise TypeError(f"hooks must be a list of TrainerHook objects, got {hooks!r}")
    for i, hook in enumerate(hooks):
        if not isinstance(hook, TrainerHook):
            raise TypeError(
                f"hooks[{i}] must be a TrainerHook (see epochtrain.trainer.hooks), got {hook!r}"
            )
    return list(hooks)


def check_path(name: str, value: object, *, must_exist: bool = False) -> Path | None:
    """``value`` as a ``Path`` (``None`` stays ``None``); a file is not a directory."""
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike) or os.fspath(value) == "":
        raise ValueError(f"{name} must be a non-empty str or os.PathLike or None, got {value!r}")
    path = Path(os.fspath(value))
    if must_exist and not path.exists():
        raise FileNotFoundError(
            f"{name}={os.fspath(path)!r} does not exist: pass a checkpoint directory (or the "
            "checkpoint_dir holding them)"
        )
    if not must_exist and path.is_file():
        raise ValueError(f"{name} must be a directory, got the file {os.fspath(path)!r}")
    return path
