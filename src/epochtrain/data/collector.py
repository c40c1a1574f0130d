"""Collector: steps a gymnasium vector env with a policy and writes transitions to a buffer.

Both autoreset modes of ``gymnasium.vector`` are handled, read from
``env.metadata["autoreset_mode"]``:

* SAME_STEP: the step that ends an episode returns the next episode's first observation;
  the true final observation (in ``info["final_obs"]``) becomes ``obs_next``, so truncated
  episodes bootstrap from it.
* NEXT_STEP: the step that ends an episode returns the final observation itself; the env's
  next step only resets it. That reset step is stored with ``valid=False`` and is never
  sampled, learned from or counted as an env step.

Per-step Python work is O(1) in the number of envs except at episode ends.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from epochtrain.data.batch import ActResult, Obs
from epochtrain.data.buffer import ReplayBuffer
from epochtrain.stats import CollectStats

__all__ = ["Actor", "Collector"]


class Actor(Protocol):
    """What the collector needs of a policy (every :class:`~epochtrain.Policy` is one)."""

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        """Actions and extras for a batch of observations."""

    def to_tensor(self, obs: Obs) -> Obs:
        """Observations moved to the policy's device."""


def _to_tensor(obs: Any) -> Obs:
    if isinstance(obs, dict):
        return {k: _to_tensor(v) for k, v in obs.items()}
    return torch.as_tensor(obs)


def _set_row(obs: Any, i: int, value: Any) -> None:
    if isinstance(obs, dict):
        for k in obs:
            _set_row(obs[k], i, value[k])
    else:
        obs[i] = value


def _copy(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: _copy(v) for k, v in obs.items()}
    return obs.copy()


class Collector:
    """Collects transitions from ``env`` with ``policy`` into ``buffer`` (if given).

    ``exploration=False`` makes the policy act deterministically (for testing). The
    collector keeps in-flight episodes between ``collect`` calls; ``reset`` starts over.
    """

    def __init__(
        self,
        policy: Actor,
        env: gym.vector.VectorEnv[Any, Any, Any],
        buffer: ReplayBuffer | None = None,
        *,
        exploration: bool = True,
    ) -> None:
        if not isinstance(env, gym.vector.VectorEnv):
            raise TypeError(
                f"env must be a gymnasium.vector.VectorEnv, got {type(env).__name__}: wrap it "
                "with gymnasium.vector.SyncVectorEnv([...]) or gymnasium.make_vec(...)"
            )
        mode = AutoresetMode(env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
        if mode == AutoresetMode.DISABLED:
            raise ValueError(
                "env has autoreset_mode=DISABLED; the Collector needs NEXT_STEP or SAME_STEP "
                "(create it with vector_kwargs={'autoreset_mode': AutoresetMode.SAME_STEP})"
            )
        if buffer is not None and buffer.num_envs != env.num_envs:
            raise ValueError(
                f"buffer.num_envs ({buffer.num_envs}) must equal env.num_envs ({env.num_envs})"
            )
        self.policy = policy
        self.env = env
        self.buffer = buffer
        self.exploration = exploration
        self.num_envs = env.num_envs
        self.same_step = mode == AutoresetMode.SAME_STEP
        self._obs: Any = None
        self._ep_return = np.zeros(self.num_envs)
        self._ep_len = np.zeros(self.num_envs, dtype=np.int64)
        self._resetting = np.zeros(self.num_envs, dtype=bool)

    def reset(self, seed: int | None = None) -> None:
        """Reset every env (seeded with ``seed + i`` when ``seed`` is given)."""
        self._obs, _ = self.env.reset(seed=seed)
        self._ep_return[:] = 0.0
        self._ep_len[:] = 0
        self._resetting[:] = False

    def collect(
        self,
        n_step: int | None = None,
        n_episode: int | None = None,
        *,
        random: bool = False,
    ) -> CollectStats:
        """Collect at least ``n_step`` env steps, or exactly ``n_episode`` episodes.

        Episodes are spread evenly over the envs (env ``i`` contributes
        ``n_episode // num_envs`` plus one for the first ``n_episode % num_envs`` envs),
        so short episodes are not over-represented. ``random=True`` samples actions from
        the action space instead of asking the policy (warm-up).
        """
        if (n_step is None) == (n_episode is None):
            raise ValueError(
                f"give exactly one of n_step and n_episode, got n_step={n_step!r}, "
                f"n_episode={n_episode!r}"
            )
        if n_step is not None and n_step < 1:
            raise ValueError(f"n_step must be a positive int, got {n_step!r}")
        if n_episode is not None and n_episode < 1:
            raise ValueError(f"n_episode must be a positive int, got {n_episode!r}")
        if self._obs is None:
            self.reset()
        if n_episode is not None:
            quota = np.full(self.num_envs, n_episode // self.num_envs, dtype=np.int64)
            quota[: n_episode % self.num_envs] += 1
        else:
            quota = np.zeros(0, dtype=np.int64)
        return self._run(n_step, quota, random)

    def _run(self, n_step: int | None, quota: np.ndarray, random: bool) -> CollectStats:
        start = time.perf_counter()
        env, buffer, policy = self.env, self.buffer, self.policy
        deterministic = not self.exploration
        want_episodes = n_step is None
        remaining = quota.copy()
        returns: list[float] = []
        lens: list[int] = []
        steps = 0
        obs = self._obs
        no_extras: dict[str, np.ndarray] = {}
        while True:
            if random:
                act = env.action_space.sample()
                extras = no_extras
            else:
                with torch.inference_mode():
                    act_t, extras_t = policy.act(policy.to_tensor(_to_tensor(obs)), deterministic)
                act = act_t.cpu().numpy()
                extras = {k: v.cpu().numpy() for k, v in extras_t.items()}
            obs_next, rew, terminated, truncated, info = env.step(act)
            done = terminated | truncated
            any_done = bool(done.any())
            if self.same_step:
                valid = None
                real_next = obs_next
                if any_done:
                    real_next = _copy(obs_next)
                    final_obs = info["final_obs"]
                    for i in np.flatnonzero(done):
                        _set_row(real_next, int(i), final_obs[i])
                steps += self.num_envs
                self._ep_return += rew
                self._ep_len += 1
            else:
                real_next = obs_next
                valid = ~self._resetting
                n_valid = int(valid.sum())
                steps += n_valid
                if n_valid == self.num_envs:
                    valid = None
                    self._ep_return += rew
                    self._ep_len += 1
                else:
                    self._ep_return[self._resetting] = 0.0
                    self._ep_len[self._resetting] = 0
                    self._ep_return += rew * valid
                    self._ep_len += valid
                self._resetting = done
            if buffer is not None:
                buffer.add(obs, act, rew, terminated, truncated, real_next, extras, valid)
            obs = obs_next
            if any_done:
                for i in np.flatnonzero(done):
                    if not want_episodes or remaining[i] > 0:
                        returns.append(float(self._ep_return[i]))
                        lens.append(int(self._ep_len[i]))
                        if want_episodes:
                            remaining[i] -= 1
                    self._ep_return[i] = 0.0
                    self._ep_len[i] = 0
                if want_episodes and not remaining.any():
                    break
            if not want_episodes and n_step is not None and steps >= n_step:
                break
        self._obs = obs
        return CollectStats.from_episodes(steps, returns, lens, time.perf_counter() - start)

    def state_dict(self) -> dict[str, Any]:
        """The in-flight episodes: current observations, partial returns and lengths."""
        return {
            "obs": _copy(self._obs) if self._obs is not None else None,
            "ep_return": self._ep_return.copy(),
            "ep_len": self._ep_len.copy(),
            "resetting": self._resetting.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the in-flight episode state saved by :meth:`state_dict`."""
        self._obs = state["obs"]
        self._ep_return = np.array(state["ep_return"], dtype=np.float64)
        self._ep_len = np.array(state["ep_len"], dtype=np.int64)
        self._resetting = np.array(state["resetting"], dtype=bool)
