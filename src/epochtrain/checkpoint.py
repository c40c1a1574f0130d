"""Checkpoints: atomic save and exact resume of a whole trainer.

A checkpoint is one directory (format and guarantee: ``docs/checkpointing.md``)::

    epoch_000010/
      manifest.json   format, versions, counters, config, size and sha256 of each file
      policy.pt       policy.state_dict(): weights, optimizers, the algorithm's extra state
      buffer.pt       the replay or rollout buffer with its cursor (online trainers)
      trainer.pt      counters, RNG states, collectors and envs, MovAvg windows, logger
                      position and hook states (BaseTrainer.state_dict without the above)

It is written under a temporary name in the same parent directory, every file is
fsynced, ``manifest.json`` is written last, and the directory is renamed into place: a
crash at any moment leaves either the complete checkpoint or none (plus a ``.tmp-*``
directory that is never read and is removed by the next periodic save). Loading checks
the manifest and every file's size and sha256, so a partial or corrupt checkpoint raises
:class:`CheckpointError` naming the file and the problem. Nothing ever prompts.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import platform
import shutil
import warnings
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from epochtrain.algorithms.base import Policy
    from epochtrain.trainer.base import BaseTrainer

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "MANIFEST",
    "CheckpointError",
    "find_checkpoints",
    "jsonable",
    "load_checkpoint",
    "load_hook_states",
    "load_policy",
    "read_manifest",
    "resolve_checkpoint",
    "save_checkpoint",
    "save_periodic",
]

CHECKPOINT_FORMAT_VERSION = 1
"""Version of the directory layout and manifest written by :func:`save_checkpoint`."""

MANIFEST = "manifest.json"
"""Name of the manifest file; a directory without it is not a (complete) checkpoint."""

_FORMAT = "epochtrain-checkpoint"
_PAYLOAD = ("policy.pt", "buffer.pt", "trainer.pt")
_PERIODIC_PREFIX = "epoch_"
_TMP_PREFIX = ".tmp-"
_SETTINGS = (
    "max_epoch",
    "step_per_epoch",
    "episode_per_test",
    "seed",
    "step_per_collect",
    "episode_per_collect",
    "repeat_per_collect",
    "update_per_step",
    "batch_size",
    "warmup_steps",
    "test_in_train",
    "test_before_train",
)


def jsonable(values: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that JSON represents exactly (numbers, strings, bools,
    ``None`` and lists or dicts of them); callables, loggers, buffers, ... are left out."""

    def ok(value: Any) -> bool:
        if value is None or isinstance(value, bool | int | str):
            return True
        if isinstance(value, float):
            return math.isfinite(value)
        if isinstance(value, list | tuple):
            return all(ok(v) for v in value)
        if isinstance(value, dict):
            return all(isinstance(k, str) and ok(v) for k, v in value.items())
        return False

    return {k: v for k, v in values.items() if ok(v)}


class CheckpointError(ValueError):
    """A checkpoint that is partial, corrupt or not a checkpoint; the message names the file."""


def _versions() -> dict[str, str]:
    import gymnasium
    import numpy

    try:
        library = version("epochtrain")
    except PackageNotFoundError:
        library = "unknown"
    return {
        "epochtrain": library,
        "torch": torch.__version__,
        "gymnasium": gymnasium.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
    }


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_file(path: Path, obj: Any) -> dict[str, Any]:
    with path.open("wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    return {"bytes": path.stat().st_size, "sha256": _sha256(path)}


def _manifest(trainer: BaseTrainer[Any], files: dict[str, Any]) -> dict[str, Any]:
    test = trainer.last_test_stat
    settings = {name: getattr(trainer, name) for name in _SETTINGS if hasattr(trainer, name)}
    return {
        "format": _FORMAT,
        "format_version": CHECKPOINT_FORMAT_VERSION,
        "versions": _versions(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "epoch": trainer.epoch,
        "env_step": trainer.env_step,
        "gradient_step": trainer.gradient_step,
        "test_return": _finite_or_none(
            test.returns_stat.mean if test and test.returns_stat else None
        ),
        "best_test_return": _finite_or_none(trainer.best_test_return),
        "best_epoch": trainer.best_epoch,
        "stop_reason": trainer.stop_reason,
        "config": {
            "trainer": type(trainer).__name__,
            "policy": type(trainer.policy).__name__,
            "settings": settings,
            **trainer.config,
        },
        "files": files,
    }


def save_checkpoint(trainer: BaseTrainer[Any], path: str | os.PathLike[str]) -> Path:
    """Write ``trainer``'s checkpoint directory at ``path`` atomically; returns ``path``.

    An existing checkpoint at ``path`` is replaced. Prefer ``trainer.save_checkpoint``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = trainer.state_dict()
    payload = {"policy.pt": state.pop("policy"), "buffer.pt": state.pop("buffer", None)}
    payload["trainer.pt"] = state
    tmp = path.parent / f"{_TMP_PREFIX}{path.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        files = {
            name: _write_file(tmp / name, obj) for name, obj in payload.items() if obj is not None
        }
        manifest = json.dumps(_manifest(trainer, files), indent=2, default=repr)
        with (tmp / MANIFEST).open("w", encoding="utf-8") as f:
            f.write(manifest + "\n")
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        if path.exists():
            old = path.parent / f"{_TMP_PREFIX}old-{path.name}-{os.getpid()}"
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def read_manifest(path: str | os.PathLike[str], *, verify_files: bool = True) -> dict[str, Any]:
    """The manifest of the checkpoint directory ``path``, checked.

    Raises :class:`CheckpointError` when the manifest is missing (a partial checkpoint),
    unreadable or of a newer format, or (``verify_files``) when a file it lists is
    missing or differs in size or sha256. Warns when the checkpoint comes from another
    epochtrain, torch or gymnasium version.
    """
    ckpt = Path(path)
    manifest_path = ckpt / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(
            f"{os.fspath(manifest_path)!r} is missing: {os.fspath(ckpt)!r} is not a complete "
            "checkpoint (its save was interrupted, or it is not a checkpoint directory)"
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{os.fspath(manifest_path)!r} is corrupt: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        raise CheckpointError(
            f"{os.fspath(manifest_path)!r} is not an epochtrain checkpoint manifest"
        )
    if manifest.get("format_version", 0) > CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(
            f"{os.fspath(manifest_path)!r} has format version {manifest.get('format_version')}; "
            f"this epochtrain reads version {CHECKPOINT_FORMAT_VERSION}: upgrade epochtrain"
        )
    _warn_versions(ckpt, manifest.get("versions", {}))
    if verify_files:
        for name, entry in manifest.get("files", {}).items():
            _verify_file(ckpt / name, entry)
    return manifest


def _warn_versions(ckpt: Path, saved: dict[str, str]) -> None:
    current = _versions()
    differ = [
        f"{lib} {saved.get(lib)} (now {current[lib]})"
        for lib in ("epochtrain", "torch", "gymnasium")
        if saved.get(lib) != current[lib]
    ]
    if differ:
        warnings.warn(
            f"checkpoint {os.fspath(ckpt)!r} was written with " + ", ".join(differ) + "; it is "
            "loaded anyway, but a resumed run may not match an uninterrupted one bit for bit",
            stacklevel=3,
        )


def _verify_file(file: Path, entry: dict[str, Any]) -> None:
    if not file.is_file():
        raise CheckpointError(f"{os.fspath(file)!r} is missing from the checkpoint")
    size = file.stat().st_size
    if size != entry.get("bytes"):
        raise CheckpointError(
            f"{os.fspath(file)!r} has {size} bytes, the manifest says {entry.get('bytes')}: "
            "the file is truncated or was changed"
        )
    if _sha256(file) != entry.get("sha256"):
        raise CheckpointError(
            f"{os.fspath(file)!r} is corrupt: its sha256 differs from the manifest's"
        )


def _load_file(file: Path) -> Any:
    try:
        return torch.load(file, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise CheckpointError(f"{os.fspath(file)!r} cannot be read: {exc}") from exc


def find_checkpoints(root: str | os.PathLike[str]) -> list[Path]:
    """The complete periodic checkpoints (``epoch_*`` with a manifest) in ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.iterdir()
        if p.is_dir() and p.name.startswith(_PERIODIC_PREFIX) and (p / MANIFEST).is_file()
    ]
    return sorted(found, key=lambda p: p.name)


def resolve_checkpoint(path: str | os.PathLike[str]) -> Path:
    """``path`` itself if it is a checkpoint, else the latest complete checkpoint in it."""
    path = Path(path)
    own_files = any((path / name).exists() for name in (MANIFEST, *_PAYLOAD))
    if own_files or path.name.startswith(_PERIODIC_PREFIX):
        return path  # a checkpoint, maybe partial: read_manifest says what is wrong
    found = find_checkpoints(path)
    if not found:
        raise CheckpointError(
            f"{os.fspath(path)!r} holds no complete checkpoint (no epoch_*/{MANIFEST}); "
            "pass a checkpoint directory or a checkpoint_dir a run has written to"
        )
    return found[-1]


def load_checkpoint(trainer: BaseTrainer[Any], path: str | os.PathLike[str]) -> Path:
    """Restore the checkpoint at ``path`` (see :func:`resolve_checkpoint`) into ``trainer``.

    The trainer must be built as the checkpointed run was (same classes, hooks, envs,
    buffer capacity). Returns the checkpoint directory that was loaded.
    """
    ckpt = resolve_checkpoint(path)
    manifest = read_manifest(ckpt)
    config = manifest.get("config", {})
    for key, own in (
        ("trainer", type(trainer).__name__),
        ("policy", type(trainer.policy).__name__),
    ):
        if config.get(key) != own:
            raise ValueError(
                f"checkpoint {os.fspath(ckpt)!r} was written by a {config.get(key)} {key}, "
                f"this one is a {own}: build the trainer as the checkpointed run was"
            )
    state = _load_file(ckpt / "trainer.pt")
    state["policy"] = _load_file(ckpt / "policy.pt")
    if (ckpt / "buffer.pt").is_file():
        state["buffer"] = _load_file(ckpt / "buffer.pt")
    try:
        trainer.load_state_dict(state)
    except KeyError as exc:
        raise CheckpointError(f"checkpoint {os.fspath(ckpt)!r} lacks the entry {exc}") from exc
    return ckpt


def load_policy(policy: Policy[Any], path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load only the policy (weights and optimizers) of a checkpoint; returns its manifest."""
    ckpt = resolve_checkpoint(path)
    manifest = read_manifest(ckpt)
    policy.load_state_dict(_load_file(ckpt / "policy.pt"))
    return manifest


def load_hook_states(path: str | os.PathLike[str]) -> list[tuple[str, dict[str, Any]]]:
    """The hooks saved in a checkpoint, in registration order: ``(type name, state)`` pairs.

    Lets a tool that loads only the policy (``epochtrain eval``) rebuild the hooks that
    change what the policy sees, such as an ``ObservationNormalizer``'s statistics.
    """
    ckpt = resolve_checkpoint(path)
    manifest = read_manifest(ckpt, verify_files=False)
    if "trainer.pt" in manifest.get("files", {}):  # hash only the file read, not the buffer
        _verify_file(ckpt / "trainer.pt", manifest["files"]["trainer.pt"])
    state = _load_file(ckpt / "trainer.pt")
    try:
        return [(str(entry["type"]), dict(entry["state"])) for entry in state["hooks"]]
    except (KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {os.fspath(ckpt)!r} has no valid hook list") from exc


def _test_return(ckpt: Path) -> float | None:
    try:
        value = json.loads((ckpt / MANIFEST).read_text(encoding="utf-8")).get("test_return")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) else None


def save_periodic(trainer: BaseTrainer[Any], root: Path) -> Path:
    """Save ``root/epoch_<epoch>`` and rotate: keep the last ``trainer.keep_last`` and, with
    ``trainer.keep_best``, the one of the best test return. Stale temporaries are removed."""
    for stale in root.glob(f"{_TMP_PREFIX}*") if root.is_dir() else []:
        shutil.rmtree(stale, ignore_errors=True)
    path = save_checkpoint(trainer, root / f"{_PERIODIC_PREFIX}{trainer.epoch:06d}")
    found = find_checkpoints(root)
    keep = set(found if trainer.keep_last is None else found[-trainer.keep_last :])
    if trainer.keep_best:
        returns = [(_test_return(p), p) for p in found]
        scored = [(r, p) for r, p in returns if r is not None]
        if scored:
            best = max(r for r, _ in scored)
            keep.add(next(p for r, p in scored if r == best))
    for old in found:
        if old not in keep:
            shutil.rmtree(old, ignore_errors=True)
    return path
