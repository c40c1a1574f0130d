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
it, such as a ``logp``); an exception in the env's ``step()`` or ``reset()`` closes
the env (no worker process is left behind) and is re-raised as an ``EnvError`` naming the
sub-env and the env id (see :mod:`epochtrain.data.env_faults`); an ``AsyncVectorEnv``
worker process found dead, at a step or when a collect step starts, is named with its pid
and signal. A call to an ``AsyncVectorEnv`` cut short by Ctrl-C or SIGTERM (or given up by
the thread that made it: :meth:`Collector.give_up`) may never be answered (a hung env):
the env then takes no further call (``EnvError``), and closing it ends its processes at
once instead of waiting for that reply; unless the env settled the call itself (its
``owes_replies`` is False: :func:`~epochtrain.envs.make_envs`' ``"async"`` envs wait a few
seconds for the replies and discard them), when it stays usable.

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

``state_dict(include_env=True)`` also snapshots the vector env (sub-envs, their RNGs and
in-flight episodes) when it pickles, as a ``SyncVectorEnv`` of classic-control envs does;
an ``AsyncVectorEnv`` does not, and resuming restarts its episodes with a seeded reset
(see :mod:`epochtrain.data.env_snapshots`); the abandoned episodes end, truncated, at the
buffer's newest row of each env and count in no stats.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from epochtrain.data.actions import env_action_map, policy_action_map
from epochtrain.data.batch import ActResult, Obs
from epochtrain.data.buffer import ReplayBuffer
from epochtrain.data.env_faults import (
    actions_fit,
    array_fits,
    check_actions,
    check_extras,
    check_finite,
    dead_worker,
    dead_worker_message,
    end_workers,
    env_label,
    extras_fit,
    failed_sub_env,
    has_workers,
    killed_worker,
    leaves_fit,
)
from epochtrain.data.env_snapshots import env_levels, env_snapshot, restore_env, unpickle_env
from epochtrain.data.spaces import check_policy_spaces
from epochtrain.errors import EnvError
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


def _to_tensor(obs: Any) -> Obs:
    if isinstance(obs, np.ndarray):
        return torch.from_numpy(obs)
    if isinstance(obs, dict):
        return {k: _to_tensor(v) for k, v in obs.items()}
    return torch.as_tensor(obs)


def _inference_act(policy: Actor, obs: Any) -> tuple[Callable[[Obs, bool], ActResult], bool]:
    """What the hot loop calls under ``torch.inference_mode()``: the ``act`` of an epochtrain
    :class:`~epochtrain.Policy` without the no-grad wrapper its class adds (grad is off
    already, so the wrapper would only check that), and whether array observations go in
    as ``torch.from_numpy(obs)``, which is what ``Policy.to_tensor`` gives for a CPU policy
    that keeps it. Any other actor, or an ``act`` set on the instance, is called as is."""
    from epochtrain.algorithms.base import _WITHOUT_GRAD, Policy  # the data layer loads first

    if not isinstance(policy, Policy):
        return policy.act, False
    wrapper = type(policy).act
    own = getattr(wrapper, "__wrapped__", None)
    act = policy.act
    if own is not None and getattr(wrapper, _WITHOUT_GRAD, False) and "act" not in vars(policy):
        act = own.__get__(policy)
    direct = (
        isinstance(obs, np.ndarray)
        and type(policy).to_tensor is Policy.to_tensor
        and policy.device.type == "cpu"
    )
    return act, direct


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


def _with_final_obs(obs_next: Any, final_obs: np.ndarray, done: np.ndarray) -> Any:
    """``obs_next`` with the rows of the envs in ``done`` replaced by their final obs."""
    real_next = _copy(obs_next)
    for i in done.tolist():
        _set_row(real_next, i, final_obs[i])
    return real_next


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

    def close(self) -> None:
        """Close the vector env (an ``AsyncVectorEnv``'s worker processes with it); a
        broken env that fails to close, or one whose processes may owe the reply to a call
        that was cut short or given up (:meth:`give_up`), has its workers ended instead
        (:func:`~epochtrain.data.env_faults.end_workers`). A later ``collect`` needs new
        envs. A Ctrl-C (or one a stopped worker relays) while closing is raised once the
        workers are gone."""
        self._obs = None
        try:
            if self._unusable is not None:  # a graceful close would wait for that reply
                end_workers(self.env)
            self.env.close()
        except BaseException as exc:  # a broken env may fail to close: force its workers out
            end_workers(self.env)
            if not isinstance(exc, Exception):
                raise

    @property
    def given_up(self) -> str | None:
        """Why the env takes no further call (:meth:`give_up`), or None."""
        return self._unusable

    def give_up(self, reason: str) -> None:
        """Mark the env as owing the reply to a call that another thread made and gave up
        waiting for (``reason`` says which, e.g. a hung env past a grace period). With
        worker processes (``AsyncVectorEnv``) the env then takes no further call:
        ``reset``, ``collect`` and ``load_state_dict`` raise ``EnvError`` (closing the env),
        and :meth:`close` ends the processes at once. Envs without worker processes are
        unaffected (nothing in them can owe a reply)."""
        if has_workers(self.env):
            self._unusable = reason

    def check_env_processes(self, when: str = "before this collect step started") -> None:
        """Raise ``EnvError`` naming the first ``AsyncVectorEnv`` worker process that a
        signal has ended (sub-env, pid, signal: the OOM killer, a kill, a crash), after
        closing the envs; nothing for envs without worker processes. One status check per
        process: for the start of a collect step or an epoch, not per step (``when`` says
        which, for the message). Envs that take no further call (:meth:`give_up`) raise
        the ``EnvError`` that says so."""
        if self._unusable is not None:
            self._refuse()
        dead = killed_worker(self.env)
        if dead is None:
            return
        env_id = env_label(self.env, dead[0])
        end_workers(self.env)
        self.close()
        raise EnvError(
            dead_worker_message(dead, env_id, when, None),
            sub_env=dead[0],
            env_id=env_id,
            env_step=0,
        )

    def _cut_short(self, call: str) -> None:
        """An env call raised Ctrl-C or SIGTERM (a ``BaseException``): worker processes
        may still owe its replies (:meth:`give_up`), unless the env says it owes none
        (``owes_replies``: ``make_envs(..., backend="async")``'s envs settle the call)."""
        if not getattr(self.env.unwrapped, "owes_replies", True):
            return  # the replies came within the env's grace: it takes new calls
        self.give_up(
            f"a {call}() of theirs was cut short by Ctrl-C or SIGTERM, so their processes "
            "may still owe its replies (an env that hangs never sends them)"
        )

    def _refuse(self) -> NoReturn:
        """Close the envs and raise ``EnvError``: they take no further call (:meth:`give_up`)."""
        env_id = env_label(self.env, None)
        self.close()
        raise EnvError(
            f"the envs of {env_id!r} cannot continue: {self._unusable}; their processes "
            "were ended and the envs closed: build new envs (a new trainer can resume from "
            "the last checkpoint)",
            env_id=env_id,
        )

    def _env_failed(self, exc: Exception, call: str, steps: int) -> NoReturn:
        """Close the env (its workers with it) and raise an ``EnvError`` naming the sub-env;
        an ``AsyncVectorEnv`` worker process that died is named as such, not as an env that
        raised."""
        dead = dead_worker(self.env, exc)
        sub_env = failed_sub_env(self.env, exc) if dead is None else dead[0]
        env_id = env_label(self.env, sub_env)
        if dead is not None or sub_env is None:
            # a dead worker, or a failure no sub-env reported: a graceful close could wait
            # for ever for a reply already read (no-op for envs without worker processes)
            end_workers(self.env)
        self.close()
        if dead is not None:
            when = f"during {call}() after {steps} env steps of this collect step"
            message = dead_worker_message(dead, env_id, when, exc)
        else:
            which = "a sub-env" if sub_env is None else f"sub-env {sub_env}"
            message = (
                f"{which} of {env_id!r} raised {type(exc).__name__}: {exc} in {call}() after "
                f"{steps} env steps of this collect step"
            )
        raise EnvError(message, sub_env=sub_env, env_id=env_id, env_step=steps) from exc

    def check_state_dict(self, state: Any) -> None:
        """Raise ``ValueError`` unless :meth:`load_state_dict` can restore ``state`` here."""
        if not isinstance(state, dict):
            raise ValueError(f"the collector state is a {type(state).__name__}, not a dict")
        missing = [k for k in ("obs", "ep_return", "ep_len", "resetting") if k not in state]
        if missing:
            raise ValueError(f"the collector state lacks the entries {missing}")
        for key in ("ep_return", "ep_len", "resetting"):
            if np.shape(state[key]) != (self.num_envs,):
                raise ValueError(
                    f"the collector state's {key} is shaped {np.shape(state[key])}, this "
                    f"collector has {self.num_envs} envs: build the envs as the saved run did"
                )
        snapshot = state.get("env")
        if snapshot is not None:
            saved = unpickle_env(self.env, snapshot)
            if not isinstance(saved, list) or len(saved) != len(env_levels(self.env)):
                raise ValueError(
                    "the saved env has another number of vector wrapper levels than this "
                    "env: build the envs as the checkpointed run did"
                )

    def state_dict(self, *, include_env: bool = False) -> dict[str, Any]:
        """The in-flight episodes: current observations, partial returns and lengths.

        ``include_env=True`` adds ``env``: a pickled snapshot of the vector env (sub-envs
        with their RNGs and episode state, action space), or ``None`` where the env does
        not pickle (``AsyncVectorEnv``).
        """
        state: dict[str, Any] = {
            "obs": _copy(self._obs) if self._obs is not None else None,
            "ep_return": self._ep_return.copy(),
            "ep_len": self._ep_len.copy(),
            "resetting": np.isin(np.arange(self.num_envs), self._resetting),
        }
        if include_env:
            state["env"] = env_snapshot(self.env)
        return state

    def load_state_dict(self, state: dict[str, Any], *, restart_seed: int | None = None) -> None:
        """Restore the state saved by :meth:`state_dict`.

        With an env snapshot the envs continue their episodes exactly. A state saved with
        ``include_env=True`` whose env did not pickle cannot continue them: with
        ``restart_seed`` the envs are reset with that seed (new episodes, deterministic)
        by :meth:`reset`, which ends the buffer's episodes at its newest rows (load the
        buffer first). Envs that take no further call (:meth:`give_up`) raise ``EnvError``.
        """
        if self._unusable is not None:
            self._refuse()
        snapshot = state.get("env")
        if snapshot is not None:
            restore_env(self.env, snapshot)
        elif "env" in state and restart_seed is not None:
            if state["obs"] is not None:
                self.reset(seed=restart_seed)
                return
            # saved before the run's start, which resets the envs itself: no episode to
            # restart and no observation of the run's, so none reaches the transforms' running
            # statistics; the reset still finds envs that cannot go on (a dead env process)
            self._reset_envs(restart_seed)
        self._obs = state["obs"]
        self._ep_return = np.array(state["ep_return"], dtype=np.float64)
        self._ep_len = np.array(state["ep_len"], dtype=np.int64)
        self._resetting = np.flatnonzero(np.asarray(state["resetting"], dtype=bool))


def _transformed_rows(final: np.ndarray, done: np.ndarray, transform: ObsTransform) -> Any:
    """``final`` (an object array of per-env observations) with rows ``done`` transformed."""
    out = final.copy()
    rows = transform(np.stack([final[i] for i in done.tolist()]), False)
    for j, i in enumerate(done.tolist()):
        out[i] = rows[j]
    return out
