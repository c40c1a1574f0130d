"""make_trainer: a ready-to-run trainer (envs, policy, buffer, collectors, logger) from a spec.

``make_trainer(spec)`` builds the run a :class:`~epochtrain.spec.RunSpec` describes;
``make_trainer("ppo", "CartPole-v1", seed=0, lr=3e-4)`` is the short form: the tuned spec
(:meth:`RunSpec.tuned`) with the keyword settings applied (an unknown name is an error that
lists the close matches). Objects that are not data (a logger, hooks, callbacks, an
offline dataset already in memory) are keyword arguments of their own.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
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
from epochtrain.config_ignored import IgnoredSetting, keeping_ignored
from epochtrain.data import Collector, PrioritizedReplayBuffer, ReplayBuffer
from epochtrain.data.buffer import rollout_rows
from epochtrain.data.buffer_storage import check_spaces_memory
from epochtrain.data.writes import check_writable_dir
from epochtrain.envs import make_envs
from epochtrain.logger import BaseLogger
from epochtrain.registry import ALGORITHMS
from epochtrain.spec import RunSpec
from epochtrain.trainer import BaseTrainer, OfflineTrainer, OffpolicyTrainer, OnpolicyTrainer
from epochtrain.trainer.base import StopFn
from epochtrain.trainer.checks import (
    check_arguments,
    check_checkpoint_dir,
    check_env_spaces,
    epoch_length_note,
    minibatch_size_note,
)
from epochtrain.trainer.hooks import TrainerHook
from epochtrain.trainer.params import TrainerParams

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


class _Unset:
    """Marks a keyword the caller did not pass (``stop_fn=None`` means "never stop")."""


_UNSET = _Unset()


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
    """The settings of ``spec`` and arguments of :func:`make_trainer` that the run would
    not use, given where it logs and checkpoints (which the CLI and sweeps fill in after
    building the spec, so the spec alone cannot judge them) and the objects passed."""
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


def _stop_at(threshold: float | None) -> StopFn | None:
    if threshold is None:
        return None
    limit = float(threshold)

    def stop_fn(best_test_return: float) -> bool:
        return best_test_return >= limit

    return stop_fn


def check_spec(spec: RunSpec, *, dataset: bool = True) -> None:
    """Raise what :func:`make_trainer` would raise for the settings of ``spec`` that only
    show when it is built: a policy that cannot act on the env's spaces (DQN on Box
    actions, ...), a device that cannot hold it, then an offline algorithm without its
    dataset file (``dataset=False`` leaves that to the caller, to say in its own words).
    The spaces come first: no dataset makes TD3+BC act on Discrete actions. Cheap (one
    env, no data loaded): a sweep checks every run with it first."""
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


def _load_dataset(spec: RunSpec) -> ReplayBuffer:
    """The spec's dataset: a buffer file, or ``minari:<dataset id>`` (a local Minari dataset)."""
    dataset = _need_dataset(spec)
    if dataset.startswith("minari:"):
        from epochtrain.data.minari import load_minari_buffer

        return load_minari_buffer(dataset.removeprefix("minari:"), device=spec.device)
    return ReplayBuffer.load(dataset, device=spec.device)


def _make_buffer(spec: RunSpec) -> ReplayBuffer:
    """The training buffer: uniform, or prioritized when ``buffer.prioritized_replay``."""
    params = spec.trainer
    capacity = spec.buffer.buffer_size
    num_envs = spec.num_envs
    if capacity is None:  # on-policy: room for exactly one rollout
        step_per_collect = getattr(params, "step_per_collect", None)
        if step_per_collect is None:
            raise ValueError(
                "buffer_size must be given with episode_per_collect: the factory cannot "
                "size a rollout buffer for a number of episodes"
            )
        same_step = spec.env_backend != "envpool"  # make_envs: gymnasium's envs SAME_STEP
        capacity = rollout_rows(int(step_per_collect), num_envs, same_step=same_step) * num_envs
    if not spec.buffer.prioritized_replay:
        return ReplayBuffer(capacity, num_envs)
    run_steps = params.max_epoch * params.step_per_epoch
    return PrioritizedReplayBuffer(
        capacity,
        num_envs,
        alpha=spec.buffer.priority_alpha,
        beta=spec.buffer.priority_beta,
        beta_anneal_steps=run_steps,
    )


def _make_logger(spec: RunSpec) -> BaseLogger:
    # imported here so that the factory does not load TensorBoard unless it is used
    from epochtrain.logger import (
        CSVLogger,
        JSONLLogger,
        LazyLogger,
        MultiLogger,
        TensorboardLogger,
    )

    logdir = spec.logging.logdir
    if logdir is None:
        return LazyLogger()
    makers: dict[str, Callable[[], BaseLogger]] = {
        "tensorboard": lambda: TensorboardLogger(logdir),
        "jsonl": lambda: JSONLLogger(Path(logdir) / "log.jsonl"),
        "csv": lambda: CSVLogger(Path(logdir) / "log.csv"),
    }
    loggers = [makers[name]() for name in spec.logging.loggers]
    return loggers[0] if len(loggers) == 1 else MultiLogger(*loggers)
