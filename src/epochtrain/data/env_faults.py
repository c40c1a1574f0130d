"""Env faults: find the sub-env behind a non-finite value or an exception, and stop workers.

A non-finite value is NaN or inf, or a finite float64 beyond float32's range: the replay
buffer stores it as float32, where it is inf (:data:`F32_MAX`). The env's data (observations,
rewards) is checked after each step; the actions before the env gets them, so that a NaN
the policy chose is blamed on the policy (:func:`check_actions`), not on the env it would
have made return NaN. The :class:`~epochtrain.data.collector.Collector` calls these only once
something went wrong (a per-step reduction was not below its bound, ``step()``/``reset()``/
``close()`` raised), so none of them is on its per-step path, but those reductions:
:func:`array_fits`, :func:`leaves_fit` for dict observations and :func:`actions_fit`.

An ``AsyncVectorEnv`` whose worker process died, or hung in a call that was cut short or
given up, cannot be closed the graceful way (gymnasium's close waits for replies that never
come): :func:`end_workers` ends its processes and marks it closed.
"""

from __future__ import annotations

import math
import multiprocessing.connection
import signal
import types
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from epochtrain.data.env_snapshots import env_levels
from epochtrain.errors import NonFiniteError

__all__ = [
    "F32_MAX",
    "F32_SQUARED",
    "actions_fit",
    "array_fits",
    "check_actions",
    "check_extras",
    "check_finite",
    "dead_worker",
    "dead_worker_message",
    "end_workers",
    "env_label",
    "extras_fit",
    "failed_sub_env",
    "has_workers",
    "killed_worker",
    "leaves_fit",
    "nonfinite_tensor",
    "policy_fault",
    "terminate_workers",
]


F32_MAX = float(np.finfo(np.float32).max)
"""The largest float32: a float64 value beyond it is inf in the replay buffer, which stores
float64 observations and actions, and every reward, as float32."""
F32_SQUARED = F32_MAX * F32_MAX
"""The collector's per-step bound on a float64 array's sum of squares (``np.vdot(x, x)``):
below it, every value is finite and within float32's range; at or above it (or NaN), a
value may not be, and :func:`check_finite` looks. Squares cannot cancel, as a sum can."""

_FIXES = {
    "observation": "gymnasium.wrappers.TransformObservation",
    "reward": "gymnasium.wrappers.TransformReward",
    "action": "gymnasium.wrappers.RescaleAction",
}


def check_finite(env: Any, obs: Any, rew: np.ndarray | None, steps: int) -> None:
    """Raise ``NonFiniteError`` naming the first sub-env whose observation or reward is NaN
    or inf, or finite but beyond float32's range (it would be inf once stored: see
    :data:`F32_MAX`). Run only when the cheap per-step reduction was not below its bound."""
    leaves = [obs] if not isinstance(obs, dict) else _float_leaves(obs)
    n = len(rew) if rew is not None else len(leaves[0])
    found: dict[str, tuple[np.ndarray, np.ndarray]] = {
        "observation": _bad_rows([leaf for leaf in leaves if isinstance(leaf, np.ndarray)], n),
        "reward": _bad_rows([] if rew is None else [np.asarray(rew, dtype=np.float64)], n),
    }
    bad = np.zeros(n, dtype=bool)
    for nonfinite, overflow in found.values():
        bad |= nonfinite | overflow
    if not bad.any():
        return  # large finite values whose reduction overflowed
    i = int(np.flatnonzero(bad)[0])
    what = next(k for k, (nonfinite, overflow) in found.items() if nonfinite[i] or overflow[i])
    source = obs if what == "observation" else rew
    value = repr(_row(source, i))
    env_id = env_label(env, i)
    where = f"{what} of sub-env {i} of {env_id!r}"
    if found[what][0][i]:
        if what == "reward" and np.isnan(np.asarray(rew, dtype=np.float64)[i]):
            value += "; a reward of None reads as nan too"
        message = (
            f"the {where} is not finite ({what} {value}) after {steps} env steps of this "
            f"collect step; check the env (or wrap it in a NaN guard, e.g. {_FIXES[what]})"
        )
    else:
        message = (
            f"the {where} is {value}: finite, but it overflows the replay buffer's float32 "
            f"storage (beyond +-{F32_MAX:.4g}, it would be stored as inf and make every "
            f"loss learned from it inf), after {steps} env steps of this collect step; "
            f"scale or clip the env's {what}s into float32's range (e.g. {_FIXES[what]})"
        )
    raise NonFiniteError(message, where=where, env_step=steps)


def array_fits(x: np.ndarray) -> bool:
    """The per-step check of one float array (one reduction): True when it can hold no NaN,
    inf or, if wider than float32, no value beyond float32's range (its sum of squares is
    below :data:`F32_SQUARED`); False sends it to :func:`check_finite`, which decides.

    One value (the reward of one env) is read as a Python float, no numpy call. A float32
    array's sum of squares (``np.vdot``, about half the time of ``sum`` on a few values)
    must be finite: squares overflow beyond about 1.8e19, which :func:`check_finite` then
    lets pass (an env whose observations are that large pays that check on every step).
    """
    if x.size == 1:
        value: float = x.item()
        return abs(value) <= F32_MAX  # False for NaN and inf too
    if x.dtype.itemsize > 4:
        return bool(np.vdot(x, x) < F32_SQUARED)
    if x.dtype.itemsize == 4:
        return math.isfinite(np.vdot(x, x))
    return math.isfinite(x.sum())


def actions_fit(act: np.ndarray) -> bool:
    """The per-step check of a batch of float actions, before the env gets them: True when
    none can be NaN, inf or (float64) beyond float32's range. One action (one env, one
    dimension: Pendulum) is read as a Python float, no numpy call; a batch is one reduction,
    :func:`array_fits`, but a float32 batch's sum of squares (``np.vdot``, half the time of
    ``sum`` on a few values) must be finite: squares overflow for an action beyond about
    1.8e19, which :func:`check_actions` then lets pass."""
    if act.size == 1:
        value: float = act.item()
        return abs(value) <= F32_MAX  # False for NaN and inf too
    if act.dtype.itemsize == 4:
        return math.isfinite(np.vdot(act, act))
    return array_fits(act)


def check_actions(env: Any, act: np.ndarray, steps: int, policy: object | None) -> None:
    """Raise ``NonFiniteError`` naming the first sub-env whose action is NaN or inf, or finite
    but beyond float32's range in a float64 batch, before the env steps on it: ``policy``'s
    actions, or the random warm-up's (``policy=None``: sampled from the env's action space).

    A policy's bad action is blamed on the policy, with the likely cause: its first
    non-finite weight (a gradient step wrote it, though its loss was finite), or else its
    ``act``. Run only when :func:`actions_fit` was False."""
    nonfinite, overflow = _bad_rows([act], len(act))
    if not (nonfinite | overflow).any():
        return  # large finite actions whose squares overflowed
    i = int(np.flatnonzero(nonfinite | overflow)[0])
    where = f"action of sub-env {i} of {env_label(env, i)!r}"
    value = repr(act[i])
    if policy is None:
        chose = f"the {where}, sampled from the env's action space for the random warm-up,"
        fix = f"scale or clip the env's actions into float32's range (e.g. {_FIXES['action']})"
    else:
        chose = f"the {where}, chosen by the policy ({type(policy).__name__}),"
        fix = "scale the policy's actions into float32's range (or return float32 actions)"
    if nonfinite[i]:
        cause = "check the env's action space" if policy is None else policy_fault(policy)
        message = f"{chose} is not finite (action {value}): {cause}"
    else:
        message = (
            f"{chose} is {value}: finite, but it overflows the replay buffer's float32 "
            f"storage (beyond +-{F32_MAX:.4g}, it would be stored as inf and make every "
            f"loss learned from it inf); {fix}"
        )
    raise NonFiniteError(
        f"{message} (the action was neither sent to the env nor stored, after {steps} env "
        "steps of this collect step)",
        where=where,
        env_step=steps,
    )


def check_extras(env: Any, extras: dict[str, np.ndarray], steps: int, policy: object) -> None:
    """Raise ``NonFiniteError`` naming the first float extra (``logp``, ``value``, ...) the
    policy returned with its actions that is NaN or inf (or, float64, beyond float32's
    range) and the first sub-env it is so for, blaming the policy as :func:`check_actions`
    does, before the transition is stored. Run only when :func:`extras_fit` was False."""
    for key, value in extras.items():
        if value.dtype.kind != "f" or value.ndim == 0:
            continue
        nonfinite, overflow = _bad_rows([value], len(value))
        if not (nonfinite | overflow).any():
            continue
        i = int(np.flatnonzero(nonfinite | overflow)[0])
        where = f"extra {key!r} of sub-env {i} of {env_label(env, i)!r}"
        chose = f"the {where}, returned by the policy ({type(policy).__name__}) with its action,"
        if nonfinite[i]:
            message = f"{chose} is not finite ({key} {value[i]!r}): {policy_fault(policy)}"
        else:
            message = (
                f"{chose} is {value[i]!r}: finite, but it overflows the replay buffer's float32 "
                "storage; return it in float32's range"
            )
        raise NonFiniteError(
            f"{message} (the transition was not stored, after {steps} env steps of this "
            "collect step)",
            where=where,
            env_step=steps,
        )


def extras_fit(extras: dict[str, np.ndarray]) -> bool:
    """The per-step check of the extras a policy returned (only when it returned some):
    :func:`actions_fit` of each float one (one env's value read as a Python float, else
    one reduction); False sends them to :func:`check_extras`."""
    return all(v.dtype.kind != "f" or actions_fit(v) for v in extras.values())


def policy_fault(policy: object, method: str = "act") -> str:
    """Why a policy gave a NaN or inf (an action, an extra, a log-probability made by its
    ``method``), as far as its weights tell: the first non-finite weight, or else
    ``method`` itself. A full scan of the weights: for fault messages only."""
    name = type(policy).__name__
    if not isinstance(policy, torch.nn.Module):
        return f"the policy is at fault, not the env: fix {name}.{method}"
    bad = nonfinite_tensor(policy)
    if bad is None:
        return (
            f"the policy is at fault, not the env; its weights are finite, so {name}.{method} "
            "made it (a log or a division of 0, a standard deviation of 0 or inf): fix "
            f"{method}"
        )
    return (
        f"the policy is at fault, not the env; its weight {bad!r} holds NaN or inf, written "
        "by a gradient step whose loss and gradient norm were finite (only those are "
        "checked) or by a hook: resume from the last good checkpoint, e.g. with a lower "
        "learning rate"
    )


def nonfinite_tensor(module: torch.nn.Module) -> str | None:
    """The name of ``module``'s first float parameter or buffer holding NaN or inf, or None.
    A full scan: for fault messages only, never per step."""
    tensors = [*module.named_parameters(), *module.named_buffers()]
    return next(
        (k for k, t in tensors if t.is_floating_point() and not bool(torch.isfinite(t).all())),
        None,
    )


def leaves_fit(obs: dict[str, Any]) -> bool:
    """:func:`array_fits` of every float leaf of a dict observation (nested dicts too)."""
    for leaf in obs.values():
        if isinstance(leaf, dict):
            if not leaves_fit(leaf):
                return False
        elif isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f" and not array_fits(leaf):
            return False
    return True


def _bad_rows(arrays: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of the float ``arrays`` (``n`` rows each): any value NaN or inf; any value
    finite but beyond float32's range in an array wider than float32 (the buffer keeps
    those as float32; every reward too, which is passed as float64)."""
    nonfinite = np.zeros(n, dtype=bool)
    overflow = np.zeros(n, dtype=bool)
    for arr in arrays:
        if arr.dtype.kind != "f":
            continue
        rows = arr.reshape(n, -1)
        finite = np.isfinite(rows)
        nonfinite |= ~finite.all(axis=1)
        if arr.dtype.itemsize > 4:
            with np.errstate(over="ignore"):
                stored = np.isfinite(rows.astype(np.float32))
            overflow |= (finite & ~stored).any(axis=1)
    return nonfinite, overflow


def _row(data: Any, i: int) -> Any:
    """Sub-env ``i``'s part of a batch (of each leaf of a dict observation)."""
    if isinstance(data, dict):
        return {k: _row(v, i) for k, v in data.items()}
    return np.asarray(data)[i]


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


def dead_worker(env: Any, exc: BaseException, wait: float = 1.0) -> tuple[int, int, str] | None:
    """For an ``AsyncVectorEnv`` that failed with ``exc``: the first worker process that has
    ended, as (sub-env index, pid, how it ended: "killed by SIGKILL", "exited with status
    1"), or None. After a pipe error (``EOFError``, or an ``OSError`` such as
    ``ConnectionResetError``, ``BrokenPipeError``) a process whose pipe closed may take a
    moment to be reaped: up to ``wait`` seconds are given for one to end."""
    processes = list(getattr(env.unwrapped, "processes", None) or [])
    if not processes:
        return None
    if isinstance(exc, EOFError | OSError) and all(p.exitcode is None for p in processes):
        ended = multiprocessing.connection.wait([p.sentinel for p in processes], timeout=wait)
        for process in processes:  # its pipes close a moment before it can be reaped
            if process.sentinel in ended:
                process.join(timeout=wait)
    for i, process in enumerate(processes):
        how = _how_ended(process.exitcode)
        if how is not None:
            return i, int(process.pid or 0), how
    return None


def killed_worker(env: Any) -> tuple[int, int, str] | None:
    """The first worker process of an ``AsyncVectorEnv`` that a signal has ended (the OOM
    killer's SIGKILL, a crash's SIGSEGV, a kill), as :func:`dead_worker` names it, or None;
    without waiting. One that exited on its own is not reported: it told the parent why
    through its pipe (an error of its env, a Ctrl-C it received), which the next call reads."""
    for i, process in enumerate(getattr(env.unwrapped, "processes", None) or []):
        code = process.exitcode
        if code is not None and code < 0:
            return i, int(process.pid or 0), str(_how_ended(code))
    return None


def _how_ended(code: int | None) -> str | None:
    """How a process with exit code ``code`` ended (None: it has not)."""
    if code is None:
        return None
    if code >= 0:
        return f"exited with status {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def dead_worker_message(
    dead: tuple[int, int, str], env_id: str, when: str, exc: BaseException | None
) -> str:
    """The message of an ``EnvError`` for the worker process ``dead`` (from
    :func:`dead_worker`) of the env ``env_id``, found ``when`` ("during step() after 5 env
    steps of this collect step"); ``exc``: the pipe's error, if one told."""
    i, pid, how = dead
    pipe = "" if exc is None else f" (its pipe: {type(exc).__name__}: {exc})"
    return (
        f"sub-env {i}'s process (pid {pid}) of {env_id!r} died ({how}) {when}{pipe}; the "
        "env did not raise: something ended its process (the out-of-memory killer, a kill, "
        "a crash in native code); check the system log (dmesg) and memory, then resume from "
        "the last checkpoint"
    )


def has_workers(env: Any) -> bool:
    """True for a vector env whose sub-envs run in worker processes (``AsyncVectorEnv``)."""
    return bool(getattr(env.unwrapped, "processes", None))


def terminate_workers(env: Any, wait: float = 5.0) -> None:
    """End the worker processes of ``env`` (an ``AsyncVectorEnv``; others have none):
    SIGTERM, then SIGKILL for one still alive ``wait`` seconds later; each is joined."""
    for process in getattr(env.unwrapped, "processes", None) or []:
        if process.is_alive():
            process.terminate()
        process.join(timeout=wait)
        if process.is_alive():  # deaf to SIGTERM (a handler, a call stuck in the kernel)
            process.kill()
            process.join(timeout=wait)


def end_workers(env: Any) -> None:
    """Close an ``AsyncVectorEnv`` without asking its worker processes anything: end them
    (:func:`terminate_workers`), close its pipes and mark it closed. For a worker that
    died, or one that owes the reply to a call that was cut short or given up (a hung
    env): gymnasium's close would wait for that reply for ever (or read EOF and raise),
    and its ``__del__`` would try again ("Exception ignored in ... EOFError"). A no-op
    for envs without worker processes; a later ``env.close()`` closes only the wrappers."""
    base = env.unwrapped
    if not has_workers(env):
        return
    terminate_workers(env)
    for pipe in getattr(base, "parent_pipes", None) or []:
        if pipe is not None:
            pipe.close()
    base.closed = True
