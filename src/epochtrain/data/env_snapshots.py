"""Env snapshots: pickle a vector env's state (sub-envs, RNGs, episodes) and put it back.

The :class:`~epochtrain.data.collector.Collector` stores :func:`env_snapshot` in its
``state_dict(include_env=True)`` and hands it to :func:`restore_env` on load. A snapshot is
unpickled resolving only the classes the live env is built from, so a crafted one cannot
run code. A ``SyncVectorEnv`` that does not pickle (a lambda in a wrapper, a closure entry
point) is warned about once, at its first failed snapshot: a resume would lose its state.
"""

from __future__ import annotations

import pickle
import warnings
import weakref
from typing import Any

import gymnasium as gym

from epochtrain.data.io import safe_unpickle

__all__ = ["env_levels", "env_snapshot", "restore_env", "unpickle_env"]


def env_levels(env: Any) -> list[Any]:
    """``env`` and the vector envs it wraps, outermost first."""
    levels = [env]
    while isinstance(levels[-1], gym.vector.VectorWrapper):
        levels.append(levels[-1].env)
    return levels


_NOT_STATE = ("env", "env_fns")  # links between wrapper levels, and env constructors


def env_snapshot(env: gym.vector.VectorEnv[Any, Any, Any]) -> bytes | None:
    """Pickled attributes of ``env`` and of the vector envs it wraps; ``None`` if they do
    not pickle (``AsyncVectorEnv``: worker processes and pipes).

    The env constructors (``env_fns``) are left out: they are how the env was built, not
    its state, and ``gymnasium.make_vec``'s are local functions that do not pickle.
    """
    levels = [
        {k: v for k, v in vars(level).items() if k not in _NOT_STATE} for level in env_levels(env)
    ]
    try:
        return pickle.dumps(levels)
    except Exception as exc:  # any pickling failure (TypeError, PicklingError, ...)
        _warn_unpicklable(env, exc)
        return None


_WARNED: weakref.WeakSet[Any] = weakref.WeakSet()
"""Vector envs already warned about: a snapshot is taken at every epoch start (the
roll-back's), and the warning is wanted once per env, under any warnings filter."""


def _warn_unpicklable(env: gym.vector.VectorEnv[Any, Any, Any], exc: Exception) -> None:
    """Warn, once per env, that the sync vector ``env`` did not pickle (``exc``): its state
    is not in the checkpoints. Envs documented as not saved (``AsyncVectorEnv``'s worker
    processes, EnvPool's pool) have no sub-envs in this process and are not warned about."""
    if not isinstance(env.unwrapped, gym.vector.SyncVectorEnv) or env in _WARNED:
        return
    _WARNED.add(env)
    warnings.warn(
        f"the envs cannot be pickled ({type(exc).__name__}: {exc}), so checkpoints "
        "hold no snapshot of them: a resume restarts their in-flight episodes and loses the "
        "state of their wrappers (NormalizeObservation's and NormalizeReward's statistics, "
        "for instance). Make them picklable: register the env with a module-level entry "
        "point (a function or class defined at the top of a module, not inside another "
        "function) and give wrappers functions defined with def at module level instead of "
        "lambdas; or normalise with epochtrain's ObservationNormalizer and RewardNormalizer "
        "hooks, whose statistics are saved",
        UserWarning,
        stacklevel=2,
    )


def restore_env(env: gym.vector.VectorEnv[Any, Any, Any], snapshot: bytes) -> None:
    """Put the state of :func:`env_snapshot` back into ``env`` (built the same way)."""
    levels = env_levels(env)
    saved: list[dict[str, Any]] = unpickle_env(env, snapshot)
    if len(saved) != len(levels):
        raise ValueError(
            f"the saved env has {len(saved)} vector wrapper levels, this env has {len(levels)}: "
            "build the envs as the checkpointed run did"
        )
    for level, attrs in zip(levels, saved, strict=True):
        for sub_env in getattr(level, "envs", None) or []:
            sub_env.close()  # replaced by the saved sub-envs below
        vars(level).update(attrs)


def unpickle_env(env: gym.vector.VectorEnv[Any, Any, Any], snapshot: bytes) -> Any:
    """An env snapshot, unpickled resolving only classes the live ``env`` is built from
    (and gymnasium's, numpy's, epochtrain's): a crafted snapshot cannot run code."""
    modules = set()
    for level in env_levels(env):
        modules.add(type(level).__module__)
        for sub_env in getattr(level, "envs", None) or []:
            while True:
                modules.add(type(sub_env).__module__)
                if not hasattr(sub_env, "env"):
                    break
                sub_env = sub_env.env
    return safe_unpickle(snapshot, allowed_modules=modules, what="the checkpoint's env snapshot")
