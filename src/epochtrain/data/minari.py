"""Minari datasets: read one into a :class:`ReplayBuffer`, write a recorded buffer as one.

`Minari <https://minari.farama.org>`_ is Farama's format for offline-RL datasets (the
successor of D4RL). Only local datasets are read (``download=False``): a missing one
raises ``FileNotFoundError`` naming ``minari download <id>``. Datasets live under
``MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``).

* :func:`load_minari_buffer` (also ``ReplayBuffer.from_minari``): every step of every
  episode becomes one transition of a single-env buffer, episodes one after the other;
  ``obs_next`` is the episode's next observation, so a truncated episode's last
  transition bootstraps from its true final observation; an episode whose last step has
  neither flag is read with it truncated (as Minari's DataCollector records it), so it
  never runs on into the next. A ``Discrete(n, start=k)`` dataset's actions
  (``k .. k+n-1``) become the policy's indices ``0 .. n-1``.
* :func:`write_minari`: the complete episodes of a buffer (or a buffer file from
  ``epochtrain collect``) become a Minari dataset; the metadata records the recording
  policy's episode returns (``recording_returns_mean``, ``_std``, ``_min``, ``_max``,
  ``recording_episodes``). A buffer that does not fit ``env_id``'s spaces (or whose
  file's ``.json`` sidecar names another env) is refused before anything is written.
  The dataset holds the actions the env applied, as Minari's own recorder does: shifted
  to a ``Discrete``'s ``start``, clipped to a bounded ``Box`` with a warning when that
  changes any (the buffer holds the policy's own; see :mod:`epochtrain.data.actions`).

Needs the ``minari`` extra (``pip install 'epochtrain[minari]'``; minari's default
storage format, HDF5, also needs ``h5py``: ``pip install 'minari[hdf5]'``).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from epochtrain.data.actions import env_action_map, policy_action_map
from epochtrain.data.buffer import ReplayBuffer
from epochtrain.data.writes import deferred_signals
from epochtrain.extras import require

__all__ = ["check_new_dataset_id", "load_minari_buffer", "write_minari"]

Tree = Any
"""An array, or a dict of trees (dict observations)."""


def _tree_map(fn: Callable[..., Any], *trees: Tree) -> Tree:
    if isinstance(trees[0], dict):
        return {k: _tree_map(fn, *(t[k] for t in trees)) for k in trees[0]}
    return fn(*trees)


def _check_dataset_id(dataset_id: object) -> str:
    if not isinstance(dataset_id, str) or not dataset_id:
        raise ValueError(
            f"dataset_id must be a Minari id such as 'mujoco/halfcheetah/medium-v0', "
            f"got {dataset_id!r}"
        )
    return dataset_id


def _open_dataset(dataset: Any) -> Any:
    """A ``MinariDataset`` from an id (local only) or the dataset itself."""
    minari = require("minari", extra="minari")
    if isinstance(dataset, minari.MinariDataset):
        return dataset
    dataset_id = _check_dataset_id(dataset)
    if dataset_id not in minari.list_local_datasets():
        root = os.environ.get("MINARI_DATASETS_PATH", "~/.minari/datasets")
        raise FileNotFoundError(
            f"Minari dataset {dataset_id!r} is not in {root}: run `minari download "
            f"{dataset_id}` first (epochtrain never downloads), or set MINARI_DATASETS_PATH"
        )
    return minari.load_dataset(dataset_id, download=False)


def load_minari_buffer(dataset: Any, *, device: str | torch.device = "cpu") -> ReplayBuffer:
    """Every transition of a local Minari dataset in a single-env :class:`ReplayBuffer`.

    :param dataset: a dataset id (``"D4RL/door/human-v2"``, looked up locally) or a
        ``minari.MinariDataset``.
    :param device: where the buffer's sampled batches go.

    An episode whose last step is neither terminated nor truncated is read with that
    step truncated (it bootstraps from its last observation and ends there).
    """
    data = _open_dataset(dataset)
    episodes = list(data.iterate_episodes())
    if not episodes or not sum(len(ep.rewards) for ep in episodes):
        raise ValueError(f"Minari dataset {data.spec.dataset_id!r} holds no transitions")

    def cat(*arrays: np.ndarray) -> np.ndarray:
        return np.concatenate(arrays)[:, None]  # [steps, 1 env, ...]

    obs = _tree_map(cat, *(_tree_map(lambda o: o[:-1], ep.observations) for ep in episodes))
    obs_next = _tree_map(cat, *(_tree_map(lambda o: o[1:], ep.observations) for ep in episodes))
    act = cat(*(np.asarray(ep.actions) for ep in episodes))
    to_policy = policy_action_map(data.action_space)  # Discrete(n, start=k): back to 0..n-1
    columns: dict[str, Tree] = {
        "obs": obs,
        "act": act if to_policy is None else to_policy(act),
        "rew": cat(*(np.asarray(ep.rewards) for ep in episodes)),
        "terminated": cat(*(np.asarray(ep.terminations) for ep in episodes)),
        "truncated": cat(*(_truncations(ep) for ep in episodes)),
        "obs_next": obs_next,
    }
    steps = len(columns["rew"])
    buffer = ReplayBuffer(steps, 1, device=device)
    first = {k: _tree_map(lambda a: a[0], v) for k, v in columns.items()}
    buffer.add(**first)  # allocates the storage with the buffer's own dtypes
    state = buffer.state_dict()
    template = state["storage"]

    def as_storage(values: np.ndarray, like: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(values).to(like.dtype).reshape(steps, *like.shape[1:])

    def column(key: str, like: Tree) -> Tree:
        if key in columns:
            return _tree_map(as_storage, columns[key], like)
        # a buffer-only column (the `valid` mask): every row as the first, real, one
        return like[:1].expand(steps, *like.shape[1:]).clone()

    state["storage"] = {key: column(key, like) for key, like in template.items()}
    state.update(cursor=0, size=steps, n_invalid=0)
    buffer.load_state_dict(state)
    buffer.source = f"minari:{data.spec.dataset_id}"
    return buffer


def _truncations(episode: Any) -> np.ndarray:
    """The episode's truncation flags, its last step marked truncated when it carries
    neither flag (``create_dataset_from_buffers`` allows that; Minari's own recorder marks
    it so): in one buffer the episode would otherwise run on into the next one."""
    truncations = np.array(episode.truncations, dtype=bool)
    if len(truncations) and not (truncations[-1] or episode.terminations[-1]):
        truncations[-1] = True
    return truncations


def _episodes(buffer: ReplayBuffer) -> list[dict[str, Tree]]:
    """The complete episodes of ``buffer``, env by env, oldest first, as numpy arrays."""
    rollout = buffer.rollout()
    valid = rollout.valid.numpy() if rollout.valid is not None else None
    ends = (rollout.terminated | rollout.truncated).numpy()
    episodes = []
    for env in range(buffer.num_envs):
        start = None
        for t in range(ends.shape[0]):
            if valid is not None and not valid[t, env]:
                start = None  # NEXT_STEP reset row: the next row starts an episode
                continue
            if start is None:
                start = t
            if ends[t, env]:
                episodes.append(_episode(rollout, env, _rows(valid, env, start, t)))
                start = None
    return episodes


def _rows(valid: np.ndarray | None, env: int, start: int, end: int) -> np.ndarray:
    rows = np.arange(start, end + 1)
    return rows if valid is None else rows[valid[start : end + 1, env]]


def _episode(rollout: Any, env: int, rows: np.ndarray) -> dict[str, Tree]:
    def take(t: Any) -> Tree:
        if isinstance(t, dict):
            return {k: take(v) for k, v in t.items()}
        return t[rows, env].numpy()

    obs, obs_next = take(rollout.obs), take(rollout.obs_next)
    return {
        "observations": _tree_map(lambda o, n: np.concatenate([o, n[-1:]]), obs, obs_next),
        "actions": take(rollout.act),
        "rewards": take(rollout.rew).astype(np.float64),
        "terminations": take(rollout.terminated).astype(bool),
        "truncations": take(rollout.truncated).astype(bool),
    }


def check_new_dataset_id(dataset_id: str) -> None:
    """Raise unless ``dataset_id`` is a well-formed id no local Minari dataset has yet
    (``FileExistsError`` naming ``minari delete``); what :func:`write_minari` checks first,
    for callers that check before recording."""
    minari = require("minari", extra="minari")
    _check_dataset_id(dataset_id)
    if dataset_id in minari.list_local_datasets():
        raise FileExistsError(
            f"Minari dataset {dataset_id!r} already exists: pick another dataset_id or "
            f"delete it (`minari delete {dataset_id}`)"
        )


def write_minari(
    buffer_or_path: ReplayBuffer | str | os.PathLike[str],
    dataset_id: str,
    env_id: str,
    *,
    algorithm_name: str | None = None,
    author: str | None = None,
    author_email: str | None = None,
    code_permalink: str | None = None,
    description: str | None = None,
    data_format: Literal["hdf5", "arrow"] = "hdf5",
) -> Path:
    """Write the complete episodes of a buffer as the local Minari dataset ``dataset_id``;
    returns its directory.

    :param buffer_or_path: a :class:`ReplayBuffer` or a buffer file written by
        :meth:`ReplayBuffer.save` (``epochtrain collect``). Episodes still running at
        the end of the buffer (and any the ring overwrote the start of) are left out.
    :param dataset_id: ``"<namespace>/<name>-v<version>"`` or ``"<name>-v<version>"``;
        an existing dataset of that id raises (Minari does not overwrite).
    :param env_id: the gymnasium id the data was recorded on (stored as the dataset's env
        spec, so ``dataset.recover_environment()`` works). ``ValueError`` before anything
        is written when the buffer's observations or actions do not fit its spaces (shape,
        kind, Discrete range) or the buffer file's ``.json`` sidecar names another env;
        a ``UserWarning`` when Box actions past its bounds are clipped.
    :param algorithm_name: the recording policy (e.g. ``"PPO medium"``).
    :param author: author of the dataset.
    :param author_email: the author's contact.
    :param code_permalink: a link to the versioned code that recorded the data. Minari
        warns when ``author``, ``author_email`` or ``code_permalink`` is missing; they
        matter for a dataset that is shared. The dataset's evaluation env is ``env_id``.
    :param description: free text shown by ``minari show``.
    :param data_format: Minari storage format: ``"hdf5"`` (needs ``h5py``) or
        ``"arrow"`` (needs ``pyarrow``).
    """
    minari = require("minari", extra="minari")
    episode_buffer = require("minari.data_collector.episode_buffer", extra="minari")
    check_new_dataset_id(dataset_id)
    if data_format not in ("hdf5", "arrow"):
        raise ValueError(f"data_format must be 'hdf5' or 'arrow', got {data_format!r}")
    if isinstance(buffer_or_path, ReplayBuffer):
        buffer = buffer_or_path
    elif isinstance(buffer_or_path, (str, os.PathLike)):
        buffer = ReplayBuffer.load(buffer_or_path)
    else:
        raise TypeError(
            f"buffer_or_path must be a ReplayBuffer or a buffer file path, got {buffer_or_path!r}"
        )
    episodes = _episodes(buffer)
    if not episodes:
        raise ValueError(
            "buffer_or_path holds no complete episode (no terminated or truncated step): "
            "record until at least one episode ends"
        )
    spec = _env_spec(env_id)
    _check_recorded_env(buffer, env_id)
    obs_space, act_space = _env_spaces(spec)
    _check_fits(episodes, obs_space, act_space, env_id)
    to_env = env_action_map(act_space)
    if to_env is not None:  # a dataset holds the env's actions: clipped, shifted to start
        _warn_clipped(episodes, act_space, env_id)
        episodes = [{**ep, "actions": to_env(ep["actions"])} for ep in episodes]
    buffers = [episode_buffer.EpisodeBuffer(id=i, infos={}, **ep) for i, ep in enumerate(episodes)]
    directory = Path(minari.storage.get_dataset_path(dataset_id))
    was = _folders_before(directory, dataset_id)
    try:
        dataset = minari.create_dataset_from_buffers(
            dataset_id,
            buffers,
            env=spec,
            eval_env=spec,
            algorithm_name=algorithm_name,
            author=author,
            author_email=author_email,
            code_permalink=code_permalink,
            description=description,
            data_format=data_format,
        )
        dataset.storage.update_metadata(_returns_metadata([ep["rewards"] for ep in episodes]))
    except BaseException:
        # what is there now and was not before is Minari's partial write, which would make
        # a rerun fail ("already exists", "misconfigured") and list an empty namespace
        with deferred_signals():  # a second Ctrl-C does not cut the removal short
            _remove_new(directory, was)
        raise
    return directory


_NAMESPACE_METADATA = "namespace_metadata.json"
"""The file Minari writes into each namespace folder it creates (``minari.namespace``)."""


def _folders_before(directory: Path, dataset_id: str) -> dict[Path, tuple[bool, bool]]:
    """For the dataset folder and each namespace folder above it (deepest first): whether
    it exists, and whether it holds a namespace's metadata file."""
    folders = [directory, *directory.parents][: dataset_id.count("/") + 1]
    return {f: (f.is_dir(), (f / _NAMESPACE_METADATA).exists()) for f in folders}


def _remove_new(directory: Path, was: dict[Path, tuple[bool, bool]]) -> None:
    """Remove what a failed write made: the dataset folder if it is new, each namespace
    metadata file that was not there and each new namespace folder left empty (a folder
    that existed, or that another writer filled meanwhile, stays)."""
    for folder, (existed, had_metadata) in was.items():
        if folder == directory:
            if not existed:
                shutil.rmtree(directory, ignore_errors=True)
            continue
        if not had_metadata:
            (folder / _NAMESPACE_METADATA).unlink(missing_ok=True)
        if not existed:
            with contextlib.suppress(OSError):
                folder.rmdir()


def _env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registered spec of ``env_id``; ``"module:Env-vN"`` imports ``module`` first, as
    ``gymnasium.make`` does (Minari's ``gym.spec`` would not); ``ValueError`` if unknown."""
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"env_id must be a gymnasium id such as 'CartPole-v1', got {env_id!r}")
    module, _, name = env_id.rpartition(":")
    if module:
        importlib.import_module(module)  # registers its envs
    try:
        return gym.spec(name)
    except gym.error.Error as exc:
        raise ValueError(f"env_id {env_id!r} is not a registered gymnasium env: {exc}") from exc


def _env_spaces(spec: gym.envs.registration.EnvSpec) -> tuple[gym.Space[Any], gym.Space[Any]]:
    """The observation and action spaces of one env of ``spec`` (built and closed)."""
    env = gym.make(spec)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _check_recorded_env(buffer: ReplayBuffer, env_id: str) -> None:
    """Refuse ``env_id`` when the buffer file's ``.json`` sidecar (``epochtrain collect``)
    names another env; a buffer without one (built in code, or a bare file) passes."""
    if buffer.source is None or buffer.source.startswith("minari:"):
        return
    sidecar = Path(buffer.source + ".json")
    try:
        recorded = json.loads(sidecar.read_text(encoding="utf-8")).get("env_id")
    except (OSError, ValueError, AttributeError):
        return  # no sidecar, or not one that record_dataset wrote
    if not isinstance(recorded, str):
        return
    if recorded.rpartition(":")[2] != env_id.rpartition(":")[2]:
        raise ValueError(
            f"env_id={env_id!r}, but {str(sidecar)!r} says {buffer.source!r} was recorded on "
            f"{recorded!r}: pass env_id={recorded!r} (a dataset's env is the one its data "
            "came from)"
        )


def _check_fits(
    episodes: Sequence[dict[str, Tree]],
    obs_space: gym.Space[Any],
    act_space: gym.Space[Any],
    env_id: str,
) -> None:
    """Refuse a buffer whose observations or actions are not of ``env_id``'s spaces (the
    dataset would declare spaces its data does not fit)."""
    fix = f"pass the env_id the buffer was recorded on (env_id={env_id!r} is wrong)"
    for label, values, space in (
        ("observations", [ep["observations"] for ep in episodes], obs_space),
        ("actions", [ep["actions"] for ep in episodes], act_space),
    ):
        problem = _misfit(values, space, actions=label == "actions")
        if problem is not None:
            raise ValueError(
                f"the buffer's {label} do not fit the {label[:-1]} space {space} of "
                f"env_id={env_id!r}: {problem}; {fix}"
            )


def _misfit(values: Sequence[Tree], space: gym.Space[Any], *, actions: bool) -> str | None:
    """What in ``values`` (one array or dict per episode, leading axis: steps) does not
    fit ``space``, in words, or None. ``actions``: they are the policy's (a Discrete's are
    indices ``0 .. n-1``, a float Box's are floats); observations are the env's own (a
    Discrete's are ``start .. start+n-1``)."""
    if isinstance(space, gym.spaces.Dict):
        if not all(isinstance(v, dict) and set(v) == set(space.spaces) for v in values):
            found = sorted(values[0]) if isinstance(values[0], dict) else "arrays"
            return f"they hold {found}, the space the keys {sorted(space.spaces)}"
        for key, sub in space.spaces.items():
            problem = _misfit([v[key] for v in values], sub, actions=actions)
            if problem is not None:
                return f"{key!r}: {problem}"
        return None
    if any(isinstance(v, dict) for v in values):
        return "they are dicts, the space is not a Dict"
    data = np.concatenate([np.asarray(v) for v in values])
    expected = tuple(space.shape) if space.shape is not None else None
    if expected is not None and tuple(data.shape[1:]) != expected:
        return f"each has shape {tuple(data.shape[1:])}, the space {expected}"
    if isinstance(space, gym.spaces.Discrete):
        if data.dtype.kind not in "iub":
            return f"they are {data.dtype} values, a Discrete space holds integers"
        low = 0 if actions else int(space.start)
        high = low + int(space.n)
        bad = (data < low) | (data >= high)
        if bad.any():
            seen = ", ".join(str(v) for v in np.unique(data[bad])[:5])
            return f"{int(bad.sum())} of {data.size} lie outside [{low}, {high}) (e.g. {seen})"
    elif isinstance(space, gym.spaces.Box) and space.dtype is not None:
        integers_for_reals = actions and data.dtype.kind != "f" and space.dtype.kind == "f"
        if data.dtype.kind not in "fiub" or integers_for_reals:
            return f"they are {data.dtype} values, the space holds {space.dtype}"
    return None


def _warn_clipped(episodes: Sequence[dict[str, Tree]], space: gym.Space[Any], env_id: str) -> None:
    """Warn when clipping to ``space``'s bounds changes actions of the buffer (a policy's
    own sample past the bounds, such as a Gaussian's: the env applied the clipped one)."""
    if not isinstance(space, gym.spaces.Box):
        return
    act = np.concatenate([ep["actions"] for ep in episodes]).reshape(-1, *space.shape)
    outside = ((act < space.low) | (act > space.high)).reshape(len(act), -1).any(axis=1)
    if outside.any():
        seen = act[outside]
        warnings.warn(
            f"{int(outside.sum())} of {len(act)} actions of the buffer lie outside the action "
            f"space {space} of env_id={env_id!r} (they range over [{float(seen.min()):.3g}, "
            f"{float(seen.max()):.3g}]): the dataset holds them clipped to the bounds, as "
            "the env applied them; if the buffer was recorded on another env, pass its env_id",
            UserWarning,
            stacklevel=3,
        )


def _returns_metadata(rewards: Sequence[np.ndarray]) -> dict[str, float | int]:
    returns = np.array([float(r.sum()) for r in rewards])
    return {
        "recording_episodes": len(returns),
        "recording_returns_mean": float(returns.mean()),
        "recording_returns_std": float(returns.std()),
        "recording_returns_min": float(returns.min()),
        "recording_returns_max": float(returns.max()),
    }
