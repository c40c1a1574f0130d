"""Offline datasets: recording one to a file, and the content fingerprint checkpoints keep.

:func:`record_dataset` steps ``num_envs`` copies of a gymnasium env with a policy (or
uniform random actions), writes every transition into a :class:`ReplayBuffer` (Box
actions clipped to the bounds, as the env applies them) and saves it with
:meth:`ReplayBuffer.save`, the format :meth:`ReplayBuffer.load` and the offline trainer
read. Beside the buffer file it writes ``<file>.json``, a sidecar that says how the
data was made and how well the recording policy did (its episode returns). The two are
written as one (:func:`~epochtrain.data.writes.replace_files`): a recording that fails or is
interrupted at any point leaves the old pair as it was, or nothing and none of the folders
it created, never a buffer file without its sidecar; an existing dataset is replaced only
when asked (``overwrite=True``, ``--overwrite``). ``epochtrain collect`` is the
command-line face of this module.

:func:`dataset_fingerprint` hashes the transitions of a loaded dataset: an offline
trainer's checkpoints record it, and a resume onto other data is refused, wherever the
file now lies.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from epochtrain.algorithms.base import Policy
from epochtrain.data import Collector, ReplayBuffer
from epochtrain.data.actions import policy_action_map
from epochtrain.data.batch import ActResult, Obs
from epochtrain.data.collector import Actor
from epochtrain.data.writes import removing_new_folders, replace_files

__all__ = ["DatasetInfo", "check_dataset_path", "dataset_fingerprint", "record_dataset"]


@dataclass(frozen=True)
class DatasetInfo:
    """What :func:`record_dataset` wrote, as stored in the ``.json`` sidecar."""

    path: str
    env_id: str
    n_steps: int
    num_envs: int
    seed: int
    policy: str
    deterministic: bool
    n_episodes: int
    return_mean: float
    return_std: float
    return_min: float
    return_max: float
    seconds: float


class _RandomActor:
    """Uniform random actions from the env's action space, as the policy's actions (a
    ``Discrete(n, start=k)``'s as indices ``0 .. n-1``: the collector shifts them back)."""

    def __init__(self, env: gym.vector.VectorEnv[Any, Any, Any]) -> None:
        self.action_space = env.action_space
        self.to_policy = policy_action_map(env.single_action_space)

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        sample = self.action_space.sample()
        return torch.as_tensor(sample if self.to_policy is None else self.to_policy(sample)), {}

    def to_tensor(self, obs: Obs) -> Obs:
        return obs


class _ObsTransformedActor:
    """``policy`` acting on ``transform(obs)``; the collector still stores the raw obs."""

    def __init__(self, policy: Policy[Any], transform: Callable[[np.ndarray], np.ndarray]) -> None:
        self.policy, self.transform = policy, transform

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        return self.policy.act(obs, deterministic)

    def to_tensor(self, obs: Obs) -> Obs:
        if not isinstance(obs, torch.Tensor):
            raise TypeError("obs_transform needs array (Box) observations, not dict ones")
        moved = torch.from_numpy(self.transform(obs.cpu().numpy()))
        return self.policy.to_tensor(moved)


def _clip_actions(buffer: ReplayBuffer, space: gym.Space[Any]) -> None:
    """Store the actions the env applied: a Box env clips what it gets to its bounds.

    Policies such as PPO's Gaussian sample past the bounds, and offline algorithms that
    squash their actions into the Box could never reproduce such dataset actions.
    """
    if isinstance(space, gym.spaces.Box):
        low = torch.as_tensor(space.low, dtype=torch.float32)
        high = torch.as_tensor(space.high, dtype=torch.float32)
        state = buffer.state_dict()
        state["storage"]["act"] = state["storage"]["act"].clamp(low, high)
        buffer.load_state_dict(state)


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def dataset_fingerprint(buffer: ReplayBuffer) -> str:
    """The sha256 (hex) of ``buffer``'s transitions: every stored field, in storage order,
    with its name, dtype and shape, and the buffer's ``num_envs``, cursor and fill level.

    It depends on the data only: the same dataset gives the same fingerprint from any
    path or device, and any changed value, row or order gives another. One pass over the
    data (about a second per GB).
    """
    state = buffer.state_dict()
    digest = hashlib.sha256()
    header = {key: state[key] for key in ("num_envs", "cursor", "size")}
    digest.update(json.dumps(header, sort_keys=True).encode("utf-8"))
    for chunk in _field_bytes("storage", state["storage"]):
        digest.update(chunk)
    return digest.hexdigest()


def _field_bytes(name: str, value: object) -> Iterator[bytes | memoryview]:
    """The bytes of a stored field (a tensor, or a dict of them), each tensor after its
    name, dtype and shape, so that no two different layouts hash alike."""
    if isinstance(value, Mapping):
        for key in sorted(value):
            yield from _field_bytes(f"{name}.{key}", value[key])
        return
    if not isinstance(value, torch.Tensor):
        yield f"{name}={value!r};".encode()
        return
    tensor = value.detach().to("cpu").contiguous()
    yield f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode()
    yield tensor.reshape(-1).view(torch.uint8).numpy().data  # no copy


def check_dataset_path(path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
    """Raise ``FileExistsError`` (saying what the file holds) if ``path`` or its ``.json``
    sidecar exists, unless ``overwrite``; a directory at ``path`` is always refused."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"dataset path {str(path)!r} is a directory: give a file name")
    if overwrite or not (path.exists() or _sidecar(path).exists()):
        return
    what = ""
    try:
        info = json.loads(_sidecar(path).read_text(encoding="utf-8"))
        what = f" ({info['n_steps']} env steps of {info['env_id']} by {info['policy']})"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    raise FileExistsError(
        f"dataset file {str(path)!r} exists{what}: choose another path, or replace it with "
        "overwrite=True (epochtrain collect --overwrite)"
    )


def record_dataset(
    policy: Policy[Any] | None,
    env_id: str,
    n_steps: int,
    path: str | os.PathLike[str],
    *,
    seed: int = 0,
    num_envs: int = 1,
    deterministic: bool = False,
    policy_name: str | None = None,
    obs_transform: Callable[[np.ndarray], np.ndarray] | None = None,
    overwrite: bool = False,
) -> DatasetInfo:
    """Record ``n_steps`` env steps of ``policy`` (``None``: random actions) into ``path``.

    ``deterministic=False`` keeps the policy's own exploration (as D4RL's datasets do);
    ``True`` records its deterministic actions. The run is seeded by ``seed`` and does
    not touch the caller's random state. ``obs_transform`` maps raw observations to what the
    policy acts on (e.g. ``ObservationNormalizer.normalize`` of the run that trained it);
    the dataset stores the raw ones. Returns the :class:`DatasetInfo` that is also
    written to ``<path>.json``; the returns are those of the episodes that ended.

    An existing ``path`` (or sidecar) raises ``FileExistsError`` before any work unless
    ``overwrite``. The buffer file and its sidecar are published as one, once both are
    written in full: if this function raises (an error, a full disk, Ctrl-C or SIGTERM at
    any point), ``path`` and ``<path>.json`` are as they were (the old pair, or no file)
    and the folders it created for ``path`` are gone; if it returns, both are the new
    ones. Only a kill (SIGKILL, a power cut) in the microseconds of the final renames can
    leave fewer files, and never a sidecar beside a buffer it does not describe.
    """
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive int, got {n_steps!r}")
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    if policy is not None and not isinstance(policy, Policy):
        raise TypeError(f"policy must be an epochtrain Policy or None, got {type(policy)}")
    if obs_transform is not None and policy is None:
        raise ValueError("obs_transform needs a policy: random actions ignore observations")
    out = Path(path)
    check_dataset_path(out, overwrite=overwrite)
    start = time.perf_counter()
    with removing_new_folders(out.parent):  # an interrupted recording leaves no new folder
        out.parent.mkdir(parents=True, exist_ok=True)
        buffer, n_collected, returns = _collect(
            policy, obs_transform, env_id, n_steps, num_envs, seed, deterministic
        )
        info = DatasetInfo(
            path=str(out),
            env_id=env_id,
            n_steps=n_collected,
            num_envs=num_envs,
            seed=seed,
            policy=policy_name or ("random" if policy is None else type(policy).__name__),
            deterministic=deterministic,
            n_episodes=len(returns),
            return_mean=float(returns.mean()),
            return_std=float(returns.std()),
            return_min=float(returns.min()),
            return_max=float(returns.max()),
            seconds=round(time.perf_counter() - start, 3),
        )
        sidecar = (json.dumps(asdict(info), indent=2) + "\n").encode("utf-8")
        replace_files(  # the pair as one; the sidecar last, as it describes the buffer file
            [(out, lambda f: torch.save(buffer.state_dict(), f)), (_sidecar(out), sidecar)],
            what="buffer file",
            fix=f"free disk space and record again; {os.fspath(out)!r} is untouched",
        )
    return info


def _collect(
    policy: Policy[Any] | None,
    obs_transform: Callable[[np.ndarray], np.ndarray] | None,
    env_id: str,
    n_steps: int,
    num_envs: int,
    seed: int,
    deterministic: bool,
) -> tuple[ReplayBuffer, int, np.ndarray]:
    """The buffer of :func:`record_dataset` (its Box actions clipped), the env steps
    collected and the returns of the episodes that ended; the caller's random state is
    left alone."""
    from epochtrain.factory import make_envs

    envs = make_envs(env_id, num_envs)
    rows = math.ceil(n_steps / num_envs)
    buffer = ReplayBuffer(rows * num_envs, num_envs)
    actor: Actor = _RandomActor(envs) if policy is None else policy
    if policy is not None and obs_transform is not None:
        actor = _ObsTransformedActor(policy, obs_transform)
    try:  # a policy for other spaces is refused here: the envs (processes) close
        collector = Collector(actor, envs, buffer, exploration=not deterministic)
    except BaseException:
        envs.close()
        raise
    saved_numpy = np.random.get_state()
    try:
        with torch.random.fork_rng():
            np.random.seed(seed)
            torch.manual_seed(seed)
            envs.action_space.seed(seed)
            collector.reset(seed=seed)
            stat = collector.collect(n_step=n_steps)
    finally:
        np.random.set_state(saved_numpy)
        envs.close()
    returns = np.asarray(stat.returns, dtype=np.float64)
    if len(returns) == 0:
        raise ValueError(
            f"no episode of {env_id} ended within n_steps={n_steps}: record more steps so "
            "that the dataset policy's return can be measured"
        )
    _clip_actions(buffer, envs.single_action_space)
    return buffer, stat.n_collected_steps, returns
