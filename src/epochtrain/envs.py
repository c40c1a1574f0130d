"""make_envs: the vector envs a run trains and tests on, built from a gymnasium id.

Three backends: gymnasium's ``SyncVectorEnv`` (``"sync"``, the default: one process,
picklable, so checkpoints hold the in-flight episodes), its ``AsyncVectorEnv``
(``"async"``: one process per env) and EnvPool (``"envpool"``, extra ``envpool``: C++
envs stepped in a thread pool, for the tasks EnvPool provides). Each is a gymnasium
``VectorEnv`` the :class:`~epochtrain.data.Collector` reads the same way: sync and async
autoreset on the SAME_STEP (the final observation is in ``info["final_obs"]``), EnvPool on
the NEXT_STEP, its own and fastest mode (the step after an episode's end only resets the
env, ignoring its action), and the collector turns either into the same transitions and
``CollectStats``. A NEXT_STEP reset step is no transition and is counted nowhere, and a
collect step of ``n`` env steps stops at the first vector step that reaches ``n``: on EnvPool
it collects ``n`` to ``n + num_envs - 1`` steps, each a real transition, where sync envs
collect ``n`` rounded up to whole vector steps. ``EnvPoolVectorEnv(...,
autoreset_mode=AutoresetMode.SAME_STEP)``, built by hand, counts as sync envs do, at a cost
in throughput where episodes are short.

:func:`seed_spaces` seeds the spaces of a vector env and of its sub-envs (their random
streams are separate from the envs' own, which ``reset(seed=...)`` seeds): the trainers
call it so that an env or wrapper sampling its own spaces is reproducible given the run's
seed.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any, Literal, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.async_vector_env import AsyncState, _async_worker

from epochtrain.data.env_snapshots import env_levels
from epochtrain.extras import require

__all__ = [
    "BACKENDS",
    "EnvPoolVectorEnv",
    "MissingEnvDependencyError",
    "env_name",
    "env_spec",
    "make_envs",
    "seed_spaces",
]


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registered spec of ``env_id``, where ``"package.module:EnvId-v0"`` imports the
    module first, as ``gymnasium.make`` does: an env the user's own package registers then
    works in every process (async envs, sweep workers, Ray) without an import there.

    A module that cannot be imported is a ``ValueError`` naming it; an id that is not
    registered raises gymnasium's error (``gymnasium.error.Error``).
    """
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ValueError(
                f"env_id {env_id!r}: the module {module!r} that registers it cannot be "
                f"imported ({exc}); install it or put it on PYTHONPATH"
            ) from exc
    return gym.spec(name)


def env_name(env_id: str) -> str:
    """``env_id`` as one file-name component, for run ids and run directories: without the
    module of ``"module:EnvId"`` and with a namespace's ``/`` as ``_`` (``"ALE/Pong-v5"``
    gives ``"ALE_Pong-v5"``); a plain id such as ``"CartPole-v1"`` is unchanged."""
    return env_id.rpartition(":")[2].replace("/", "_")


Backend = Literal["sync", "async", "envpool"]
BACKENDS: tuple[Backend, ...] = ("sync", "async", "envpool")
"""The values of ``make_envs(..., backend=...)``."""


def make_envs(
    env_id: str, num_envs: int, *, backend: Backend = "sync"
) -> gym.vector.VectorEnv[Any, Any, Any]:
    """``num_envs`` copies of ``env_id`` as a vector env of ``backend`` (see the module)."""
    if backend == "envpool":
        return EnvPoolVectorEnv(env_id, num_envs)
    if backend not in ("sync", "async"):
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    vector_kwargs: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP}
    if backend == "async":
        vector_kwargs["worker"] = _env_process
    try:
        envs: gym.vector.VectorEnv[Any, Any, Any] = gym.make_vec(
            env_id, num_envs=num_envs, vectorization_mode=backend, vector_kwargs=vector_kwargs
        )
    except gym.error.DependencyNotInstalled as exc:
        # gymnasium's message names the pip command (e.g. gymnasium[box2d], [mujoco])
        raise MissingEnvDependencyError(f"env {env_id!r} needs a package: {exc}") from exc
    if type(envs) is gym.vector.AsyncVectorEnv:  # make_vec builds it: only its close changes
        envs.__class__ = _AsyncVectorEnv
    return envs


def _env_process(*args: Any) -> None:
    """The main function of an ``"async"`` vector env's process: gymnasium's, which ignores
    Ctrl-C and ends quietly when the run's process is gone.

    A terminal's Ctrl-C (and a Jupyter kernel's interrupt) reaches the whole process group,
    the env processes too: gymnasium's worker then stopped with ``KeyboardInterrupt``, and
    the envs were lost. Here the env processes ignore SIGINT; the run's process handles
    the interrupt, and its envs stay usable (:class:`_AsyncVectorEnv`).

    gymnasium's worker reports every error of its env to the parent through its pipe, so
    the pipe's own errors are all that can leave it: the parent's end closed in every
    process (it was killed, ``kill -9`` or the OOM killer), leaving nobody to tell. The
    worker then read EOF (or, mid-reply, a reset connection), and its report of that failed
    with a ``BrokenPipeError`` traceback on the terminal it shares with the dead run, once
    per env process. Here that ends the process (its env closed, as gymnasium's ``finally``
    does) with nothing printed.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _async_worker(*args)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        return  # the parent is gone


_PENDING_CALL_WAIT = 5.0
"""Seconds an ``"async"`` vector env's ``close`` waits for the replies of a call still
pending before it ends the env processes."""

_INTERRUPTED_CALL_GRACE = 3.0
"""Seconds an ``"async"`` vector env waits, after a Ctrl-C or SIGTERM cut a ``step`` or
``reset`` short, for the env processes' replies to that call (read and discarded, so the
envs take new calls); past it the call is left pending (a hung env)."""

_T = TypeVar("_T")


class _AsyncVectorEnv(gym.vector.AsyncVectorEnv):
    """gymnasium's ``AsyncVectorEnv`` that a Ctrl-C leaves usable, and whose ``close``
    cannot wait for ever.

    ``step``/``reset`` first wait until every env process's reply can be read, reading
    nothing; only then are the replies read, at once. A Ctrl-C or SIGTERM
    (``KeyboardInterrupt``) during that wait (where a call spends its time: the envs
    compute) waits up to :data:`_INTERRUPTED_CALL_GRACE` seconds more for the replies,
    reads and discards them, and is raised: the envs then take new calls
    (:attr:`owes_replies` is False; a trainer's roll-back resets them). A second Ctrl-C
    during that grace ends it at once and is raised. While commands are sent or replies
    read (for fast envs, most of a step) ``step``/``reset`` in the main thread hold SIGINT
    (:meth:`_hold_ctrl_c`): a Ctrl-C then is raised once the call has ended. A call whose
    replies do not come within the grace (a hung env), or that another interrupt (SIGTERM,
    or a Ctrl-C outside ``step``/``reset``) cut short while commands were sent or replies
    read (which env processes got or answered it is unknown), is left owing its replies:
    the envs take no further call
    (:class:`~epochtrain.data.Collector` gives up on them) and ``close`` ends the env
    processes at once. ``close`` waits :data:`_PENDING_CALL_WAIT` seconds for the replies
    of a call still pending otherwise (gymnasium's close, without a timeout, waited for ever
    for replies already read), then ends the env processes.
    """

    _transfer_cut = False
    """True from the start of sending commands or reading replies until it completed: an
    interrupt in between leaves it True (a class default: ``make_envs`` swaps the class of
    an env gymnasium built)."""

    @property
    def owes_replies(self) -> bool:
        """True while a call's replies may still be owed: a call pending (one an interrupt
        cut short and whose replies did not come within the grace), or one cut short while
        commands were sent or replies read. The envs then take no further call."""
        return self._state != AsyncState.DEFAULT or self._transfer_cut

    _holding: Any = None
    """While ``step``/``reset`` run in the main thread: the SIGINT handler they replaced
    (see :meth:`_hold_ctrl_c`), else None."""
    _held = False  # a Ctrl-C arrived while commands were sent or replies read
    _waiting = False  # in the wait for the replies: a Ctrl-C is raised at once

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> Any:
        """gymnasium's, with Ctrl-C held while commands are sent or replies read."""
        holds = self._hold_ctrl_c()
        try:
            return super().reset(seed=seed, options=options)
        finally:
            if holds:
                self._release_ctrl_c()

    def step(self, actions: Any) -> Any:
        """gymnasium's, with Ctrl-C held while commands are sent or replies read."""
        holds = self._hold_ctrl_c()
        try:
            return super().step(actions)
        finally:
            if holds:
                self._release_ctrl_c()

    def _hold_ctrl_c(self) -> bool:
        """In the main thread, hold SIGINT while commands are sent and replies read (the
        microseconds in which a Ctrl-C would leave unknown which env processes got or
        answered the call: for fast envs, most of a step): its handler is called at once
        in the wait for the replies, else when the call has ended. True when it holds."""
        if self._holding is not None or threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGINT) is None:  # set outside Python: cannot be put back
            return False
        self._held = False
        self._holding = signal.signal(signal.SIGINT, self._on_ctrl_c)
        return True

    def _on_ctrl_c(self, signum: int, frame: FrameType | None) -> None:
        if self._waiting:
            self._pass_on(signum, frame)
        else:
            self._held = True

    def _release_ctrl_c(self) -> None:
        """Put the SIGINT handler back; call it for a Ctrl-C held meanwhile."""
        previous, self._holding = self._holding, None
        signal.signal(signal.SIGINT, previous)
        if self._held:
            self._held = False
            self._pass_on(signal.SIGINT, None, previous)

    def _pass_on(self, signum: int, frame: FrameType | None, handler: Any = None) -> None:
        """Call the SIGINT handler that was in place (``KeyboardInterrupt``, usually)."""
        handler = self._holding if handler is None else handler
        if callable(handler):
            handler(signum, frame)
        elif handler == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def reset_async(
        self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> None:
        """gymnasium's, marked as a transfer (see :attr:`owes_replies`)."""
        self._transfer_cut = True
        super().reset_async(seed=seed, options=options)
        self._transfer_cut = False

    def step_async(self, actions: Any) -> None:
        """gymnasium's, marked as a transfer (see :attr:`owes_replies`)."""
        self._transfer_cut = True
        super().step_async(actions)
        self._transfer_cut = False

    def reset_wait(self, timeout: float | None = None) -> Any:
        """gymnasium's, once every reply can be read (see the class)."""
        return self._receive(AsyncState.WAITING_RESET, super().reset_wait, timeout)

    def step_wait(self, timeout: float | None = None) -> Any:
        """gymnasium's, once every reply can be read (see the class)."""
        return self._receive(AsyncState.WAITING_STEP, super().step_wait, timeout)

    def _receive(
        self, state: AsyncState, read: Callable[[float | None], _T], timeout: float | None
    ) -> _T:
        """Wait until every reply of the pending call can be read, then ``read`` them."""
        if self.closed or self._state != state:
            return read(timeout)  # gymnasium's error names the misuse
        try:
            self._waiting = True
            ready = self._await_replies(timeout)
        except KeyboardInterrupt:
            self._settle(_INTERRUPTED_CALL_GRACE)
            raise
        finally:
            self._waiting = False
        if not ready:
            self._transfer_cut = True  # the replies may still come: no call can follow
            raise multiprocessing.TimeoutError(
                f"the call to `{state.value}_wait` timed out after {timeout} second(s)"
            )
        self._transfer_cut = True
        try:
            result = read(None)  # every reply is there: read at once
        except Exception:
            # an env's error (gymnasium read every reply, then raised: the state is
            # DEFAULT) leaves nothing owed; a pipe's error (a dead process) leaves it pending
            self._transfer_cut = self._state != AsyncState.DEFAULT
            raise
        self._transfer_cut = False
        return result

    def _await_replies(self, timeout: float | None) -> bool:
        """Wait until every env process's reply can be read, reading nothing; False when
        ``timeout`` seconds passed first. A closed pipe (a dead process) counts as ready:
        reading it raises."""
        pending = [pipe for pipe in self.parent_pipes if pipe is not None]
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = multiprocessing.connection.wait(pending, left)
            if not ready:
                return False
            pending = [pipe for pipe in pending if pipe not in ready]
        return True

    def _settle(self, timeout: float) -> bool:
        """Read and discard the replies of the pending call, if they all come within
        ``timeout`` seconds; True when the envs then take new calls. Otherwise (they did
        not come, an env raised, or a second interrupt, which is raised) the call is left
        owing its replies."""
        self._transfer_cut = True  # unless settled below
        self._waiting = True  # a second Ctrl-C ends the wait at once
        try:
            if not self._await_replies(timeout):
                return False
        finally:
            self._waiting = False
        read = getattr(gym.vector.AsyncVectorEnv, f"{self._state.value}_wait")
        try:
            read(self, None)
        except Exception:  # an env's error in the discarded call: gymnasium closed its pipe
            return False
        self._transfer_cut = False
        return True

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """Close the envs, ending their processes if a pending call's replies do not come
        or a call was cut short mid-transfer (:attr:`owes_replies`)."""
        if self._transfer_cut:
            terminate = True
        elif self._state != AsyncState.DEFAULT and not terminate:
            terminate = not self._settle(_PENDING_CALL_WAIT if timeout is None else timeout)
        self._state = AsyncState.DEFAULT
        super().close_extras(timeout=timeout, terminate=terminate)
        # the ended processes' handles: a closed env kept referenced (a trainer in a
        # sweep's list of results) held 4 of their descriptors per env set; with every one
        # ended, the list is emptied (a closed Process answers nothing, not even exitcode)
        if all(process.exitcode is not None for process in self.processes):
            for process in self.processes:
                process.close()
            self.processes = []


_VECTOR_LEVEL = 2**32 - 1
"""The index, in a space's seed, of the vector env's own spaces (no sub-env has it)."""


def seed_spaces(
    envs: gym.vector.VectorEnv[Any, Any, Any], seed: int, *, stream: Sequence[int] = ()
) -> None:
    """Seed the observation and action spaces of ``envs``' sub-envs and of ``envs`` itself.

    Every space found once (at each wrapper level of a sub-env, outermost first, then each
    vector level's ``observation_space``, ``action_space`` and ``single_*`` spaces not
    already seeded) gets the seed ``SeedSequence([seed, *stream, i, k])``: ``i`` the sub-env's
    index (the vector env's own: ``2**32 - 1``), ``k`` the space's place in that list. So
    the streams differ between sub-envs, and between callers that pass another ``stream``
    (the trainers' training and test envs), and depend on nothing else.

    Only what lives in this process is reached: a ``SyncVectorEnv``'s sub-envs, never an
    ``AsyncVectorEnv``'s (in worker processes, whose spaces gymnasium offers no way to seed;
    its own spaces are seeded) nor EnvPool's (C++ envs; the pool's spaces are the vector
    env's). An env that samples its spaces under those backends seeds them itself, e.g.
    from the seed of its ``reset``.
    """
    done: set[int] = set()

    def seed_all(spaces: list[Any], index: int) -> None:
        fresh = [s for s in spaces if isinstance(s, gym.Space) and id(s) not in done]
        for k, space in enumerate(dict((id(s), s) for s in fresh).values()):
            state = np.random.SeedSequence([seed, *stream, index, k]).generate_state(1)
            space.seed(int(state[0]))
            done.add(id(space))

    levels = env_levels(envs)
    for i, sub_env in enumerate(getattr(levels[-1], "envs", None) or []):
        seed_all(_sub_env_spaces(sub_env), i)
    names = ("observation_space", "action_space", "single_observation_space", "single_action_space")
    seed_all([getattr(level, name, None) for level in levels for name in names], _VECTOR_LEVEL)


def _sub_env_spaces(env: Any) -> list[Any]:
    """The observation and action spaces at every wrapper level of ``env``, outermost first
    (a wrapper that does not override one gives the level below's: the same object)."""
    spaces = []
    while True:
        spaces += [getattr(env, "observation_space", None), getattr(env, "action_space", None)]
        if not isinstance(env, gym.Wrapper):
            return spaces
        env = env.env


class MissingEnvDependencyError(ImportError):
    """An env needs a package that is not installed; the message names the pip command."""


@contextlib.contextmanager
def _float64_bounds_quiet() -> Iterator[None]:
    """Without gymnasium's warning, at each read of an EnvPool pool's spaces, that a float32
    Box was given float64 bounds (EnvPool builds them so; harmless)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*precision lowered by casting")
        yield


class EnvPoolVectorEnv(gym.vector.VectorEnv[Any, Any, Any]):
    """An EnvPool pool as a gymnasium ``VectorEnv``, with EnvPool's own NEXT_STEP autoreset
    (``make_envs`` builds it so) or, on request, SAME_STEP.

    NEXT_STEP (the default, EnvPool's fastest): the step that ends an episode returns its
    final observation; the pool's next step ignores that env's action and only resets it.
    The collector stores such a reset step as an invalid row and counts it nowhere, so a
    collect step of ``n`` env steps (which stops at the first vector step reaching ``n``)
    collects ``n`` to ``n + num_envs - 1`` real steps, where sync envs collect ``n``
    rounded up to whole vector steps.

    ``autoreset_mode=AutoresetMode.SAME_STEP``: a step that ends episodes resets those envs
    at once (one more call to the pool, for them only): their rows of the returned
    observations and infos are the new episodes' first, and ``info["final_obs"]`` (an
    object array, set where ``info["_final_obs"]``) and ``info["final_info"]`` hold the
    ended ones', as gymnasium's SAME_STEP vector envs give them. Every step is then
    ``num_envs`` transitions, so the collector counts the same env steps as on sync envs.
    The episodes are EnvPool's own: an env's reset draws from its stream when it would have
    on the next step. The extra call costs throughput where episodes are short (random
    actions on CartPole-v1: 0.78x the steps per second of NEXT_STEP with 8 envs, 0.67x
    with 32), none measurable with HalfCheetah's 1000-step episodes.

    EnvPool seeds its envs when the pool is built, so ``reset(seed=s)`` rebuilds the pool
    with seed ``s`` (env ``i`` then draws from EnvPool's stream ``s + i``); ``reset()``
    without a seed resets every env in place. The pool cannot be pickled: a checkpoint
    restarts its episodes with a seeded reset, as for ``AsyncVectorEnv``.

    :param env_id: an EnvPool task id (``envpool.list_all_envs()``, e.g. ``"CartPole-v1"``,
        ``"HalfCheetah-v4"``); unknown ids raise naming ``backend="sync"``.
    :param num_envs: envs in the pool.
    :param seed: seed of the pool until the first seeded ``reset``.
    :param max_episode_steps: truncate episodes after this many steps (``None``: the
        task's own limit, as in gymnasium).
    :param autoreset_mode: ``NEXT_STEP`` (EnvPool's own, as ``make_envs`` builds it) or
        ``SAME_STEP`` (exact env-step counts, see above); others raise.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        *,
        seed: int = 0,
        max_episode_steps: int | None = None,
        autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
    ) -> None:
        if autoreset_mode not in (AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP):
            raise ValueError(
                f"autoreset_mode must be AutoresetMode.SAME_STEP or AutoresetMode.NEXT_STEP, "
                f"got {autoreset_mode!r}"
            )
        self._envpool = require("envpool", extra="envpool")
        if env_id not in self._envpool.list_all_envs():
            raise ValueError(
                f"env_id {env_id!r} is not an EnvPool task: use backend='sync' (or 'async'), "
                "or one of envpool.list_all_envs()"
            )
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        self.env_id = env_id
        self.num_envs = num_envs
        self._limit = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
        self._pool: Any = self._build(seed)
        with _float64_bounds_quiet():
            self.single_observation_space = self._pool.observation_space
            self.single_action_space = self._pool.action_space
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": autoreset_mode}
        self._same_step = autoreset_mode == AutoresetMode.SAME_STEP
        self.spec = env_spec(env_id) if env_id in gym.registry else None

    def _build(self, seed: int) -> Any:
        return self._envpool.make_gymnasium(
            self.env_id, num_envs=self.num_envs, seed=seed, **self._limit
        )

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every env; a seed (an int, or the first of a list) rebuilds the pool."""
        if seed is not None:
            self._pool.close()
            self._pool = self._build(int(seed if isinstance(seed, int) else seed[0]))
        with _float64_bounds_quiet():  # the pool's reset reads its spaces again
            obs, info = self._pool.reset()
        return obs, dict(info)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every env. NEXT_STEP: an env that ended on the previous step is reset
        instead. SAME_STEP: an env whose episode ends is reset in this step, its final
        observation and info in ``info["final_obs"]`` and ``info["final_info"]``."""
        obs, rew, terminated, truncated, info = self._pool.step(np.asarray(actions))
        info = dict(info)
        if not self._same_step:
            return obs, rew.astype(np.float64), terminated, truncated, info
        done = np.flatnonzero(terminated | truncated)
        if len(done):
            mask = np.zeros(self.num_envs, dtype=bool)
            mask[done] = True
            final_obs = np.empty(self.num_envs, dtype=object)
            for i in done.tolist():
                final_obs[i] = _row(obs, i)
            final_info = _copy_tree(info)
            with _float64_bounds_quiet():  # as in reset(), should the pool read its spaces
                first_obs, first_info = self._pool.reset(done.astype(np.int32))
            obs = _with_rows(obs, done, first_obs)
            info = _with_rows(info, done, dict(first_info))
            info.update(final_obs=final_obs, _final_obs=mask, final_info=final_info)
            info["_final_info"] = mask.copy()
        return obs, rew.astype(np.float64), terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        """Release the pool's threads."""
        self._pool.close()


def _row(tree: Any, i: int) -> Any:
    """Row ``i`` of an array, or of each array of a (nested) dict, copied."""
    if isinstance(tree, dict):
        return {k: _row(v, i) for k, v in tree.items()}
    return np.array(tree[i], copy=True)


def _copy_tree(tree: Any) -> Any:
    """A (nested) dict of arrays with every array copied."""
    if isinstance(tree, dict):
        return {k: _copy_tree(v) for k, v in tree.items()}
    return np.array(tree, copy=True)


def _with_rows(tree: Any, rows: np.ndarray, new: Any) -> Any:
    """``tree`` (an array, or a nested dict of them, one row per env) with ``rows`` set to
    ``new``'s rows (one per entry of ``rows``, in order); keys of ``new`` that ``tree``
    lacks, and entries that are not per-env arrays, are left as ``tree`` has them."""
    if isinstance(tree, dict):
        return {
            k: _with_rows(v, rows, new[k]) if isinstance(new, dict) and k in new else v
            for k, v in tree.items()
        }
    if not isinstance(tree, np.ndarray) or tree.ndim == 0 or np.shape(new)[:1] != rows.shape:
        return tree
    out = tree.copy() if not tree.flags.writeable else tree
    out[rows] = new
    return out
