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

The ``"async"`` backend's env processes and vector env, which a Ctrl-C leaves usable, are in
:mod:`epochtrain.envs_async`.
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from epochtrain.data.env_snapshots import env_levels
from epochtrain.envs_async import _AsyncVectorEnv, _env_process
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
            if "/" in module or "\\" in module or module.endswith(".py"):  # a file path
                cut = max(module.rfind("/"), module.rfind("\\"))
                folder, file = module[: max(cut, 0)], module[cut + 1 :]
                raise ValueError(
                    f"env_id {env_id!r}: {module!r} is a file path, but the part before "
                    f"':' must be a module name: use '{file.removesuffix('.py')}:{name}' "
                    f"with {repr(folder) if folder else 'its folder'} on PYTHONPATH"
                ) from exc
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
