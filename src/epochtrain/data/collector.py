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

Faults: every step's float actions are checked for NaN and inf before the env gets them,
and every step's observations and rewards after it, and the float64 ones for values beyond
float32's range, which the buffer would store as inf, with one vectorised reduction each (a
``NonFiniteError`` names the sub-env; a bad action names the policy, not the env, and is
neither stepped on nor stored; so is a NaN or inf float extra the policy returned with
it, such as a ``logp``). An exception in the env's ``step()`` or ``reset()``, a dead
``AsyncVectorEnv`` worker process and a call cut short by Ctrl-C or SIGTERM are handled as
:mod:`epochtrain.data.collector_processes` says (``close``, ``give_up`` and
``check_env_processes`` live there); the hot loop's row helpers are in
:mod:`epochtrain.data.collector_rows`.

A policy built for other spaces than the envs' is refused when the collector is built
(:func:`~epochtrain.data.spaces.check_policy_spaces`, re-exported here).

The policy's actions reach the env through :func:`~epochtrain.data.actions.env_action_map`
(clipped to a bounded Box, shifted to a ``Discrete``'s ``start``); the buffer keeps the
policy's own actions.

An optional ``obs_transform(obs, update)`` (set by an on-policy ``ObservationNormalizer``)
maps every observation the env returns before the policy or the buffer sees it; an optional
``act_obs_transform(obs, update)`` (set by an off-policy one) maps only what the policy acts
on, so the buffer keeps the observations as they were (raw; a learner normalises each sampled
minibatch with the statistics of that moment). ``update`` is True for new observations and
False for the final observations of finished episodes and for the current observations,
mapped again when a ``collect`` call starts (the policy acts on them; they were new before).

``state_dict``, ``check_state_dict`` and ``load_state_dict`` (the in-flight episodes, and
with ``include_env=True`` the vector env when it pickles) live in
:mod:`epochtrain.data.collector_state`.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from epochtrain.data.actions import env_action_map, policy_action_map
from epochtrain.data.batch import ActResult, Obs
from epochtrain.data.buffer import ReplayBuffer
from epochtrain.data.collector_rows import (
    _copy,
    _inference_act,
    _to_tensor,
    _transformed_rows,
    _with_final_obs,
)
from epochtrain.data.collector_state import _CollectorState
from epochtrain.data.env_faults import (
    actions_fit,
    array_fits,
    check_actions,
    check_extras,
    check_finite,
    env_label,
    extras_fit,
    leaves_fit,
)
from epochtrain.data.spaces import check_policy_spaces
from epochtrain.stats import CollectStats

__all__ = ["Actor", "Collector", "ObsTransform", "check_policy_spaces"]

LONG_EPISODE = 100_000
"""Steps after which an episode that ``collect`` waits for draws a warning (once)."""

ObsTransform = Callable[[np.ndarray, bool], np.ndarray]
"""``transform(obs, update) -> obs``: maps a batch of observations (``update``: new data)."""


class Actor(Protocol):
    """What the collector needs of a policy (every :class:`~epochtrain.Policy` is one)."""

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        """Actions and extras for a batch of observations."""

    def to_tensor(self, obs: Obs) -> Obs:
        """Observations moved to the policy's device."""


class Collector(_CollectorState):
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
                f"buffer.num_envs ({buffer.num_envs}) must equal env.num_envs ({env.num_envs}): "
                f"build the buffer for these envs, ReplayBuffer(capacity, {env.num_envs})"
            )
        check_policy_spaces(policy, env)
        self.policy = policy
        self.env = env
        self.buffer = buffer
        self.exploration = exploration
        self.num_envs = env.num_envs
        self.same_step = mode == AutoresetMode.SAME_STEP
        bounded = getattr(policy, "bounded_actions", False)  # no clip needed: it costs µs
        space = env.single_action_space
        self._to_env = (
            None if bounded and isinstance(space, gym.spaces.Box) else env_action_map(space)
        )
        self._from_env = policy_action_map(env.single_action_space)
        # With copy=False the env overwrites its observation array in place on each step.
        self._copy_obs = not getattr(env.unwrapped, "copy", True)
        self._obs: Any = None
        self._ep_return = np.zeros(self.num_envs)
        self._ep_len = np.zeros(self.num_envs, dtype=np.int64)
        # NEXT_STEP only: envs whose next step merely resets them (they ended last step).
        self._resetting: np.ndarray = np.zeros(0, dtype=np.int64)
        self.obs_transform: ObsTransform | None = None
        """Applied to every observation from the env (array observations only)."""
        self.act_obs_transform: ObsTransform | None = None
        """Applied (after ``obs_transform``) to the observations the policy acts on only:
        the buffer and :meth:`state_dict` keep them untransformed (array observations only)."""
        self.last_collect_rows = 0
        """Vector steps (buffer rows) of the last ``collect`` call."""
        self._warned_long = False
        self._unusable: str | None = None  # why the env's processes may owe a reply

    def reset(self, seed: int | None = None) -> None:
        """Reset every env (seeded with ``seed + i`` when ``seed`` is given).

        The episodes in progress are abandoned: they count in no ``CollectStats``, and the
        buffer's newest transition of each env is marked truncated
        (:meth:`ReplayBuffer.end_episodes`), so n-step returns stop there. An env process
        found dead (:meth:`check_env_processes`) and envs that take no further call (see
        :meth:`give_up`) raise ``EnvError``.
        """
        obs = self._reset_envs(seed)
        if self.obs_transform is not None:
            obs = self.obs_transform(obs, True)
        if self.act_obs_transform is not None:  # new data for its statistics; the policy's
            self.act_obs_transform(obs, True)  # copy is made again when a collect starts
        self._obs = _copy(obs) if self._copy_obs else obs
        self._ep_return[:] = 0.0
        self._ep_len[:] = 0
        self._resetting = np.zeros(0, dtype=np.int64)

    def _reset_envs(self, seed: int | None) -> Any:
        """Reset the envs (:meth:`reset` without the observation transforms); their first
        observations, checked finite."""
        self.check_env_processes()  # envs given up on are refused there too
        try:
            obs, _ = self.env.reset(seed=seed)
        except Exception as exc:
            self._env_failed(exc, "reset", 0)
        except BaseException:  # Ctrl-C, SIGTERM: the env processes may owe the replies
            self._cut_short("reset")
            raise
        if self.buffer is not None:
            self.buffer.end_episodes()
        check_finite(self.env, obs, None, 0)
        return obs

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
        for name, value in (("n_step", n_step), ("n_episode", n_episode)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1
            ):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self._unusable is not None:
            self._refuse()
        if self._obs is None:
            self.reset()
        if n_episode is not None:
            quota = np.full(self.num_envs, n_episode // self.num_envs, dtype=np.int64)
            quota[: n_episode % self.num_envs] += 1
        else:
            quota = np.zeros(0, dtype=np.int64)
        return self._run(n_step, quota, random)

    def _run(self, n_step: int | None, quota: np.ndarray, random: bool) -> CollectStats:
        # The hot loop: locals instead of attributes, no per-step dicts, and numpy work
        # per env only at episode ends.
        start = time.perf_counter()
        env, policy, num_envs = self.env, self.policy, self.num_envs
        add = self.buffer.add if self.buffer is not None else None
        deterministic, same_step, copy_obs = not self.exploration, self.same_step, self._copy_obs
        ep_return, ep_len = self._ep_return, self._ep_len
        remaining = quota.copy() if n_step is None else None
        returns: list[float] = []
        lens: list[int] = []
        steps = 0
        obs, resetting = self._obs, self._resetting
        transform, act_transform = self.obs_transform, self.act_obs_transform
        # what the policy acts on: the current obs, mapped with the statistics they updated
        act_obs = obs if act_transform is None else act_transform(obs, False)
        rows = 0
        no_extras: dict[str, np.ndarray] = {}
        extras = no_extras
        float_obs = isinstance(obs, np.ndarray) and obs.dtype.kind == "f"
        dict_obs = isinstance(obs, dict)
        to_env, from_env = self._to_env, self._from_env
        policy_act, direct = _inference_act(policy, act_obs)
        # ep_len holds each episode's length minus ``rows`` while the loop runs: one
        # counter instead of an array add per step; made lengths again however it ends
        try:
            with torch.inference_mode():
                while True:
                    if random:
                        env_act = env.action_space.sample()
                        act = env_act if from_env is None else from_env(env_act)
                    else:
                        act_t, extras_t = policy_act(
                            torch.from_numpy(act_obs)
                            if direct
                            else policy.to_tensor(_to_tensor(act_obs)),
                            deterministic,
                        )
                        act = act_t.cpu().numpy()
                        if extras_t:  # a NaN logp is the policy's fault too, found before storing
                            extras = {k: v.cpu().numpy() for k, v in extras_t.items()}
                            if not extras_fit(extras):
                                check_extras(env, extras, steps, policy)
                        else:
                            extras = no_extras
                        env_act = act if to_env is None else to_env(act)
                    # one reduction (actions_fit), before the env gets them: a NaN the policy
                    # chose would come back as NaN observations, blamed on the env
                    if act.dtype.kind == "f" and not actions_fit(act):
                        check_actions(env, act, steps, None if random else policy)
                    try:
                        obs_next, rew, terminated, truncated, info = env.step(env_act)
                    except Exception as exc:
                        self._env_failed(exc, "step", steps)
                    except BaseException:  # Ctrl-C, SIGTERM: the env processes may owe replies
                        self._cut_short("step")
                        raise
                    # one reduction per array (array_fits): a NaN, an inf or a float64 beyond
                    # float32's range, which the buffer would store as inf, sends it to the check
                    if not (
                        array_fits(rew)
                        and (not float_obs or array_fits(obs_next))
                        and (not dict_obs or leaves_fit(obs_next))
                    ):
                        check_finite(env, obs_next, rew, steps)
                    rows += 1
                    if transform is not None:
                        obs_next = transform(obs_next, True)
                    elif copy_obs:
                        obs_next = _copy(obs_next)
                    act_obs = obs_next if act_transform is None else act_transform(obs_next, True)
                    done = (terminated | truncated).nonzero()[0]
                    ep_return += rew
                    valid = None
                    real_next = obs_next
                    if same_step:
                        steps += num_envs
                        if len(done):
                            final = info["final_obs"]
                            if transform is not None:
                                final = _transformed_rows(final, done, transform)
                            real_next = _with_final_obs(obs_next, final, done)
                    else:
                        if len(resetting):
                            valid = np.ones(num_envs, dtype=bool)
                            valid[resetting] = False
                            ep_return[resetting] = 0.0
                            ep_len[resetting] = -rows  # length 0 now: see _run_loop
                        steps += num_envs - len(resetting)
                        resetting = done
                    if add is not None:
                        add(obs, act, rew, terminated, truncated, real_next, extras, valid)
                    obs = obs_next
                    if len(done) and self._end_episodes(done, returns, lens, remaining, rows):
                        break
                    if n_step is not None:
                        if steps >= n_step:
                            break
                    elif not rows & 4095 and not self._warned_long:
                        self._warn_long_episode(rows)
        finally:
            ep_len += rows
        self._obs, self._resetting = obs, resetting
        self.last_collect_rows = rows
        return CollectStats.from_episodes(steps, returns, lens, time.perf_counter() - start)

    def _end_episodes(
        self,
        done: np.ndarray,
        returns: list[float],
        lens: list[int],
        remaining: np.ndarray | None,
        rows: int,
    ) -> bool:
        """Record the episodes that ended in envs ``done`` (``rows`` vector steps into the
        collect call: an episode's length is ``_ep_len + rows`` then); True once every
        quota is met."""
        ep_return, ep_len = self._ep_return, self._ep_len
        if remaining is None:
            returns += ep_return[done].tolist()
            lens += (ep_len[done] + rows).tolist()
        else:
            counted = done[remaining[done] > 0]
            returns += ep_return[counted].tolist()
            lens += (ep_len[counted] + rows).tolist()
            remaining[counted] -= 1
        ep_return[done] = 0.0
        ep_len[done] = -rows
        return remaining is not None and not remaining.any()

    def _warn_long_episode(self, rows: int) -> None:
        """Warn (once) when an episode runs on and on while ``collect`` waits for episodes
        to end: an env without a time limit may never end one, and the run would hang
        (``rows`` vector steps into the collect call, as for :meth:`_end_episodes`)."""
        longest = int(self._ep_len.max()) + rows
        if longest < LONG_EPISODE:
            return
        self._warned_long = True
        warnings.warn(
            f"an episode of {env_label(self.env, int(self._ep_len.argmax()))} has run "
            f"{longest:,} steps without ending while collect() waits for whole episodes "
            "(a test step, or episode_per_collect): if the env never ends one on its own, "
            "give it a time limit (gymnasium.wrappers.TimeLimit, or max_episode_steps= in "
            "gymnasium.register)",
            stacklevel=3,
        )
