"""The checks of a spec and of make_trainer's arguments that need more than the spec's fields.

:func:`check_spec` raises what :func:`~epochtrain.factory.make_trainer` would raise for a
spec once built (the policy on the env's spaces, a replay buffer below one minibatch, an
offline run without its dataset file), without building the run: a sweep checks every run
with it first. The rest serve ``make_trainer``: what an offline trainer would refuse
before its dataset is read, and the settings a run would not use given the objects passed.
:func:`check_spec` and :func:`replay_below_batch` are re-exported by
:mod:`epochtrain.factory`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from epochtrain.algorithms import Policy
from epochtrain.config_ignored import IgnoredSetting, keeping_ignored
from epochtrain.data import Collector, ReplayBuffer
from epochtrain.data.writes import check_writable_dir
from epochtrain.envs import make_envs
from epochtrain.logger import BaseLogger
from epochtrain.spec import RunSpec
from epochtrain.trainer.base import StopFn, check_policy_initialised
from epochtrain.trainer.checks import check_arguments, check_env_spaces
from epochtrain.trainer.hooks import TrainerHook
from epochtrain.trainer.params import TrainerParams

__all__ = ["check_spec", "replay_below_batch"]


class _Unset:
    """Marks a keyword the caller did not pass (``stop_fn=None`` means "never stop")."""


_UNSET = _Unset()


def check_spec(spec: RunSpec, *, dataset: bool = True) -> None:
    """Raise what :func:`~epochtrain.factory.make_trainer` would raise for the settings of
    ``spec`` that only show when it is built: a policy that cannot act on the env's spaces
    (DQN on Box actions, ...), a device that cannot hold it, then an offline algorithm
    without its dataset file (``dataset=False`` leaves that to the caller, to say in its own
    words). The spaces come first: no dataset makes TD3+BC act on Discrete actions. Cheap
    (one env, no data loaded): a sweep checks every run with it first."""
    _check_replay_capacity(spec)
    _check_policy(spec)
    if dataset and spec.entry.kind == "offline":
        path = _need_dataset(spec)
        if not path.startswith("minari:") and not Path(path).is_file():
            raise FileNotFoundError(f"dataset {path!r} of {spec.run_id} is not a file")


def replay_below_batch(spec: RunSpec) -> tuple[int, int] | None:
    """``(buffer_size, batch_size)`` of an off-policy ``spec`` whose replay buffer holds
    fewer transitions than one minibatch, else None. Only sampling suffers from it:
    ``epochtrain eval`` raises such a buffer to ``batch_size`` to test an old checkpoint."""
    size, batch = spec.buffer.buffer_size, getattr(spec.trainer, "batch_size", None)
    if spec.entry.kind == "offpolicy" and size is not None and batch is not None and size < batch:
        return size, batch
    return None


def _check_replay_capacity(spec: RunSpec) -> None:
    """``ValueError`` for an off-policy run whose replay buffer holds fewer transitions
    than one minibatch (``buffer_size=10, batch_size=64``): sampling draws with replacement,
    so it would run, every minibatch repeating the few transitions the buffer can hold.

    A resume (``resume_from``) is left to the checkpoint's settings comparison: an older
    epochtrain allowed such a run, and a resume may change neither size, so it continues
    as it was saved (:func:`_warn_replay_capacity`), and another size is refused there."""
    found = replay_below_batch(spec)
    if found is not None and spec.trainer.resume_from is None:
        size, batch = found
        raise ValueError(
            f"buffer.buffer_size={size} is smaller than trainer.batch_size={batch}: the "
            f"replay buffer could never hold one minibatch, so every minibatch would repeat "
            f"its {size} transitions; set buffer_size >= batch_size (typically 100000), or "
            f"lower batch_size"
        )


def _warn_replay_capacity(spec: RunSpec) -> None:
    """Warn that a resumed run (its checkpoint loaded: the sizes are the saved run's)
    samples from a buffer smaller than one minibatch, as an older epochtrain allowed."""
    found = replay_below_batch(spec)
    if found is not None:
        size, batch = found
        warnings.warn(
            f"resuming a run with buffer.buffer_size={size} smaller than "
            f"trainer.batch_size={batch}, as an older epochtrain allowed: it continues as it "
            f"was saved, every minibatch repeating the buffer's {size} transitions (a resume "
            f"cannot change either size; a new run needs buffer_size >= batch_size)",
            UserWarning,
            stacklevel=3,
        )


def _check_policy(spec: RunSpec) -> None:
    """Build the policy of ``spec`` on one env's spaces, to raise what it refuses."""
    envs = make_envs(spec.env_id, 1)
    try:
        with torch.random.fork_rng(), keeping_ignored():  # the spec judged them
            spec.entry.policy_cls(
                envs.single_observation_space,
                envs.single_action_space,
                spec.config,
                device=spec.device,
            )
    finally:
        envs.close()


def _need_dataset(spec: RunSpec) -> str:
    if spec.dataset is None:
        raise ValueError(
            f"algo {spec.algo!r} needs a dataset: set dataset='path/to/file' (record one with "
            "`epochtrain collect`) or 'minari:<dataset id>', or pass buffer=ReplayBuffer.load(path)"
        )
    return spec.dataset


def _check_before_data(
    spec: RunSpec,
    policy: Policy[Any],
    params: TrainerParams,
    test_collector: Collector,
    callbacks: dict[str, object],
    logger: BaseLogger | None,
    hooks: Sequence[TrainerHook] | None,
) -> None:
    """Raise what the offline trainer would refuse without looking at the dataset (its
    params, callbacks, logger and hooks, the policy's kind, the test envs' spaces, the
    checkpoint directory), so that a bad setting is reported before the dataset is read."""
    check_arguments(
        spec.entry.trainer_cls,
        policy=policy,
        params=params,
        test_collector=test_collector,
        callbacks=callbacks,
        logger=logger,
        hooks=hooks,
    )
    check_policy_initialised(policy)  # before its spaces are read
    check_env_spaces(policy, [("test_collector", test_collector)])
    if params.checkpoint_dir is not None:
        check_writable_dir(params.checkpoint_dir, "checkpoint_dir")


def _unused_settings(
    spec: RunSpec,
    *,
    buffer: ReplayBuffer | None,
    logger: BaseLogger | None,
    stop_fn: StopFn | _Unset | None,
) -> list[IgnoredSetting]:
    """The settings of ``spec`` and arguments of :func:`~epochtrain.factory.make_trainer` that
    the run would not use, given where it logs and checkpoints (which the CLI and sweeps
    fill in after building the spec, so the spec alone cannot judge them) and the objects
    passed."""
    params = spec.trainer
    found: list[IgnoredSetting] = []
    no_stop = stop_fn is None or (isinstance(stop_fn, _Unset) and spec.stop_at is None)
    if no_stop and spec.entry.kind != "offline":  # offline: the spec refuses it already
        found += params.ignored_if_set(
            "test_in_train",
            "it tests early once the training returns meet the stop condition, and the run "
            "has none (stop_at is None and no stop_fn)",
            "set stop_at=<return> or pass stop_fn=..., or drop test_in_train",
        )
    if params.checkpoint_dir is None:
        for name in ("checkpoint_every", "keep_last", "keep_best"):
            found += params.ignored_if_set(
                name,
                "checkpoint_dir is None, so no checkpoint is written",
                f"set checkpoint_dir='DIR' to write checkpoints, or drop {name}",
            )
    if logger is not None:
        if spec.logging != type(spec.logging)():
            found.append(
                IgnoredSetting(
                    "logging",
                    spec.logging,
                    "logger= is the run's logger, so the spec's logging settings are not used",
                    "drop logger= to log as the spec says, or leave spec.logging at its defaults",
                )
            )
    elif spec.logging.logdir is None:
        found += spec.logging.ignored_if_set(
            "loggers",
            "logging.logdir is None, so nothing is logged",
            "set logdir='DIR' to log, or drop loggers",
        )
    if buffer is not None and spec.dataset is not None and spec.entry.kind == "offline":
        found.append(
            IgnoredSetting(
                "dataset",
                spec.dataset,
                "buffer= is the data the run learns from, so the dataset is not loaded",
                "drop buffer= to learn from the dataset, or set dataset=None",
            )
        )
    return found
