"""The algorithm registry: one line per algorithm maps its name to config, policy and kind.

Everything that lists algorithms (the CLI's ``--algo`` choices, :class:`~epochtrain.spec.RunSpec`
validation, presets, checkpoints) reads :data:`ALGORITHMS`. Adding an algorithm takes its
module (config + policy + stats) and one :func:`register` call; see ``docs/specs.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from epochtrain.algorithms import (
    A2C,
    BC,
    CQL,
    DDPG,
    DQN,
    PG,
    PPO,
    SAC,
    TD3,
    TD3BC,
    A2CConfig,
    BCConfig,
    CQLConfig,
    DDPGConfig,
    DQNConfig,
    PGConfig,
    Policy,
    PPOConfig,
    SACConfig,
    TD3BCConfig,
    TD3Config,
    TrainerKind,
)
from epochtrain.config import Config
from epochtrain.suggestions import close_matches
from epochtrain.trainer import BaseTrainer, OfflineTrainer, OffpolicyTrainer, OnpolicyTrainer
from epochtrain.trainer.params import TrainerParams

__all__ = ["ALGORITHMS", "TRAINERS", "Algorithm", "register"]

TRAINERS: Mapping[TrainerKind, type[BaseTrainer[Any]]] = MappingProxyType(
    {"onpolicy": OnpolicyTrainer, "offpolicy": OffpolicyTrainer, "offline": OfflineTrainer}
)
"""The trainer class of each kind (its ``params_cls`` is the params dataclass of the kind)."""


@dataclass(frozen=True)
class Algorithm:
    """One registered algorithm and its general (not env-tuned) run settings."""

    name: str
    policy_cls: type[Policy[Any]]
    config_cls: type[Config]
    kind: TrainerKind
    trainer: Mapping[str, Any] = field(default_factory=dict)
    """Trainer parameters of the algorithm's general setting, over the params defaults."""
    num_envs: int = 1
    """Training envs (0 for offline algorithms)."""
    buffer_size: int | None = None
    """Buffer capacity in transitions (None: one rollout for on-policy algorithms)."""
    source: str = ""
    """Where the general setting comes from."""

    @property
    def trainer_cls(self) -> type[BaseTrainer[Any]]:
        """The trainer class of this algorithm's kind."""
        return TRAINERS[self.kind]

    @property
    def params_cls(self) -> type[TrainerParams]:
        """The trainer params dataclass of this algorithm's kind."""
        return self.trainer_cls.params_cls


ALGORITHMS: dict[str, Algorithm] = {}
"""Registered algorithms by name."""


def register(
    name: str,
    policy_cls: type[Policy[Any]],
    config_cls: type[Config],
    kind: TrainerKind,
    *,
    trainer: Mapping[str, Any] | None = None,
    num_envs: int = 1,
    buffer_size: int | None = None,
    source: str = "",
) -> Algorithm:
    """Register an algorithm under ``name`` (the CLI's ``--algo``); returns its entry."""
    if name in ALGORITHMS:
        raise ValueError(
            f"an algorithm named {name!r} is already registered: pick another name, or, where "
            "the call may run twice (a notebook cell, a module run again), guard it: "
            f"`if {name!r} not in ALGORITHMS: register({name!r}, ...)` "
            "(from epochtrain import ALGORITHMS)"
        )
    if kind not in policy_cls.trainer_kinds:
        raise ValueError(
            f"{policy_cls.__name__} declares trainer_kinds {sorted(policy_cls.trainer_kinds)}, "
            f"not {kind!r}: register it with one of those kinds"
        )
    entry = Algorithm(
        name=name,
        policy_cls=policy_cls,
        config_cls=config_cls,
        kind=kind,
        trainer=dict(trainer or {}),
        num_envs=num_envs,
        buffer_size=buffer_size,
        source=source,
    )
    _check_trainer_settings(entry)
    entry.params_cls(**entry.trainer)  # a bad value in the general setting fails at import
    ALGORITHMS[name] = entry
    return entry


def _check_trainer_settings(entry: Algorithm) -> None:
    """A name in ``trainer=`` that is no field of the kind's params class raises, with the
    closest names (a typo in the general setting fails at import, naming the fix)."""
    fields = [f.name for f in dataclasses.fields(entry.params_cls) if f.init]
    for key in entry.trainer:
        if key not in fields:
            raise TypeError(
                f"register({entry.name!r}, ...): trainer={{{key!r}: ...}} is not a setting of "
                f"{entry.params_cls.__name__} (the {entry.kind!r} trainer's params)"
                f"{close_matches(key, fields)}: its settings are in docs/specs.md, 'Trainer params'"
            )


_CONTINUOUS_OFFPOLICY = {"max_epoch": 20, "step_per_epoch": 5000, "warmup_steps": 1000}
_OFFLINE = {"max_epoch": 20, "step_per_epoch": 1000}

register(
    "ppo",
    PPO,
    PPOConfig,
    "onpolicy",
    trainer={"max_epoch": 100, "step_per_epoch": 10_000},
    source="PPO paper (Schulman et al. 2017): 2048-step rollouts, 10 passes, minibatch 64",
)
register(
    "a2c",
    A2C,
    A2CConfig,
    "onpolicy",
    num_envs=8,
    trainer={
        "max_epoch": 20,
        "step_per_epoch": 10_000,
        "step_per_collect": 40,
        "repeat_per_collect": 1,
        "batch_size": None,
    },
    source="Stable-Baselines3 A2C: 8 envs x 5 steps, one gradient step per rollout",
)
register(
    "pg",
    PG,
    PGConfig,
    "onpolicy",
    num_envs=8,
    trainer={
        "max_epoch": 20,
        "step_per_epoch": 10_000,
        "step_per_collect": 1000,
        "repeat_per_collect": 1,
        "batch_size": None,
    },
    source="REINFORCE with a baseline: one gradient step per 8 x 125-step rollout",
)
register(
    "dqn",
    DQN,
    DQNConfig,
    "offpolicy",
    buffer_size=1_000_000,
    trainer={
        "max_epoch": 100,
        "step_per_epoch": 10_000,
        "step_per_collect": 4,
        "update_per_step": 0.25,
        "batch_size": 32,
        "warmup_steps": 100,
    },
    source="Stable-Baselines3 DQN: one gradient step of 32 per 4 env steps after 100",
)
register(
    "sac",
    SAC,
    SACConfig,
    "offpolicy",
    buffer_size=1_000_000,
    trainer=_CONTINUOUS_OFFPOLICY,
    source="SAC paper: one gradient step of 256 per env step after 1000 random steps",
)
register(
    "td3",
    TD3,
    TD3Config,
    "offpolicy",
    buffer_size=1_000_000,
    trainer=_CONTINUOUS_OFFPOLICY,
    source="TD3 paper: one gradient step of 256 per env step after 1000 random steps",
)
register(
    "ddpg",
    DDPG,
    DDPGConfig,
    "offpolicy",
    buffer_size=1_000_000,
    trainer=_CONTINUOUS_OFFPOLICY,
    source="TD3 paper's DDPG, TD3's run settings",
)
register(
    "td3bc",
    TD3BC,
    TD3BCConfig,
    "offline",
    num_envs=0,
    trainer=_OFFLINE,
    source="TD3+BC paper: batch 256",
)
register(
    "cql",
    CQL,
    CQLConfig,
    "offline",
    num_envs=0,
    trainer=_OFFLINE,
    source="CQL paper and d3rlpy: batch 256",
)
register(
    "bc",
    BC,
    BCConfig,
    "offline",
    num_envs=0,
    trainer={"max_epoch": 10, "step_per_epoch": 1000},
    source="behaviour cloning, batch 256",
)
