"""The :class:`~epochtrain.data.collector.Collector`'s checkpoint state
(:class:`_CollectorState`, a base of the collector): the in-flight episodes it saves, checks
and restores.

``state_dict(include_env=True)`` also snapshots the vector env (sub-envs, their RNGs and
in-flight episodes) when it pickles, as a ``SyncVectorEnv`` of classic-control envs does;
an ``AsyncVectorEnv`` does not, and resuming restarts its episodes with a seeded reset
(see :mod:`epochtrain.data.env_snapshots`); the abandoned episodes end, truncated, at the
buffer's newest row of each env and count in no stats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from epochtrain.data.collector_processes import _EnvProcesses
from epochtrain.data.collector_rows import _copy
from epochtrain.data.env_snapshots import env_levels, env_snapshot, restore_env, unpickle_env


class _CollectorState(_EnvProcesses):
    """Saving, checking and restoring a :class:`~epochtrain.data.collector.Collector`'s
    in-flight episodes; the collector sets the attributes annotated here and defines the
    methods declared for type checking."""

    num_envs: int
    _ep_return: np.ndarray
    _ep_len: np.ndarray
    _resetting: np.ndarray

    if TYPE_CHECKING:

        def reset(self, seed: int | None = None) -> None: ...

        def _reset_envs(self, seed: int | None) -> Any: ...

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
