"""How a :class:`~epochtrain.data.buffer.ReplayBuffer` keeps its fields, and its file.

Each field is a ``[rows, num_envs, ...]`` tensor in CPU memory (a nested dict of them for
dict observations), written and gathered through numpy views. A buffer's state (from
``state_dict``) is checked here before anything of it is loaded, and written to or read
from a buffer file atomically, as checkpoints are.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.utils import create_empty_array
from torch import Tensor

from epochtrain.data.batch import Obs
from epochtrain.data.io import safe_torch_load
from epochtrain.data.writes import replace_file
from epochtrain.errors import CheckpointError

__all__ = [
    "BUFFER_FORMAT_VERSION",
    "FIXED_FIELDS",
    "ObsArray",
    "alloc",
    "alloc_obs",
    "check_memory",
    "check_n_step",
    "check_spaces_memory",
    "check_state",
    "copy_rows",
    "empty_rows",
    "first_shape",
    "flags_as_bool",
    "flat_views",
    "gather",
    "numpy_views",
    "obs_index",
    "put_rows",
    "read_state_file",
    "size_text",
    "spaces_transition_bytes",
    "transition_bytes",
    "write_obs",
    "write_state_file",
]

BUFFER_FORMAT_VERSION = 1
"""Version of the on-disk format written by :meth:`ReplayBuffer.save`."""

ObsArray = np.ndarray | dict[str, Any]
FIXED_FIELDS = ("act", "rew", "terminated", "truncated", "valid")
"""The fields every buffer state holds, beside ``obs``, ``obs_next`` and the extras."""


def alloc(example: np.ndarray, rows: int, num_envs: int) -> Tensor:
    arr = np.asarray(example)
    dtype = arr.dtype
    if dtype == np.float64:
        dtype = np.dtype(np.float32)
    return torch.zeros(
        (rows, num_envs, *arr.shape[1:]), dtype=torch.from_numpy(arr[:0].astype(dtype)).dtype
    )


def _bytes_per_row(example: ObsArray) -> int:
    """Bytes of one env's entry of ``example`` (a leading env axis) once stored."""
    if isinstance(example, dict):
        return sum(_bytes_per_row(v) for v in example.values())
    arr = np.asarray(example)
    itemsize = 4 if arr.dtype == np.float64 else arr.dtype.itemsize
    return int(np.prod(arr.shape[1:], dtype=np.int64)) * itemsize


MEMORY_SHARE = 0.8
"""The most of the available memory a replay buffer may take (the rest: the process, its
envs, the networks)."""


def available_memory() -> int | None:
    """Bytes of memory available to new allocations (Linux ``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(
    obs: ObsArray,
    act: np.ndarray,
    rows: int,
    num_envs: int,
    *,
    setting: str = "buffer_size",
    value: int | None = None,
    step_per_epoch: int | None = None,
) -> None:
    """Raise ``ValueError`` naming ``setting`` (``buffer_size``, or what else sized the
    buffer, such as an on-policy rollout's ``step_per_collect``, then with its ``value``)
    if a buffer of ``rows`` x ``num_envs`` transitions like ``obs`` and ``act`` (a leading
    env axis) would take more than :data:`MEMORY_SHARE` of the memory available. Linux
    hands out zeroed pages lazily, so without this check a buffer too large is not
    refused: the kernel kills the process, without a word, once the buffer fills up.

    ``step_per_epoch`` (env steps per epoch of a trainer whose buffer keeps its rows across
    epochs: off-policy) adds the copies a full ring keeps while an epoch runs, of the rows
    of older data the epoch overwrites, for a Ctrl-C roll-back
    (:class:`~epochtrain.data.buffer_ring.SavedRows`): ``step_per_epoch`` transitions, at
    most the whole ring. The copies' last block (at most 1 MiB) and a last collect step
    that overshoots ``step_per_epoch`` are left to the memory not shared out. An on-policy
    buffer, emptied after each update, copies nothing: leave it None."""
    per_row = transition_bytes(obs, act)
    transitions = rows * num_envs
    epoch_rows = 0 if step_per_epoch is None else -(-step_per_epoch // num_envs)
    copied = min(rows, epoch_rows) * num_envs
    needed = per_row * (transitions + copied)
    available = available_memory()
    if available is None or needed <= MEMORY_SHARE * available:
        return
    kind = "dict" if isinstance(obs, dict) else f"{np.asarray(obs).shape[1:]} {obs.dtype}"
    fit_rows = int(MEMORY_SHARE * available) // per_row // num_envs
    # rows + min(rows, epoch_rows) <= fit_rows: the most rows whose copies fit too
    fits = max(min(fit_rows // 2, epoch_rows), fit_rows - epoch_rows) * num_envs
    buffer = f"{transitions:,} transitions of {kind} observations"
    if value is None or setting == "buffer_size":
        sized, at_most = f"buffer_size={buffer}", fits
    else:  # the buffer's size follows from `setting`: the fix is to lower that
        sized = f"{setting}={value:,} makes a buffer of {buffer}, which"
        at_most = fits * value // transitions
    what, fix = "obs and obs_next are stored", ""
    if copied:
        what = (
            f"{size_text(per_row * transitions)} for the buffer, {what}, and "
            f"{size_text(per_row * copied)} for the copies a full ring keeps of the rows each "
            f"epoch of step_per_epoch={step_per_epoch:,} overwrites, for a Ctrl-C roll-back"
        )
        fix = " or step_per_epoch"
    raise ValueError(
        f"{sized} need {size_text(needed)} ({what}), more than {MEMORY_SHARE:.0%} of the "
        f"{size_text(available)} of memory available: lower {setting} (at most {at_most:,} "
        f"here){fix}"
    )


def transition_bytes(obs: ObsArray, act: np.ndarray) -> int:
    """Bytes one transition like ``obs`` and ``act`` (a leading env axis) takes in a buffer:
    ``obs`` and ``obs_next``, the action, the reward and three flags."""
    return 2 * _bytes_per_row(obs) + _bytes_per_row(act) + 4 + 3


def spaces_transition_bytes(
    observation_space: gym.Space[Any], action_space: gym.Space[Any]
) -> int | None:
    """:func:`transition_bytes` of an env with these spaces; ``None`` for spaces a buffer
    cannot hold (the buffer refuses them itself)."""
    obs = create_empty_array(observation_space, 1)
    act = create_empty_array(action_space, 1)
    if isinstance(obs, np.ndarray | dict) and isinstance(act, np.ndarray):
        return transition_bytes(obs, act)
    return None


def size_text(n_bytes: float) -> str:
    """``n_bytes`` as ``"1.2 GB"`` or ``"350.0 MB"``."""
    return f"{n_bytes / 1e9:.1f} GB" if n_bytes >= 1e9 else f"{n_bytes / 1e6:.1f} MB"


def check_spaces_memory(
    observation_space: gym.Space[Any],
    action_space: gym.Space[Any],
    rows: int,
    num_envs: int,
    *,
    setting: str = "buffer_size",
    value: int | None = None,
    step_per_epoch: int | None = None,
) -> None:
    """:func:`check_memory` for the observations and actions of one env's spaces, before
    any transition exists (spaces a buffer cannot hold are left to the buffer to refuse);
    ``step_per_epoch`` counts a full ring's roll-back copies too (off-policy)."""
    obs = create_empty_array(observation_space, num_envs)
    act = create_empty_array(action_space, num_envs)
    if isinstance(obs, np.ndarray | dict) and isinstance(act, np.ndarray):
        check_memory(
            obs, act, rows, num_envs, setting=setting, value=value, step_per_epoch=step_per_epoch
        )


def alloc_obs(example: ObsArray, rows: int, num_envs: int) -> Obs:
    if isinstance(example, dict):
        return {k: alloc_obs(v, rows, num_envs) for k, v in example.items()}
    return alloc(example, rows, num_envs)


def numpy_views(obs: Obs) -> Any:
    if isinstance(obs, Tensor):
        return obs.numpy()
    return {k: numpy_views(v) for k, v in obs.items()}


def flat_views(view: Any) -> Any:
    """``[rows, envs, ...]`` numpy views reshaped (still views) to ``[rows * envs, ...]``."""
    if isinstance(view, dict):
        return {k: flat_views(v) for k, v in view.items()}
    return view.reshape(-1, *view.shape[2:])


def gather(view: Any, index: np.ndarray) -> Obs:
    """Rows ``index`` of a flat numpy view (or a dict of them) as new tensors."""
    if isinstance(view, dict):
        return {k: gather(v, index) for k, v in view.items()}
    return torch.from_numpy(view[index])


def empty_rows(view: Any, n: int) -> Any:
    """Uninitialised room for ``n`` rows of a ``[rows, envs, ...]`` numpy view (or a dict)."""
    if isinstance(view, dict):
        return {k: empty_rows(v, n) for k, v in view.items()}
    return np.empty((n, *view.shape[1:]), dtype=view.dtype)


def copy_rows(view: Any, start: int, stop: int, into: Any) -> None:
    """Copy rows ``start:stop`` of ``view`` to the first rows of ``into`` (from
    :func:`empty_rows`), field by field."""
    if isinstance(view, dict):
        for k, v in view.items():
            copy_rows(v, start, stop, into[k])
    else:
        into[: stop - start] = view[start:stop]


def put_rows(view: Any, start: int, stop: int, copies: Any) -> None:
    """Write back rows ``start:stop`` of ``view`` from :func:`copy_rows`'s ``copies``."""
    if isinstance(view, dict):
        for k, v in view.items():
            put_rows(v, start, stop, copies[k])
    else:
        view[start:stop] = copies[: stop - start]


def write_obs(view: Any, t: int, value: ObsArray) -> None:
    if isinstance(view, dict):
        assert isinstance(value, dict)
        for k, v in view.items():
            write_obs(v, t, value[k])
    else:
        view[t] = value


def check_n_step(n_step: int) -> None:
    if not isinstance(n_step, int) or n_step < 1:
        raise ValueError(f"n_step must be a positive int, got {n_step!r}")


def first_shape(obs: Obs) -> tuple[int, ...]:
    while not isinstance(obs, Tensor):
        obs = next(iter(obs.values()))
    return tuple(obs.shape[:2])


def obs_index(obs: Obs, fn: Any) -> Obs:
    if isinstance(obs, Tensor):
        result: Tensor = fn(obs)
        return result
    return {k: obs_index(v, fn) for k, v in obs.items()}


def check_state(state: Any, *, capacity: int, num_envs: int, fields: set[str] | None) -> None:
    """Raise ``ValueError`` naming the entry unless ``state`` (from ``state_dict``) fits a
    buffer of ``capacity`` and ``num_envs`` whose storage holds ``fields`` (``None``: not
    allocated yet, any fields); changes nothing."""
    rows = capacity // num_envs
    if not isinstance(state, dict):
        raise ValueError(f"the buffer state is a {type(state).__name__}, not a dict")
    missing = [k for k in ("capacity", "num_envs", "cursor", "size", "storage") if k not in state]
    if missing:
        raise ValueError(f"the buffer state lacks the entries {missing}")
    if state["capacity"] != capacity or state["num_envs"] != num_envs:
        raise ValueError(
            f"buffer state has capacity={state['capacity']}, num_envs={state['num_envs']}; "
            f"this buffer has capacity={capacity}, num_envs={num_envs}: build "
            "the buffer as the saved one was"
        )
    for key in ("cursor", "size"):
        value = state[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= rows:
            raise ValueError(f"buffer state {key}={value!r} is not in [0, {rows}]")
    storage = state["storage"]
    if storage is None:
        if state["size"] != 0 or state["cursor"] != 0:
            raise ValueError(
                f"the buffer state has no storage but size={state['size']}, "
                f"cursor={state['cursor']}: an empty buffer has both 0 (the file is damaged "
                "or was not written by ReplayBuffer.save)"
            )
        return
    required = ("obs", "obs_next", *FIXED_FIELDS)
    if not isinstance(storage, dict):
        raise ValueError(
            f"the buffer state's storage is a {type(storage).__name__}, not a dict of the "
            f"fields {list(required)}"
        )
    lacking = [k for k in required if k not in storage]
    if lacking:
        raise ValueError(
            f"the buffer state's storage lacks the fields {lacking}: a buffer holds every "
            f"one of {list(required)} (write it with ReplayBuffer.save)"
        )
    _check_field_types(storage)
    size = state["size"]
    bad = [
        name
        for name, leaf in _field_leaves(storage)
        if first_shape(leaf)[1:] != (num_envs,) or first_shape(leaf)[0] not in (size, rows)
    ]
    if bad:
        raise ValueError(
            f"buffer state fields {sorted(bad)} are not shaped ({size} or {rows}, {num_envs}, ...)"
        )
    _check_field_shapes(storage)
    if fields is not None and set(storage) != fields:
        raise ValueError(
            f"the buffer state holds the fields {sorted(storage)}, this buffer "
            f"{sorted(fields)}: it was filled by another algorithm"
        )


FLAG_FIELDS = ("terminated", "truncated", "valid")
"""The boolean ``[rows, num_envs]`` fields."""


def _check_field_types(storage: dict[str, Any]) -> None:
    """Every stored field is a tensor (a dict of them, nested at any depth, for dict
    observations); the flags are bool."""
    for name, value in _field_leaves(storage):
        if not isinstance(value, Tensor):
            raise ValueError(
                f"the buffer state's field {name!r} is a {type(value).__name__}, not a "
                "torch.Tensor: store every field as a tensor (torch.from_numpy)"
            )
    for name in FLAG_FIELDS:
        if storage[name].dtype != torch.bool:
            raise ValueError(
                f"the buffer state's field {name!r} has dtype {storage[name].dtype}, not "
                "torch.bool: store it as a bool tensor (e.g. `flag != 0` of a 0/1 column)"
            )


def _check_field_shapes(storage: dict[str, Any]) -> None:
    """``rew`` and the flags are ``[rows, num_envs]``; ``obs_next`` is shaped as ``obs``."""
    for name in ("rew", *FLAG_FIELDS):
        if storage[name].dim() != 2:
            raise ValueError(
                f"the buffer state's field {name!r} has shape {tuple(storage[name].shape)}, "
                "not (rows, num_envs): one value per transition"
            )
    # the leaves by their path below the field: "" for a tensor, ".a.x" for obs["a"]["x"]
    obs = {k.removeprefix("obs"): v for k, v in _obs_leaves("obs", storage["obs"])}
    obs_next = {
        k.removeprefix("obs_next"): v for k, v in _obs_leaves("obs_next", storage["obs_next"])
    }
    if set(obs) != set(obs_next):
        raise ValueError(
            "the buffer state's fields 'obs' and 'obs_next' are not alike (dicts of the same "
            "keys at every level, or both tensors): obs_next holds the next observation of "
            "each transition"
        )
    for path, now in obs.items():
        after, name = obs_next[path], f"obs_next{path}"
        if now.shape[2:] != after.shape[2:]:
            raise ValueError(
                f"the buffer state's field {name!r} has entries of shape "
                f"{tuple(after.shape[2:])}, the observations {tuple(now.shape[2:])}: "
                "obs_next holds the next observation of each transition, shaped as obs"
            )


def _obs_leaves(name: str, obs: Any) -> list[tuple[str, Any]]:
    """``(dotted name, value)`` of each leaf of an observation field, nested dicts at any
    depth flattened in key order (``obs.a.x``); a field that is no dict, or an empty dict,
    is its own leaf."""
    if not isinstance(obs, dict) or not obs:
        return [(name, obs)]
    return [pair for k, v in obs.items() for pair in _obs_leaves(f"{name}.{k}", v)]


def _field_leaves(storage: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(dotted name, value)`` of every leaf of a buffer state's storage: the observation
    fields' leaves (:func:`_obs_leaves`), and every other field as it is."""
    return [
        pair
        for k, v in storage.items()
        for pair in (_obs_leaves(k, v) if k in ("obs", "obs_next") else [(k, v)])
    ]


def flags_as_bool(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with its ``terminated``, ``truncated`` and ``valid`` columns as bool where
    they were stored as 0/1 numbers (D4RL-style float terminals); ``ValueError`` naming
    the field if one holds another value. Anything else is left to :func:`check_state`."""
    storage = state.get("storage")
    if not isinstance(storage, dict):
        return state
    converted = dict(storage)
    for name in FLAG_FIELDS:
        value = storage.get(name)
        if not isinstance(value, Tensor) or value.dtype == torch.bool:
            continue
        if value.is_complex() or not bool(((value == 0) | (value == 1)).all()):
            raise ValueError(
                f"the buffer state's field {name!r} has dtype {value.dtype} and values other "
                "than 0 and 1: store it as a bool tensor (True where the flag is set)"
            )
        converted[name] = value != 0
    return {**state, "storage": converted}


def write_state_file(state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Write a buffer ``state`` to ``path`` atomically (temporary file, fsync, then rename).

    A failed write (full disk) raises ``CheckpointError`` naming the file; an existing
    file at ``path`` is then untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(
        path,
        lambda f: torch.save(state, f),
        what="buffer file",
        fix=f"free disk space and save again; {os.fspath(path)!r} is untouched",
    )


def read_state_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The buffer state in a file written by :func:`write_state_file` (``weights_only``: no
    code runs); ``FileNotFoundError`` or ``CheckpointError`` naming the path (a dataset's
    ``.json`` sidecar is named as such, with the buffer file it describes)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"buffer file {str(path)!r} does not exist")
    described = path.with_name(path.name.removesuffix(".json"))
    if path.suffix == ".json" and described != path and described.is_file():
        raise CheckpointError(  # the pair `epochtrain collect` writes: FILE and FILE.json
            f"{str(path)!r} is the JSON sidecar that describes the dataset "
            f"{str(described)!r}, not a buffer file: pass {str(described)!r}"
        )
    state = safe_torch_load(path, "buffer file")
    if not isinstance(state, dict) or state.get("format_version") != BUFFER_FORMAT_VERSION:
        raise CheckpointError(
            f"buffer file {str(path)!r} is not an epochtrain buffer of format "
            f"version {BUFFER_FORMAT_VERSION}"
        )
    return state
