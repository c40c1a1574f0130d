"""Build-time checks of a trainer's constructor arguments, run before any work starts.

:func:`check_arguments` checks everything :class:`~epochtrain.trainer.base.BaseTrainer`
takes: the params against the trainer's params class, the objects (:func:`check_objects`),
the policy's kind against the trainer's, the hooks (:func:`check_hooks`) and the checkpoint
paths. :func:`check_env_spaces` checks the policy's spaces against the envs' once the
trainer holds its collectors, and warns about normalising wrappers in the test envs
(:func:`check_test_env_wrappers`). Each error names the argument, its value and the fix.
"""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from epochtrain.algorithms.base import Policy
from epochtrain.algorithms.priorities import TDPriorities
from epochtrain.checkpoint_save import find_checkpoints
from epochtrain.data.collector import Collector
from epochtrain.data.env_snapshots import env_levels
from epochtrain.data.prioritized import PrioritizedReplayBuffer
from epochtrain.errors import CheckpointError
from epochtrain.logger import BaseLogger
from epochtrain.trainer.hooks import TrainerHook, check_callbacks
from epochtrain.trainer.params import OnlineParams, OnpolicyParams, TrainerParams

if TYPE_CHECKING:
    from epochtrain.data.buffer import ReplayBuffer
    from epochtrain.trainer.base import BaseTrainer

__all__ = [
    "check_arguments",
    "check_checkpoint_dir",
    "check_env_spaces",
    "check_hooks",
    "check_logger_free",
    "check_objects",
    "check_priority_updates",
    "check_reset",
    "check_test_env_wrappers",
    "epoch_length_note",
    "minibatch_size_note",
]

_TRAINER_OF_KIND: dict[str, str] = {
    "onpolicy": "OnpolicyTrainer",
    "offpolicy": "OffpolicyTrainer",
    "offline": "OfflineTrainer",
}

_KIND_WORDS: dict[str, str] = {
    "onpolicy": "an on-policy",
    "offpolicy": "an off-policy",
    "offline": "an offline",
}
"""A trainer kind in words, with its article."""


def check_arguments(
    trainer_cls: type[BaseTrainer[Any]],
    *,
    policy: Policy[Any],
    params: TrainerParams,
    test_collector: object,
    callbacks: Mapping[str, object],
    logger: object,
    hooks: object,
) -> list[TrainerHook]:
    """Check a trainer's constructor arguments (see :class:`BaseTrainer`): the params, the
    objects, the policy's kind against the trainer's, the hooks and the checkpoint paths.
    Returns ``hooks`` as a list."""
    name = trainer_cls.__name__
    if not isinstance(params, trainer_cls.params_cls):
        raise TypeError(
            f"{name} needs params={trainer_cls.params_cls.__name__}(...), got "
            f"{type(params).__name__}"
        )
    check_objects(
        policy=policy,
        test_collector=test_collector,
        callbacks=callbacks,
        params=params,
        logger=logger,
    )
    if trainer_cls.kind not in policy.trainer_kinds:
        kinds = sorted(policy.trainer_kinds)
        policy_name = type(policy).__name__
        raise TypeError(
            f"{name} cannot train {policy_name}: it is {_KIND_WORDS[trainer_cls.kind]} "
            f"trainer and {policy_name} needs {' or '.join(_KIND_WORDS[k] for k in kinds)} "
            f"trainer: use {' or '.join(_TRAINER_OF_KIND[k] for k in kinds)}"
        )
    if isinstance(logger, BaseLogger):
        check_logger_free(logger, None, "logger")
        if logger.has_records() and params.resume_from is None:
            raise ValueError(
                f"logger: this {logger._describe()} already holds the records of an earlier "
                "run, and a new run's records at the steps already "
                "written would be dropped: give the new run a new logger "
                "(JSONLLogger('runs/second')), or resume_from=<that run's checkpoint> to "
                "continue the earlier run"
            )
    hook_list = check_hooks(hooks)
    if params.resume_from is not None and not Path(params.resume_from).exists():
        raise FileNotFoundError(
            f"params.resume_from={params.resume_from!r} does not exist: pass a checkpoint "
            "directory (or the checkpoint_dir holding them)"
        )
    check_checkpoint_dir(params)
    if params.checkpoint_dir is not None and Path(params.checkpoint_dir).is_file():
        raise ValueError(
            f"params.checkpoint_dir must be a directory, got the file {params.checkpoint_dir!r}"
        )
    return hook_list


def check_checkpoint_dir(params: TrainerParams) -> None:
    """Refuse ``checkpoint_dir=""``: as a path it is the working directory, where the
    checkpoints would land unasked (``logdir=""`` is refused too)."""
    if params.checkpoint_dir == "":
        raise ValueError(
            "checkpoint_dir='' would write the checkpoints into the current directory: "
            "pass checkpoint_dir=None for no checkpoints, or checkpoint_dir='.' for the "
            "current directory"
        )


def minibatch_size_note(params: TrainerParams, num_envs: int) -> str | None:
    """What to say when an on-policy ``batch_size`` exceeds the rollout of
    ``step_per_collect`` env steps over ``num_envs`` envs (each pass is then one gradient
    step on the whole rollout, as with ``batch_size=None``), else None. A warning, not an
    error (:func:`~epochtrain.factory.make_trainer` gives it), as Stable-Baselines3's PPO
    warns about a rollout that is no multiple of its minibatch: the run is sound, and a
    sweep over ``num_envs`` or ``step_per_collect`` may cross the line in a few runs."""
    if not isinstance(params, OnpolicyParams):
        return None
    batch_size, step_per_collect = params.batch_size, params.step_per_collect
    if batch_size is None or step_per_collect is None:  # whole rollouts, or episodes
        return None
    rollout = -(-step_per_collect // num_envs) * num_envs  # the collector's whole vector steps
    if batch_size <= rollout:
        return None
    return (
        f"batch_size={batch_size:,} is larger than the rollout it splits "
        f"(step_per_collect={step_per_collect:,} over num_envs={num_envs}: {rollout:,} "
        "transitions): each pass is one gradient step on the whole rollout. Lower "
        f"batch_size to at most {rollout:,}, or set batch_size=None to ask for that"
    )


def epoch_length_note(params: TrainerParams, num_envs: int) -> str | None:
    """What to say when an online epoch of ``step_per_epoch`` env steps is shorter than
    one collect step (``step_per_collect`` over ``num_envs`` envs, in whole vector steps):
    an epoch ends with the collect step that reaches it, so each runs a whole collect
    step (as in Tianshou), else None. A warning, as :func:`minibatch_size_note`."""
    if not isinstance(params, OnlineParams) or params.step_per_collect is None:
        return None
    collect = -(-params.step_per_collect // num_envs) * num_envs
    if params.step_per_epoch >= collect:
        return None
    return (
        f"step_per_epoch={params.step_per_epoch:,} is less than one collect step "
        f"(step_per_collect={params.step_per_collect:,} over num_envs={num_envs}: "
        f"{collect:,} env steps): each epoch runs {collect:,} env steps. Raise "
        f"step_per_epoch to {collect:,}, or lower step_per_collect"
    )


def check_objects(
    *,
    policy: object,
    test_collector: object,
    callbacks: Mapping[str, object],
    params: TrainerParams,
    logger: object,
) -> None:
    """Check the objects every trainer takes (see :class:`BaseTrainer`)."""
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must be an epochtrain Policy, got {type(policy).__name__}")
    check_callbacks(callbacks)  # callable, and takes the arguments the trainer passes
    if test_collector is not None and not isinstance(test_collector, Collector):
        raise TypeError(
            f"test_collector must be a Collector or None, got {type(test_collector).__name__}"
        )
    if test_collector is None:
        needs_test: dict[str, object] = {
            "stop_fn": callbacks.get("stop_fn"),
            "save_best_fn": callbacks.get("save_best_fn"),
            "params.test_in_train": params.test_in_train or None,
            "params.test_before_train": params.test_before_train or None,
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
    if logger is not None and not isinstance(logger, BaseLogger):
        raise TypeError(f"logger must be a BaseLogger or None, got {type(logger).__name__}")


def check_hooks(hooks: object) -> list[TrainerHook]:
    """``hooks`` as a list; each must be a :class:`TrainerHook`, each object once."""
    if hooks is None:
        return []
    if not isinstance(hooks, Sequence) or isinstance(hooks, str):
        raise TypeError(f"hooks must be a list of TrainerHook objects, got {hooks!r}")
    first: dict[int, int] = {}  # id(hook) -> its first index
    for i, hook in enumerate(hooks):
        if not isinstance(hook, TrainerHook):
            raise TypeError(
                f"hooks[{i}] must be a TrainerHook (see epochtrain.trainer.hooks), got {hook!r}"
            )
        j = first.setdefault(id(hook), i)
        if j != i:
            name = type(hook).__qualname__
            raise ValueError(
                f"hooks[{j}] and hooks[{i}] are the same {name} object: its ops would run "
                f"twice at each point; pass it once (a second hook is a new {name}(...))"
            )
    return list(hooks)


def check_env_spaces(policy: Policy[Any], collectors: Iterable[tuple[str, Collector]]) -> None:
    """The policy's spaces must be the spaces of each ``(label, collector)``'s envs."""
    for label, collector in collectors:
        envs = collector.env
        for kind, own, theirs in (
            ("observation", policy.observation_space, envs.single_observation_space),
            ("action", policy.action_space, envs.single_action_space),
        ):
            if own != theirs:
                raise ValueError(
                    f"the policy's {kind} space {own} is not the {kind} space {theirs} of "
                    f"{label}'s envs: build the policy from those envs' spaces "
                    f"(envs.single_{kind}_space)"
                )
        if label == "test_collector":
            check_test_env_wrappers(envs)


_NORMALIZING_WRAPPERS: dict[str, str] = {
    "NormalizeReward": "the test returns reported (and compared with stop_at) are sums of "
    "normalised rewards, not the env's",
    "NormalizeObservation": "the test envs keep statistics of their own, apart from the "
    "training envs', so the policy is tested on observations scaled otherwise",
}
"""gymnasium's normalising wrappers (single-env and vector ones share the names), and what
each does wrong in the test envs."""


def check_test_env_wrappers(envs: gym.vector.VectorEnv[Any, Any, Any]) -> None:
    """Warn if the test ``envs`` (their vector wrappers, or any sub-env's wrapper chain)
    hold gymnasium's ``NormalizeReward`` or ``NormalizeObservation``: epochtrain's
    ``RewardNormalizer`` and ``ObservationNormalizer`` hooks do that job without skewing the
    test step. Sub-envs in worker processes (``AsyncVectorEnv``) cannot be looked at."""
    chain: list[object] = []
    for level in env_levels(envs):
        chain.append(level)
        for sub_env in getattr(level, "envs", None) or []:
            while isinstance(sub_env, gym.Env):
                chain.append(sub_env)
                sub_env = getattr(sub_env, "env", None)
    found = list(
        dict.fromkeys(
            type(e).__name__
            for e in chain
            if type(e).__name__ in _NORMALIZING_WRAPPERS
            and type(e).__module__.startswith("gymnasium.wrappers")
        )
    )
    if found:
        harms = "; ".join(f"{name}: {_NORMALIZING_WRAPPERS[name]}" for name in found)
        warnings.warn(
            f"the test envs are wrapped in gymnasium's {' and '.join(found)} ({harms}). "
            "Build the envs without them and pass epochtrain's hooks instead "
            "(hooks=[ObservationNormalizer(), RewardNormalizer()] from epochtrain.trainer): "
            "they normalise the training data, test with the training statistics and report "
            "the env's raw returns",
            UserWarning,
            stacklevel=2,
        )


def check_logger_free(logger: BaseLogger, trainer: object | None, label: str) -> None:
    """Refuse ``logger`` (the argument ``label``) if it, or a logger it forwards to, logs
    for a live trainer other than ``trainer``: two runs logged into one logger drop each
    other's records (the later one's steps are already written); or if a trainer's
    ``close()`` closed it, or its user did (a closed logger cannot write). A
    :class:`~epochtrain.logger.LazyLogger` records nothing and may be shared; a trainer
    that was garbage-collected without ``close()`` releases its logger."""
    closed = logger._closed_by()
    if closed is not None:
        part, kind = closed
        raise ValueError(
            f"{_this(label, logger, part)} was closed by the close() of the {kind} it "
            "logged for, so it cannot write: give this trainer a new logger (to continue "
            "that run: a new logger on the same path, and resume_from=<its checkpoint>)"
        )
    logger.check_open(label)  # closed by its user
    used = logger._used_by_another(trainer)
    if used is not None:
        gc.collect()  # error path only: a trainer no one holds may wait in a reference cycle
        used = logger._used_by_another(trainer)
    if used is not None:
        part, other = used
        raise ValueError(
            f"{_this(label, logger, part)} already logs for another trainer "
            f"({type(other).__name__}); one logger shared by two trainers keeps one run's "
            "records and silently drops the other's: give each trainer its own logger (a "
            "JSONLLogger per run, with its own path); LazyLogger() records nothing and may "
            "be shared"
        )


def _this(label: str, logger: BaseLogger, part: BaseLogger) -> str:
    inside = "" if part is logger else f" (inside {logger._describe()})"
    return f"{label}: this {part._describe()}{inside}"


def check_reset(trainer: BaseTrainer[Any], logger: BaseLogger | None) -> None:
    """Refuse ``trainer.reset(logger=...)`` inside ``next()`` (from a hook or callback), on
    a closed trainer, or when the new run would lose records: records in the logger it
    would log to (the new run's, at the same steps, would be dropped as already written),
    a ``logger`` another trainer logs to, or checkpoints in its ``checkpoint_dir`` (the
    new run's ``epoch_*`` would replace and rotate them out)."""
    if trainer._in_next:
        raise RuntimeError(
            "reset() cannot run inside next() (from a hook or a callback): the epoch in "
            "progress would go on with the new run's counters and the run would never end. "
            "Call it between epochs; to end the run from a hook, call "
            "trainer.request_stop(reason), then reset() once the loop is over"
        )
    if trainer._closed:
        raise RuntimeError(
            "reset() refused: this trainer was closed (close(), or the end of its `with` "
            "block), so its envs and logger are released; build a new trainer for a new run"
        )
    if logger is not None and not isinstance(logger, BaseLogger):
        raise TypeError(f"reset(logger=...) must be a BaseLogger, got {logger!r}")
    if logger is not None and logger.has_records():
        whose = "the run so far" if logger is trainer.logger else "an earlier run"
        raise ValueError(
            f"reset(logger=...): this {logger._describe()} holds the records of {whose}, "
            "and the new run's records at the same steps would be dropped as already "
            "written. Give the new run a new logger: "
            "trainer.reset(logger=JSONLLogger('runs/second')) (LazyLogger() records nothing)"
        )
    if logger is not None:
        check_logger_free(logger, trainer, "reset(logger=...)")
    if logger is None and trainer.logger.has_records():
        raise ValueError(
            f"reset(): the logger ({type(trainer.logger).__name__}) holds the records of "
            "the run so far, and the new run's records at the same steps would be dropped "
            "as already written. Give the new run its own logger: "
            "trainer.reset(logger=TensorboardLogger('runs/second')) (LazyLogger() records "
            "nothing)"
        )
    root = trainer.checkpoint_dir
    found = [] if root is None else find_checkpoints(root)
    if found:
        raise CheckpointError(
            f"reset(): checkpoint_dir {os.fspath(root or '')!r} holds the run's checkpoints "
            f"({', '.join(p.name for p in found)}); a new run would replace and rotate them "
            "out. Build a new trainer with another checkpoint_dir for the new run "
            "(make_trainer(..., checkpoint_dir=...)), or move those checkpoints away first"
        )


def check_priority_updates(
    policy: Policy[Any], buffer: ReplayBuffer | None, param: str = "train_collector.buffer"
) -> None:
    """Refuse a prioritized buffer whose priorities ``policy`` would never update: each new
    transition gets the maximum priority, so without updates every sample is uniform and
    the importance weights are all 1, silently. A policy updates them through the
    :class:`TDPriorities` mixin or an override of ``Policy.post_learn`` (the trainer hands
    it every sampled minibatch and the buffer after ``learn``); ``param`` names where the
    user gave the buffer."""
    if not isinstance(buffer, PrioritizedReplayBuffer) or isinstance(policy, TDPriorities):
        return
    if type(policy).post_learn is not Policy.post_learn:
        return
    name = type(policy).__name__
    raise ValueError(
        f"{param} is a {type(buffer).__name__}, but {name} never updates its "
        f"priorities (it neither mixes in epochtrain.algorithms.TDPriorities nor overrides "
        f"post_learn), so every minibatch would be sampled uniformly: use a uniform "
        f"ReplayBuffer({buffer.capacity}, {buffer.num_envs}), or make {name} update them "
        f"(class {name}(TDPriorities, ...) with record_td(q, target) in learn, or a "
        f"post_learn that calls buffer.update_priorities)"
    )
