"""make_trainer: a ready-to-run trainer (envs, policy, buffer, collectors, logger) by name.

``make_trainer("ppo", "CartPole-v1")`` builds everything with the tuned defaults in
:data:`DEFAULTS`; keyword overrides replace any policy or trainer parameter by name, plus
the few settings the factory itself owns (:data:`FACTORY_PARAMS`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode

from epochtrain.algorithms import BC, DQN, PPO, Policy
from epochtrain.data import Collector, ReplayBuffer
from epochtrain.trainer import BaseTrainer, OfflineTrainer, OffpolicyTrainer, OnpolicyTrainer

__all__ = ["DEFAULTS", "FACTORY_PARAMS", "AlgoDefaults", "make_trainer"]

FACTORY_PARAMS = ("num_envs", "num_test_envs", "buffer_size", "logdir")
"""Overrides the factory itself consumes (besides every policy and trainer parameter).

``num_envs``: training envs; ``num_test_envs``: test envs; ``buffer_size``: replay or
rollout buffer capacity in transitions (on-policy: ``None`` = one rollout); ``logdir``:
write TensorBoard logs there (ignored when ``logger`` is given).
"""

# Parameters the factory builds itself; they cannot be overridden by name.
_BUILT = frozenset(
    {"observation_space", "action_space", "policy", "train_collector", "test_collector"}
)


@dataclass(frozen=True)
class AlgoDefaults:
    """Tuned defaults of one algorithm: policy class, trainer class and their parameters."""

    policy_cls: type[Policy[Any]]
    trainer_cls: type[BaseTrainer[Any]]
    num_envs: int
    buffer_size: int | None
    policy: Mapping[str, Any] = field(default_factory=dict)
    trainer: Mapping[str, Any] = field(default_factory=dict)
    per_env: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Tuned settings for one env id (any override name), applied over the above."""


DEFAULTS: dict[str, AlgoDefaults] = {
    # rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1: 8 envs x n_steps 32, batch 256,
    # 20 epochs, gamma 0.98, lambda 0.8, ent 0, lr 1e-3 and clip 0.2 linear over 1e5 steps.
    # Evaluation every 2048 env steps, as the peers' minimal PPO (baselines.md addendum).
    "ppo": AlgoDefaults(
        policy_cls=PPO,
        trainer_cls=OnpolicyTrainer,
        num_envs=8,
        buffer_size=None,
        policy={},  # PPO's own defaults are the zoo's CartPole settings
        trainer={
            "max_epoch": 50,
            "step_per_epoch": 2048,
            "step_per_collect": 256,
            "repeat_per_collect": 20,
            "batch_size": 256,
        },
    ),
    # rl-baselines3-zoo hyperparams/dqn.yml, CartPole-v1: lr 2.3e-3, batch 64, buffer 1e5,
    # 1000 warm-up steps, gamma 0.99, 128 gradient steps every 256 env steps with the target
    # synced once per such round, epsilon 1 -> 0.04 over 8000 steps. Changed for speed on
    # CPU: a 64x64 net instead of 256x256 (see docs/benchmarks.md).
    "dqn": AlgoDefaults(
        policy_cls=DQN,
        trainer_cls=OffpolicyTrainer,
        num_envs=1,
        buffer_size=100_000,
        policy={},  # DQN's own defaults are the settings above
        trainer={
            "max_epoch": 50,
            "step_per_epoch": 2048,
            "step_per_collect": 256,
            "update_per_step": 0.5,
            "batch_size": 64,
            "warmup_steps": 1000,
        },
    ),
    # Behaviour cloning on a given dataset (``buffer=``): 1000 gradient steps per epoch.
    "bc": AlgoDefaults(
        policy_cls=BC,
        trainer_cls=OfflineTrainer,
        num_envs=0,
        buffer_size=None,
        policy={},
        trainer={"max_epoch": 10, "step_per_epoch": 1000, "batch_size": 256},
    ),
}
"""Tuned defaults per algorithm name, with where they come from."""


def _keyword_params(cls: type) -> set[str]:
    """Keyword parameters of ``cls.__init__`` and of the bases it forwards ``**kwargs`` to."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {
            p.name
            for p in params
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"
        }
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names - _BUILT


def _make_envs(env_id: str, num_envs: int) -> gym.vector.VectorEnv[Any, Any, Any]:
    envs: gym.vector.VectorEnv[Any, Any, Any] = gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    return envs


def _default_stop_fn(env_id: str) -> Callable[[float], bool] | None:
    threshold = gym.spec(env_id).reward_threshold
    if threshold is None:
        return None
    limit = float(threshold)

    def stop_fn(best_test_return: float) -> bool:
        return best_test_return >= limit

    return stop_fn


def make_trainer(algo: str, env_id: str, *, seed: int = 0, **overrides: Any) -> BaseTrainer[Any]:
    """Build a trainer for ``algo`` ("dqn", "ppo" or "bc") on the gymnasium task ``env_id``.

    Training envs (``num_envs``) and 10 test envs are ``gymnasium.make_vec(..., "sync")``
    with SAME_STEP autoreset. ``overrides`` may name any parameter of the policy class,
    of the trainer class, or of :data:`FACTORY_PARAMS`; any other name raises
    ``ValueError`` listing the allowed ones. ``"bc"`` needs ``buffer=`` (a filled
    :class:`ReplayBuffer` of expert transitions). Logging goes to ``logger=`` if given,
    else a ``TensorboardLogger(logdir)`` if ``logdir=`` is given, else nowhere.

    ``stop_fn`` defaults to "best test return >= the env spec's ``reward_threshold``"
    (475 for CartPole-v1; no stop when the spec has none); pass ``stop_fn=None`` to train
    for all ``max_epoch`` epochs. The policy's weights are initialised from ``seed``
    (without touching the global random state), which is also the trainer's seed.
    """
    if algo not in DEFAULTS:
        raise ValueError(f"algo must be one of {sorted(DEFAULTS)}, got {algo!r}")
    try:
        gym.spec(env_id)
    except gym.error.Error as exc:
        raise ValueError(
            f"env_id {env_id!r} is not a registered gymnasium env ({exc}); "
            "use an id such as 'CartPole-v1'"
        ) from exc
    spec = DEFAULTS[algo]
    policy_names = _keyword_params(spec.policy_cls)
    trainer_names = _keyword_params(spec.trainer_cls)
    allowed = policy_names | trainer_names | set(FACTORY_PARAMS)
    unknown = set(overrides) - allowed
    if unknown:
        raise ValueError(
            f"unknown overrides {sorted(unknown)} for algo {algo!r}; allowed: {sorted(allowed)}"
        )
    overrides = {**spec.per_env.get(env_id, {}), **overrides}
    if spec.trainer_cls is OfflineTrainer and "buffer" not in overrides:
        raise ValueError(
            f"algo {algo!r} needs a dataset: pass buffer=ReplayBuffer filled with expert "
            "transitions (e.g. ReplayBuffer.load(path))"
        )
    policy_kw = {**spec.policy, **{k: v for k, v in overrides.items() if k in policy_names}}
    trainer_kw = {**spec.trainer, **{k: v for k, v in overrides.items() if k in trainer_names}}
    if "episode_per_collect" in overrides and "step_per_collect" not in overrides:
        trainer_kw.pop("step_per_collect", None)
    num_envs = int(overrides.get("num_envs", spec.num_envs))
    num_test_envs = int(overrides.get("num_test_envs", 10))

    test_envs = _make_envs(env_id, num_test_envs)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        policy = spec.policy_cls(
            test_envs.single_observation_space, test_envs.single_action_space, **policy_kw
        )
    trainer_kw["test_collector"] = Collector(policy, test_envs, exploration=False)
    if "stop_fn" not in overrides:
        trainer_kw["stop_fn"] = _default_stop_fn(env_id)
    if "logger" not in overrides:
        trainer_kw["logger"] = _make_logger(overrides.get("logdir"))
    if spec.trainer_cls is not OfflineTrainer:
        capacity = overrides.get("buffer_size", spec.buffer_size)
        if capacity is None:  # on-policy: room for exactly one rollout
            if trainer_kw.get("step_per_collect") is None:
                raise ValueError(
                    "buffer_size must be given with episode_per_collect: the factory cannot "
                    "size a rollout buffer for a number of episodes"
                )
            capacity = -(-int(trainer_kw["step_per_collect"]) // num_envs) * num_envs
        train_envs = _make_envs(env_id, num_envs)
        buffer = ReplayBuffer(int(capacity), num_envs)
        trainer_kw["train_collector"] = Collector(policy, train_envs, buffer)
    trainer: BaseTrainer[Any] = spec.trainer_cls(policy=policy, seed=seed, **trainer_kw)
    return trainer


def _make_logger(logdir: str | None) -> Any:
    # imported here so that the factory does not load TensorBoard unless it is used
    from epochtrain.logger import LazyLogger, TensorboardLogger

    if logdir is None:
        return LazyLogger()
    return TensorboardLogger(logdir)
