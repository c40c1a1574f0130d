"""The :class:`~epochtrain.data.collector.Collector`'s handling of its envs' failures and
processes (:class:`_EnvProcesses`, a base of the collector): closing the envs, giving up on
them, finding dead worker processes, and the ``EnvError`` that names what failed.

An exception in the env's ``step()`` or ``reset()`` closes the env (no worker process is
left behind) and is re-raised as an ``EnvError`` naming the sub-env and the env id (see
:mod:`epochtrain.data.env_faults`); an ``AsyncVectorEnv`` worker process found dead, at a
step or when a collect step starts, is named with its pid and signal. A call to an
``AsyncVectorEnv`` cut short by Ctrl-C or SIGTERM (or given up by the thread that made it:
:meth:`~epochtrain.data.collector.Collector.give_up`) may never be answered (a hung env):
the env then takes no further call (``EnvError``), and closing it ends its processes at
once instead of waiting for that reply; unless the env settled the call itself (its
``owes_replies`` is False: :func:`~epochtrain.envs.make_envs`' ``"async"`` envs wait a few
seconds for the replies and discard them), when it stays usable.
"""

from __future__ import annotations

from typing import Any, NoReturn

import gymnasium as gym

from epochtrain.data.env_faults import (
    dead_worker,
    dead_worker_message,
    end_workers,
    env_label,
    failed_sub_env,
    has_workers,
    killed_worker,
)
from epochtrain.errors import EnvError


class _EnvProcesses:
    """What a :class:`~epochtrain.data.collector.Collector` does when its envs fail, die or
    may owe the reply to a call; the collector sets the attributes annotated here."""

    env: gym.vector.VectorEnv[Any, Any, Any]
    _obs: Any
    _unusable: str | None

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
