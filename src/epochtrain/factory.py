"""make_trainer: a ready-to-run trainer (envs, policy, buffer, collectors, logger) from a spec.

``make_trainer(spec)`` builds the run a :class:`~epochtrain.spec.RunSpec` describes;
``make_trainer("ppo", "CartPole-v1", seed=0, lr=3e-4)`` is the short form: the tuned spec
(:meth:`RunSpec.tuned`) with the keyword settings applied (an unknown name is an error that
lists the close matches). Objects that are not data (a logger, hooks, callbacks, an
offline dataset already in memory) are keyword arguments of their own.

The checks it runs (and :func:`check_spec`, :func:`replay_below_batch`, re-exported here)
live in :mod:`epochtrain.factory_checks`; the buffer, dataset, logger and default
``stop_fn`` it builds, in :mod:`epochtrain.factory_parts`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal, overload

import torch

from epochtrain.algorithms import (
    A2CTrainingStats,
    BCTrainingStats,
    CQLTrainingStats,
    DDPGTrainingStats,
    DQNTrainingStats,
    PGTrainingStats,
    Policy,
    PPOTrainingStats,
    SACTrainingStats,
    TD3BCTrainingStats,
    TD3TrainingStats,
)
from epochtrain.config_ignored import keeping_ignored
from epochtrain.data import Collector, ReplayBuffer
from epochtrain.data.buffer_storage import check_spaces_memory
from epochtrain.data.writes import check_writable_dir
from epochtrain.envs import make_envs
from epochtrain.factory_checks import (
    _UNSET,
    _check_before_data,
    _check_replay_capacity,
    _Unset,
    _unused_settings,
    _warn_replay_capacity,
    check_spec,
    replay_below_batch,
)
from epochtrain.factory_parts import _load_dataset, _make_buffer, _make_logger, _stop_at
from epochtrain.logger import BaseLogger
from epochtrain.registry import ALGORITHMS
from epochtrain.spec import RunSpec
from epochtrain.trainer import BaseTrainer, OfflineTrainer, OffpolicyTrainer, OnpolicyTrainer
from epochtrain.trainer.base import StopFn
from epochtrain.trainer.checks import (
    check_checkpoint_dir,
    epoch_length_note,
    minibatch_size_note,
)
from epochtrain.trainer.hooks import TrainerHook

__all__ = [
    "UnusedSettingWarning",
    "check_spec",
    "make_envs",
    "make_trainer",
    "replay_below_batch",
]


class UnusedSettingWarning(UserWarning):
    """:func:`make_trainer` was given a setting the trainer it builds will not use
    (``keep_last`` without a ``checkpoint_dir``, ...). A caller that builds a trainer from
    a run's spec for another purpose (``epochtrain eval``, a Tune trial whose checkpoints
    Tune keeps) filters this category."""


@overload
def make_trainer(
    spec: Literal["ppo"],
    env_id: str,
    *,
    seed: int | None = ...,
    buffer: ReplayBuffer | None = ...,
    logger: BaseLogger | None = ...,
    hooks: Sequence[TrainerHook] | None = ...,
    train_fn: Callable[[int, int], None] | None = ...,
    test_fn: Callable[[int, int], None] | None = ...,
    stop_fn: StopFn | _Unset | None = ...,
    save_best_fn: Callable[[Policy[Any]], None] | None = ...,
    **overrides: object,
) -> OnpolicyTrainer[PPOTrainingStats]: ...


@overload
def make_trainer(
    spec: Literal["a2c"],
    env_id: str,
    *,
    seed: int | None = ...,
    buffer: ReplayBuffer | None = ...,
    logger: BaseLogger | None = ...,
    hooks: Sequence[TrainerHook] | None = ...,
    train_fn: Callable[[int, int], None] | None = ...,
    test_fn: Callable[[int, int], None] | None = ...,
    stop_fn: StopFn | _Unset | None = ...,
    save_best_fn: Callable[[Policy[Any]], None] | None = ...,
    **overrides: object,
) -> OnpolicyTrainer[A2CTrainingStats]: ...


@overload
def make_trainer(
    spec: Literal["pg"],
    env_id: str,
    *,
    seed: int | None = ...,
    buffer: ReplayBuffer | None = ...,
    logger: BaseLogger | None = ...,
    hooks: Sequence[TrainerHook] | None = ...,
    train_fn: Callable[[int, int], None] | None = ...,
    test_fn: Callable[[int, int], None] | None = ...,
    stop_fn: StopFn | _Unset | None = ...,
    save_best_fn: Callable[[Policy[Any]], None] | None = ...,
    **overrides: object,
) -> OnpolicyTrainer[PGTrainingStats]: ...


@overload
def make_trainer(
    spec: Literal["dqn"],
    env_id: str,
    *,
    seed: int | None = ...,
    buffer: ReplayBuffer | None = ...,
    logger: BaseLogger | None = ...,
    hooks: Sequence[TrainerHook] | None = ...,
    train_fn: Callable[[int, int], None] | None = ...,
    test_fn: Callable[[int, int], None] | None = ...,
    stop_fn: StopFn | _Unset | None = ...,
    save_best_fn: Callable[[Policy[Any]], None] | None = ...,
    **overrides: object,
) -> OffpolicyTrainer[DQNTrainingStats]: ...


@overload
def make_trainer(
    spec: Literal["sac"],
    env_id: str,
    *,
    seed: int | None = ...,
    buffer: ReplayBuffer | None = ...,
    logger: BaseLogger | None = ...,
    hooks: Sequence[TrainerHook] | None = ...,
    train_fn: Callable[[int, int], None] | None = ...,
    test_fn: Callable[[int, int], None] | None = ...,
    stop_fn: StopFn | _Unset | None = ...,
    save_best_fn: Callable[[Policy[Any]], None] | None = ...,
    **overrides: object,
) -> OffpolicyTrainer[SACTrainingStats]: ...


@overload
def make_trainer(
    spec: Literal["td3"],
    env_id: str,
    *,
    seed: int | None = ...,
    buffer: ReplayBuffer | None = ...,
    logger: BaseLogger | None = ...,
    hooks: Sequence[TrainerHook] | None = ...,
    train_fn: Callable[[int, int], None] | None = ...,
    test_fn: Callable[[int, int], None] | None = ...,
    stop_fn: StopFn | _Unset | None = ...,
    save_best_fn: Callable[[Policy[Any]], None] | None = ...,
    **overrides: object,
) -> OffpolicyTrainer[TD3TrainingStats]: ...


@overload
def make_trainer(
    spec: Literal["ddpg"],
    env_id: str,
    *,
    seed: int | None = ...,
    buffer: ReplayBuffer | None = ...,
    logger: BaseLogger | None = ...,
    hooks: Sequence[TrainerHook] | None = ...,
    train_fn: Callable[[int, int], None] | None = ...,
    test_fn: Callable[[int, int], None] | None = ...,
    stop_fn: StopFn | _Unset | None = ...,
    save_best_fn: Callable[[Policy[Any]], None] | None = ...,
    **overrides: object,
) -> OffpolicyTrainer[DDPGTrainingStats]: ...


@overload
def make_trainer(
    spec: Literal["td3bc"],
    env_id: str,
    *,
    seed: int | None = ...,
    buffer: ReplayBuffer | None = ...,
    logger: BaseLogger | None = ...,
    hooks: Sequence[TrainerHook] | None = ...,
    train_fn: Callable[[int, int], None] | None = ...,
    test_fn: Callable[[int, int], None] | None = ...,
    stop_fn: StopFn | _Unset | None = ...,
    save_best_fn: Callable[[Policy[Any]], None] | None = ...,
    **overrides: object,
) -> OfflineTrainer[TD3BCTrainingStats]: ...


@overload
def make_trainer(
    spec: Literal["cql"],
    env_id: str,
    *,
    seed: int | None = ...,
    buffer: ReplayBuffer | None = ...,
    logger: BaseLogger | None = ...,
    hooks: Sequence[TrainerHook] | None = ...,
    train_fn: Callable[[int, int], None] | None = ...,
    test_fn: Callable[[int, int], None] | None = ...,
    stop_fn: StopFn | _Unset | None = ...,
    save_best_fn: Callable[[Policy[Any]], None] | None = ...,
    **overrides: object,
) -> OfflineTrainer[CQLTrainingStats]: ...


@overload
def make_trainer(
    spec: Literal["bc"],
    env_id: str,
    *,
    seed: int | None = ...,
    buffer: ReplayBuffer | None = ...,
    logger: BaseLogger | None = ...,
    hooks: Sequence[TrainerHook] | None = ...,
    train_fn: Callable[[int, int], None] | None = ...,
    test_fn: Callable[[int, int], None] | None = ...,
    stop_fn: StopFn | _Unset | None = ...,
    save_best_fn: Callable[[Policy[Any]], None] | None = ...,
    **overrides: object,
) -> OfflineTrainer[BCTrainingStats]: ...


@overload
def make_trainer(
    spec: RunSpec | str,
    env_id: str | None = ...,
    *,
    seed: int | None = ...,
    buffer: ReplayBuffer | None = ...,
    logger: BaseLogger | None = ...,
    hooks: Sequence[TrainerHook] | None = ...,
    train_fn: Callable[[int, int], None] | None = ...,
    test_fn: Callable[[int, int], None] | None = ...,
    stop_fn: StopFn | _Unset | None = ...,
    save_best_fn: Callable[[Policy[Any]], None] | None = ...,
    **overrides: object,
) -> BaseTrainer[Any]: ...


def make_trainer(
    spec: RunSpec | str,
    env_id: str | None = None,
    *,
    seed: int | None = None,
    buffer: ReplayBuffer | None = None,
    logger: BaseLogger | None = None,
    hooks: Sequence[TrainerHook] | None = None,
    train_fn: Callable[[int, int], None] | None = None,
    test_fn: Callable[[int, int], None] | None = None,
    stop_fn: StopFn | _Unset | None = _UNSET,
    save_best_fn: Callable[[Policy[Any]], None] | None = None,
    **overrides: object,
) -> BaseTrainer[Any]:
    """Build the trainer of ``spec`` (or of ``RunSpec.tuned(spec, env_id, seed=seed)`` with
    ``overrides`` applied, when ``spec`` is an algorithm name).

    Training envs (``num_envs``) and test envs (``num_test_envs``) are
    ``make_envs(..., backend=spec.env_backend)``: gymnasium's sync vector env by default.
    The offline algorithms learn from ``buffer`` (a filled :class:`ReplayBuffer`) or from
    the spec's ``dataset`` file, read only once every check that needs no data has passed
    (the policy on the env's spaces, the device, the trainer's arguments). Logging goes to
    ``logger`` if given, else to the spec's ``logging`` settings. ``stop_fn`` defaults to
    "best test return >= ``spec.stop_at``" (the env's reward threshold in the tuned specs);
    ``stop_fn=None`` trains for all ``max_epoch`` epochs.
    The policy's weights are initialised from the run's seed without touching the global
    random state. The resolved spec is kept as ``trainer.spec`` (checkpoints store it).
    """
    if isinstance(spec, str):
        if env_id is None:
            raise TypeError("make_trainer(algo, env_id): env_id is missing")
        spec = RunSpec.tuned(spec, env_id, seed=0 if seed is None else seed)
        spec = spec.with_overrides(overrides)
    elif env_id is not None or seed is not None or overrides:
        raise TypeError(
            "make_trainer(spec) takes the settings from the spec: apply changes with "
            "spec.with_overrides({...}) instead of passing env_id, seed or overrides"
        )
    entry = ALGORITHMS[spec.algo]
    _check_replay_capacity(spec)
    for setting in _unused_settings(spec, buffer=buffer, logger=logger, stop_fn=stop_fn):
        warnings.warn(setting.refusal(), UnusedSettingWarning, stacklevel=2)
    if entry.kind != "offline" and buffer is not None:
        raise ValueError(
            f"buffer= is the dataset of an offline algorithm; {spec.algo!r} collects its own "
            "data (set its capacity with buffer_size=...)"
        )
    check_checkpoint_dir(spec.trainer)  # before any env is made
    if logger is None and spec.logging.logdir is not None:  # before any env is made too
        check_writable_dir(spec.logging.logdir, "logdir")
    # resume only once trainer.spec is set, so the checkpoint's spec is compared with it
    params = spec.trainer.replace(resume_from=None)
    # a test env beyond episode_per_test would run no episode and step for nothing
    num_test_envs = min(spec.num_test_envs, params.episode_per_test)
    envs = [make_envs(spec.env_id, num_test_envs, backend=spec.env_backend)]
    try:  # a refused setting leaves no env (nor env process) behind
        with torch.random.fork_rng(), keeping_ignored():  # the spec judged them
            torch.manual_seed(spec.seed)
            policy = entry.policy_cls(
                envs[0].single_observation_space,
                envs[0].single_action_space,
                spec.config,
                device=spec.device,
            )
        test_collector = Collector(policy, envs[0], exploration=False)
        run_stop_fn = _stop_at(spec.stop_at) if isinstance(stop_fn, _Unset) else stop_fn
        callbacks: dict[str, object] = {
            "train_fn": train_fn,
            "test_fn": test_fn,
            "stop_fn": run_stop_fn,
            "save_best_fn": save_best_fn,
        }
        train_collector = None
        if entry.kind == "offline" and buffer is None:
            # the dataset may take long to read: first every check that needs no data
            _check_before_data(spec, policy, params, test_collector, callbacks, logger, hooks)
            buffer = _load_dataset(spec)
        elif entry.kind != "offline":
            envs.append(make_envs(spec.env_id, spec.num_envs, backend=spec.env_backend))
            train_buffer = _make_buffer(spec)
            sized_by, value = "buffer_size", spec.buffer.buffer_size
            if value is None:  # on-policy: the buffer holds one rollout of step_per_collect
                sized_by, value = "step_per_collect", getattr(params, "step_per_collect", None)
            check_spaces_memory(  # a replay buffer too large is refused, not killed when full
                envs[1].single_observation_space,
                envs[1].single_action_space,
                train_buffer.rows,
                train_buffer.num_envs,
                setting=sized_by,
                value=value,
                # a full ring copies the rows each epoch overwrites, for a Ctrl-C roll-back
                step_per_epoch=params.step_per_epoch if sized_by == "buffer_size" else None,
            )
            train_collector = Collector(policy, envs[1], train_buffer)
        trainer = entry.trainer_cls(
            policy=policy,
            params=params,
            train_collector=train_collector,
            test_collector=test_collector,
            buffer=buffer,
            logger=_make_logger(spec) if logger is None else logger,
            hooks=hooks,
            train_fn=train_fn,
            test_fn=test_fn,
            stop_fn=run_stop_fn,
            save_best_fn=save_best_fn,
        )
    except BaseException:
        for env in envs:
            env.close()
        raise
    trainer.spec = spec.to_dict()
    if spec.trainer.resume_from is not None:
        try:
            trainer.load_checkpoint(spec.trainer.resume_from)
        except BaseException:
            trainer.close()
            raise
        _warn_replay_capacity(spec)
    for note in (
        minibatch_size_note(spec.trainer, spec.num_envs),
        epoch_length_note(spec.trainer, spec.num_envs),
    ):
        if note is not None:  # once built: not before a refusal
            warnings.warn(note, UnusedSettingWarning, stacklevel=2)
    return trainer
