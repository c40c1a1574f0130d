"""Env faults: find the sub-env behind a non-finite value or an exception, and stop workers.

The :class:`~epochtrain.data.collector.Collector` calls these only once something went
wrong (a per-step reduction was not finite, ``step()``/``reset()``/``close()`` raised), so
none of them is on its per-step path.
"""

from __future__ import annotations

import types
from typing import Any

import gymnasium as gym
import numpy as np

from epochtrain.data.env_snapshots import env_levels
from epochtrain.errors import NonFiniteError

__all__ = ["check_finite", "env_label", "failed_sub_env", "terminate_workers"]


def check_finite(env: Any, obs: Any, rew: np.ndarray | None, steps: int) -> None:
    """Raise ``NonFiniteError`` naming the first sub-env whose obs or reward is NaN or inf
    (run only when the cheap per-step reduction was not finite)."""
    leaves = [obs] if not isinstance(obs, dict) else _float_leaves(obs)
    n = len(rew) if rew is not None else len(leaves[0])
    bad_obs = np.zeros(n, dtype=bool)
    for leaf in leaves:
        if isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f":
            bad_obs |= ~np.isfinite(leaf.reshape(n, -1)).all(axis=1)
    bad_rew = np.zeros(n, dtype=bool) if rew is None else ~np.isfinite(rew)
    bad = np.flatnonzero(bad_obs | bad_rew)
    if len(bad) == 0:
        return  # the sum overflowed on large finite values
    i = int(bad[0])
    what = "observation" if bad_obs[i] else "reward"
    if bad_obs[i]:
        value = repr(obs if isinstance(obs, dict) else obs[i])
    else:
        assert rew is not None  # a reward is bad only where there are rewards
        value = repr(rew[i]) + ("; a reward of None reads as nan too" if np.isnan(rew[i]) else "")
    env_id = env_label(env, i)
    guard = "TransformObservation" if bad_obs[i] else "TransformReward"
    raise NonFiniteError(
        f"the {what} of sub-env {i} of {env_id!r} is not finite ({what} {value}) after "
        f"{steps} env steps of this collect step; check the env (or wrap it in a NaN "
        f"guard, e.g. gymnasium.wrappers.{guard})",
        where=f"{what} of sub-env {i} of {env_id!r}",
        env_step=steps,
    )


def _float_leaves(obs: dict[str, Any]) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for value in obs.values():
        out += _float_leaves(value) if isinstance(value, dict) else [value]
    return out


def env_label(env: Any, sub_env: int | None) -> str:
    """The gymnasium id of ``env`` (of its sub-env ``sub_env`` if the vector env has none)."""
    for level in env_levels(env):
        spec_id = getattr(getattr(level, "spec", None), "id", None)
        if spec_id:
            return str(spec_id)
        subs = getattr(level, "envs", None)
        if subs and sub_env is not None and 0 <= sub_env < len(subs):
            spec_id = getattr(getattr(subs[sub_env], "spec", None), "id", None)
            if spec_id:
                return str(spec_id)
            return type(subs[sub_env].unwrapped).__name__
    return type(env.unwrapped).__name__


def failed_sub_env(env: Any, exc: BaseException) -> int | None:
    """Which sub-env raised ``exc``: the loop index of ``SyncVectorEnv``'s frame when the
    next frame is that sub-env's (not when the vector env's own code failed after its loop,
    e.g. joining observations of different shapes), or the worker whose pipe
    ``AsyncVectorEnv`` shut down."""
    base = env.unwrapped
    if isinstance(base, gym.vector.SyncVectorEnv):
        subs = list(base.envs or [])
        tb: types.TracebackType | None = exc.__traceback__
        while tb is not None:
            frame, inner = tb.tb_frame, tb.tb_next
            i = frame.f_locals.get("i")
            if frame.f_locals.get("self") is base and isinstance(i, int):
                called = inner.tb_frame.f_locals.get("self") if inner is not None else None
                return i if 0 <= i < len(subs) and called is subs[i] else None
            tb = inner
    pipes = getattr(base, "parent_pipes", None)
    if pipes is not None:
        failed = [i for i, pipe in enumerate(pipes) if pipe is None]
        if failed:
            return failed[0]
    return None


def terminate_workers(env: Any) -> None:
    for process in getattr(env.unwrapped, "processes", None) or []:
        if process.is_alive():
            process.terminate()
        process.join(timeout=5)
