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

from epochtrain.algorithms import A2C, BC, CQL, DDPG, DQN, PG, PPO, SAC, TD3, TD3BC, Policy
from epochtrain.checkpoint import jsonable
from epochtrain.data import Collector, PrioritizedReplayBuffer, ReplayBuffer
from epochtrain.envs import make_envs
from epochtrain.trainer import BaseTrainer, OfflineTrainer, OffpolicyTrainer, OnpolicyTrainer

__all__ = ["DEFAULTS", "FACTORY_PARAMS", "AlgoDefaults", "make_envs", "make_trainer"]

FACTORY_PARAMS = (
    "num_envs",
    "num_test_envs",
    "buffer_size",
    "logdir",
    "prioritized_replay",
    "priority_alpha",
    "priority_beta",
)
"""Overrides the factory itself consumes (besides every policy and trainer parameter).

``num_envs``: training envs; ``num_test_envs``: test envs; ``buffer_size``: replay or
rollout buffer capacity in transitions (on-policy: ``None`` = one rollout); ``logdir``:
write TensorBoard logs there (ignored when ``logger`` is given); ``prioritized_replay``
(off-policy only, default False): a :class:`PrioritizedReplayBuffer` with
``alpha=priority_alpha`` (0.6) and ``beta=priority_beta`` (0.4) annealed to 1 over the
run's ``max_epoch * step_per_epoch`` env steps.
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


_CONTINUOUS_OFFPOLICY: dict[str, Any] = {
    "max_epoch": 20,
    "step_per_epoch": 5000,
    "step_per_collect": 1,
    "update_per_step": 1.0,
    "batch_size": 256,
    "warmup_steps": 1000,
}
"""SAC, TD3 and DDPG (their papers): one gradient step of batch 256 per env step, after
1000 random warm-up steps; 20 epochs of 5000 env steps."""

_DETERMINISTIC_AC_PENDULUM: dict[str, Any] = {
    "actor_lr": 1e-3,
    "critic_lr": 1e-3,
    "gamma": 0.98,
    "buffer_size": 200_000,
    "hidden": (64, 64),
    "max_epoch": 20,
    "step_per_epoch": 1000,
}
"""DDPG and TD3 on Pendulum-v1: rl-baselines3-zoo td3.yml / ddpg.yml, 20 epochs of 1000,
with 64x64 networks (as SAC's Pendulum setting) instead of the zoo's 400x300: against
256x256, about the same env steps to reach -250 in a quarter of the wall-clock
(docs/benchmarks.md, "Time to solve Pendulum-v1")."""

DEFAULTS: dict[str, AlgoDefaults] = {
    # rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1: 8 envs x n_steps 32, batch 256,
    # 20 epochs, gamma 0.98, lambda 0.8, ent 0, lr 1e-3 and clip 0.2 linear over 1e5 steps.
    # Evaluation every 2048 env steps, as the peers' minimal PPO (baselines.md addendum).
    # Pendulum-v1: rl-baselines3-zoo hyperparams/ppo.yml (4 envs x n_steps 1024, batch 64,
    # 10 epochs, gamma 0.9, lambda 0.95, lr 1e-3, clip 0.2 constant, ent 0) without the
    # zoo's gSDE: the state-independent Gaussian reaches -300 within ~50k steps. Changed:
    # lr decays linearly to 0 over 200k steps (constant lr had late collapses to -700).
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
        per_env={
            "Pendulum-v1": {
                "num_envs": 4,
                "gamma": 0.9,
                "gae_lambda": 0.95,
                "lr_anneal_steps": 200_000,
                "clip_anneal_steps": None,
                "max_epoch": 24,
                "step_per_epoch": 8192,
                "step_per_collect": 4096,
                "repeat_per_collect": 10,
                "batch_size": 64,
            },
        },
    ),
    # rl-baselines3-zoo hyperparams/a2c.yml, CartPole-v1: 8 envs, ent_coef 0, SB3's A2C
    # defaults (n_steps 5, gamma 0.99, gae_lambda 1, lr 7e-4, RMSprop alpha 0.99 eps 1e-5,
    # vf_coef 0.5, max_grad_norm 0.5): one gradient step per 8 x 5 rollout.
    "a2c": AlgoDefaults(
        policy_cls=A2C,
        trainer_cls=OnpolicyTrainer,
        num_envs=8,
        buffer_size=None,
        policy={},  # A2C's own defaults are SB3's
        trainer={
            "max_epoch": 20,
            "step_per_epoch": 10_000,
            "step_per_collect": 40,
            "repeat_per_collect": 1,
            "batch_size": None,
        },
    ),
    # REINFORCE with a learned baseline and normalised advantages (Tianshou's PG example
    # normalises returns too), Adam lr 1e-3, gamma 0.99; one gradient step per rollout of
    # 8 envs x 125 steps (tuned here: 2000-step rollouts are too few updates in 200k steps,
    # 400-step ones learn faster but end noisier).
    "pg": AlgoDefaults(
        policy_cls=PG,
        trainer_cls=OnpolicyTrainer,
        num_envs=8,
        buffer_size=None,
        policy={},
        trainer={
            "max_epoch": 20,
            "step_per_epoch": 10_000,
            "step_per_collect": 1000,
            "repeat_per_collect": 1,
            "batch_size": None,
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
        # DQN's own defaults are the settings above: plain DQN (n_step 1, no dueling head,
        # uniform replay). CartPole-v1: 3-step returns (Rainbow), a dueling head and
        # prioritized replay (Schaul et al.'s proportional alpha 0.6, beta 0.4 -> 1) ended
        # the 50k-step benchmark at 500 on 5/5 seeds, plain DQN on 3/5 (docs/benchmarks.md).
        policy={"n_step": 1, "dueling": False},
        trainer={
            "max_epoch": 50,
            "step_per_epoch": 2048,
            "step_per_collect": 256,
            "update_per_step": 0.5,
            "batch_size": 64,
            "warmup_steps": 1000,
        },
        per_env={"CartPole-v1": {"n_step": 3, "dueling": True, "prioritized_replay": True}},
    ),
    # SAC: the paper's settings (lr 3e-4, 256x256 nets, batch 256, tau 0.005, gamma 0.99,
    # one gradient step per env step, automatic entropy tuning from alpha 1 as SB3).
    # Pendulum-v1: rl-baselines3-zoo hyperparams/sac.yml (lr 1e-3; learning_starts 1000
    # instead of the zoo's 10000 to fit a 20k-step budget). Changed for speed on CPU: 64x64
    # nets instead of 256x256 (about 5x faster; seed 0 ends at -158 with 256x256, -154 with
    # 64x64).
    "sac": AlgoDefaults(
        policy_cls=SAC,
        trainer_cls=OffpolicyTrainer,
        num_envs=1,
        buffer_size=1_000_000,
        policy={},  # SAC's own defaults are the paper's
        trainer=_CONTINUOUS_OFFPOLICY,
        per_env={
            "Pendulum-v1": {
                "actor_lr": 1e-3,
                "critic_lr": 1e-3,
                "alpha_lr": 1e-3,
                "hidden": (64, 64),
                "max_epoch": 20,
                "step_per_epoch": 1000,
            },
            # Discrete SAC (Christodoulou 2019), tuned here on 1 seed: a target entropy of
            # 0.3 log 2 instead of the paper's 0.98 log 2 (near-uniform on 2 actions).
            "CartPole-v1": {
                "hidden": (64, 64),
                "actor_lr": 3e-4,
                "critic_lr": 1e-3,
                "alpha_lr": 3e-4,
                "target_entropy_ratio": 0.3,
                "buffer_size": 100_000,
                "batch_size": 64,
                "max_epoch": 10,
                "step_per_epoch": 5000,
            },
        },
    ),
    # TD3: the paper's settings (Fujimoto et al. 2018, revised code: lr 3e-4, 256x256 nets,
    # batch 256, tau 0.005, gamma 0.99, exploration noise 0.1, policy noise 0.2 clipped at
    # 0.5, policy delay 2), one gradient step per env step. Pendulum-v1: rl-baselines3-zoo
    # hyperparams/td3.yml (lr 1e-3, gamma 0.98, buffer 2e5, noise 0.1; learning_starts 1000
    # instead of the zoo's 10000 to fit a 20k-step budget; 64x64 instead of 400x300).
    "td3": AlgoDefaults(
        policy_cls=TD3,
        trainer_cls=OffpolicyTrainer,
        num_envs=1,
        buffer_size=1_000_000,
        policy={},  # TD3's own defaults are the paper's
        trainer=_CONTINUOUS_OFFPOLICY,
        per_env={"Pendulum-v1": {**_DETERMINISTIC_AC_PENDULUM}},
    ),
    # DDPG: the TD3 paper's "our DDPG" (Gaussian exploration noise 0.1, no batch norm) with
    # the TD3 settings above. Pendulum-v1: rl-baselines3-zoo hyperparams/ddpg.yml (as TD3).
    "ddpg": AlgoDefaults(
        policy_cls=DDPG,
        trainer_cls=OffpolicyTrainer,
        num_envs=1,
        buffer_size=1_000_000,
        policy={},  # DDPG's own defaults are those of the TD3 paper
        trainer=_CONTINUOUS_OFFPOLICY,
        per_env={"Pendulum-v1": {**_DETERMINISTIC_AC_PENDULUM}},
    ),
    # TD3+BC on a given dataset (``buffer=``): the paper's settings (Fujimoto & Gu 2021:
    # alpha 2.5, state normalisation, lr 3e-4, batch 256, the TD3 noise and delay).
    "td3bc": AlgoDefaults(
        policy_cls=TD3BC,
        trainer_cls=OfflineTrainer,
        num_envs=0,
        buffer_size=None,
        policy={},  # TD3BC's own defaults are the paper's
        trainer={"max_epoch": 20, "step_per_epoch": 1000, "batch_size": 256},
    ),
    # CQL(H) on SAC on a given dataset (``buffer=``): Kumar et al. 2020 and d3rlpy's CQL
    # (actor lr 1e-4, critic lr 3e-4, temperature lr 1e-4, cql_alpha 5, 10 sampled actions
    # of each kind, 256x256 nets, batch 256).
    "cql": AlgoDefaults(
        policy_cls=CQL,
        trainer_cls=OfflineTrainer,
        num_envs=0,
        buffer_size=None,
        policy={},  # CQL's own defaults are the settings above
        trainer={"max_epoch": 20, "step_per_epoch": 1000, "batch_size": 256},
        # Pendulum-v1: 64x64 nets, faster rates than the paper's (which ended at -1202 after
        # 10k steps on one seed) and the temperature starting at 0.1 instead of 1 (from 1 it
        # spends the first epochs far too random; seed 0 ended at -898, with 0.1 near -150).
        per_env={
            "Pendulum-v1": {
                "hidden": (64, 64),
                "actor_lr": 3e-4,
                "critic_lr": 1e-3,
                "alpha_lr": 1e-3,
                "alpha": 0.1,
            },
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


def _default_stop_fn(env_id: str) -> Callable[[float], bool] | None:
    threshold = gym.spec(env_id).reward_threshold
    if threshold is None:
        return None
    limit = float(threshold)

    def stop_fn(best_test_return: float) -> bool:
        return best_test_return >= limit

    return stop_fn


def make_trainer(algo: str, env_id: str, *, seed: int = 0, **overrides: Any) -> BaseTrainer[Any]:
    """Build a trainer for ``algo`` (a key of :data:`DEFAULTS`) on the gymnasium task ``env_id``.

    Training envs (``num_envs``) and 10 test envs are ``gymnasium.make_vec(..., "sync")``
    with SAME_STEP autoreset. ``overrides`` may name any parameter of the policy class,
    of the trainer class, or of :data:`FACTORY_PARAMS`; any other name raises
    ``ValueError`` listing the allowed ones. Tuned settings for ``env_id`` (the entry's
    ``per_env``) apply over the algorithm's defaults, and ``overrides`` over both. The
    offline algorithms (``"bc"``, ``"td3bc"``, ``"cql"``) need ``buffer=`` (a filled
    :class:`ReplayBuffer`, e.g. ``ReplayBuffer.load(path)``). Logging goes to ``logger=`` if given,
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
    if overrides.get("prioritized_replay", False) and not issubclass(
        spec.trainer_cls, OffpolicyTrainer
    ):
        raise ValueError(
            f"prioritized_replay=True needs an off-policy algorithm (one that samples "
            f"minibatches from a replay buffer such as 'dqn'), got algo={algo!r}"
        )
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

    test_envs = make_envs(env_id, num_test_envs)
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
        train_envs = make_envs(env_id, num_envs)
        buffer = _make_buffer(int(capacity), num_envs, overrides, trainer_kw)
        trainer_kw["train_collector"] = Collector(policy, train_envs, buffer)
    trainer: BaseTrainer[Any] = spec.trainer_cls(policy=policy, seed=seed, **trainer_kw)
    # written to checkpoint manifests, so `epochtrain eval` and `--resume` can rebuild the run
    trainer.config.update(algo=algo, env_id=env_id, seed=seed, overrides=jsonable(overrides))
    return trainer


def _make_buffer(
    capacity: int, num_envs: int, overrides: Mapping[str, Any], trainer_kw: Mapping[str, Any]
) -> ReplayBuffer:
    """The training buffer: uniform, or prioritized when ``prioritized_replay`` is set."""
    if not overrides.get("prioritized_replay", False):
        return ReplayBuffer(capacity, num_envs)
    run_steps = int(trainer_kw.get("max_epoch", 1)) * int(trainer_kw["step_per_epoch"])
    return PrioritizedReplayBuffer(
        capacity,
        num_envs,
        alpha=float(overrides.get("priority_alpha", 0.6)),
        beta=float(overrides.get("priority_beta", 0.4)),
        beta_anneal_steps=run_steps,
    )


def _make_logger(logdir: str | None) -> Any:
    # imported here so that the factory does not load TensorBoard unless it is used
    from epochtrain.logger import LazyLogger, TensorboardLogger

    if logdir is None:
        return LazyLogger()
    return TensorboardLogger(logdir)
