"""Tiny deterministic fake envs and policies whose transitions can be computed by hand.

``CounterEnv(env_id, length)`` observes ``[env_id, episode, t]`` (float32): ``episode``
counts resets since the last seeded reset (the first reset gives 0), ``t`` counts steps
in the episode. Stepping with action ``a`` moves ``t`` to ``t + 1``, pays ``t + 1 + a``
and terminates when ``t + 1 == length``; :func:`make_counter_env` adds a ``TimeLimit``
that truncates after ``max_steps``. ``ParityPolicy`` plays ``(env_id + t) % 2`` (or 0
when asked for deterministic actions) and stores ``value = 10 * t`` as an extra, so every
stored field of every transition is predictable: see :func:`expected_transition`.

Everything is defined at module level so ``AsyncVectorEnv`` can pickle it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import TimeLimit
from torch import Tensor

from epochtrain.data import Batch, Obs


class CounterEnv(gym.Env[Any, np.int64]):
    """Counts steps; terminates after ``length`` steps; obs ``[env_id, episode, t]``."""

    def __init__(self, env_id: int = 0, length: int = 5) -> None:
        self.env_id = env_id
        self.length = length
        self.observation_space = gym.spaces.Box(-1e6, 1e6, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.episode = -1
        self.t = 0

    def _obs(self) -> Any:
        return np.array([self.env_id, self.episode, self.t], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.episode = 0 if seed is not None else self.episode + 1
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        reward = float(self.t + int(action))
        return self._obs(), reward, self.t >= self.length, False, {}


class DictCounterEnv(CounterEnv):
    """:class:`CounterEnv` with a nested dict observation.

    ``{"pos": [env_id, episode, t] (float32), "inner": {"t": [t] (int64)}}``.
    """

    def __init__(self, env_id: int = 0, length: int = 5) -> None:
        super().__init__(env_id, length)
        self.observation_space = gym.spaces.Dict(
            {
                "pos": gym.spaces.Box(-1e6, 1e6, shape=(3,), dtype=np.float32),
                "inner": gym.spaces.Dict(
                    {"t": gym.spaces.Box(0, 10**6, shape=(1,), dtype=np.int64)}
                ),
            }
        )

    def _obs(self) -> Any:
        return {"pos": super()._obs(), "inner": {"t": np.array([self.t], dtype=np.int64)}}


def make_counter_env(
    env_id: int, length: int, max_steps: int | None = None, dict_obs: bool = False
) -> gym.Env[Any, Any]:
    """A counter env, truncated by ``TimeLimit`` after ``max_steps`` if given."""
    env: gym.Env[Any, Any] = (DictCounterEnv if dict_obs else CounterEnv)(env_id, length)
    if max_steps is not None:
        env = TimeLimit(env, max_episode_steps=max_steps)
    return env


def make_vec(
    lengths: Sequence[int],
    *,
    max_steps: int | None = None,
    mode: AutoresetMode = AutoresetMode.NEXT_STEP,
    asynchronous: bool = False,
    dict_obs: bool = False,
) -> gym.vector.VectorEnv[Any, Any, Any]:
    """A vector of counter envs, env ``i`` terminating after ``lengths[i]`` steps."""
    fns: list[Callable[[], gym.Env[Any, Any]]] = [
        functools.partial(make_counter_env, i, n, max_steps, dict_obs)
        for i, n in enumerate(lengths)
    ]
    if asynchronous:
        return gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode, context="fork")
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)


def episode_len(length: int, max_steps: int | None = None) -> int:
    """Length of every episode of an env that terminates after ``length`` steps."""
    return length if max_steps is None else min(length, max_steps)


def parity_action(env_id: int, t: int) -> int:
    """The action :class:`ParityPolicy` plays when exploring."""
    return (env_id + t) % 2


def expected_return(env_id: int, length: int, max_steps: int | None = None) -> float:
    """Return of every episode of env ``env_id`` under an exploring :class:`ParityPolicy`."""
    n = episode_len(length, max_steps)
    return float(sum(t + 1 + parity_action(env_id, t) for t in range(n)))


@dataclass(frozen=True)
class Transition:
    """One stored transition of a counter env, as plain numbers (easy to compare)."""

    obs: tuple[float, ...]
    act: int
    rew: float
    terminated: bool
    truncated: bool
    obs_next: tuple[float, ...]
    value: float


def expected_transitions(
    env_id: int, length: int, n: int, max_steps: int | None = None
) -> list[Transition]:
    """The first ``n`` transitions of env ``env_id`` after a reset (exploring policy)."""
    ep_len = episode_len(length, max_steps)
    out = []
    for k in range(n):
        episode, t = divmod(k, ep_len)
        a = parity_action(env_id, t)
        end = t + 1 == ep_len
        terminated = end and length <= ep_len
        out.append(
            Transition(
                obs=(env_id, episode, t),
                act=a,
                rew=float(t + 1 + a),
                terminated=terminated,
                truncated=end and not terminated,
                obs_next=(env_id, episode, t + 1),
                value=10.0 * t,
            )
        )
    return out


def stored_transitions(batch: Batch, env: int) -> list[Transition]:
    """The valid transitions of column ``env`` of a ``[time, env]`` rollout, in order."""
    obs, obs_next = batch.obs, batch.obs_next
    if isinstance(obs, dict) and isinstance(obs_next, dict):
        obs, obs_next = obs["pos"], obs_next["pos"]
    assert isinstance(obs, Tensor) and isinstance(obs_next, Tensor)
    assert batch.valid is not None and batch.value is not None
    out = []
    for t in range(batch.shape[0]):
        if not bool(batch.valid[t, env]):
            continue
        out.append(
            Transition(
                obs=tuple(obs[t, env].tolist()),
                act=int(batch.act[t, env]),
                rew=float(batch.rew[t, env]),
                terminated=bool(batch.terminated[t, env]),
                truncated=bool(batch.truncated[t, env]),
                obs_next=tuple(obs_next[t, env].tolist()),
                value=float(batch.value[t, env]),
            )
        )
    return out


class ParityPolicy:
    """An ``Actor``: plays ``(env_id + t) % 2``, or 0 when deterministic; value = 10 t.

    Records the ``deterministic`` flag of every ``act`` call in ``calls``.
    """

    def __init__(self) -> None:
        self.calls: list[bool] = []

    def to_tensor(self, obs: Obs) -> Obs:
        return obs

    def act(self, obs: Obs, deterministic: bool = False) -> tuple[Tensor, dict[str, Tensor]]:
        self.calls.append(deterministic)
        pos = obs["pos"] if isinstance(obs, dict) else obs
        assert isinstance(pos, Tensor)
        env_id, t = pos[:, 0].long(), pos[:, 2].long()
        act = torch.zeros_like(t) if deterministic else (env_id + t) % 2
        return act, {"value": 10.0 * pos[:, 2]}


class ShiftedActions(gym.Env[np.ndarray, np.int64]):
    """Actions 5, 6, 7 (``Discrete(3, start=5)``); the reward is the action received and
    an episode lasts 4 steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(3, start=5)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, Any]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        assert action in self.action_space, action
        self.t += 1
        return np.full(2, self.t / 4, np.float32), float(action), self.t == 4, False, {}


SHIFTED_ACTIONS = "ShiftedActions-v0"
gym.register(SHIFTED_ACTIONS, entry_point=f"{__name__}:ShiftedActions")  # an id Minari stores
