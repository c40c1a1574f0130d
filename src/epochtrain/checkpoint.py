"""Checkpoints: atomic save and exact resume of a whole trainer.

A checkpoint is one directory (format and guarantee: ``docs/checkpointing.md``)::

    epoch_000010/
      manifest.json   format, versions, counters, config, size and sha256 of each file
      policy.pt       policy.state_dict(): weights, optimizers, the algorithm's extra state
      buffer.pt       the replay or rollout buffer with its cursor (online trainers)
      trainer.pt      counters, RNG states, collectors and envs, MovAvg windows, logger
                      position and hook states (BaseTrainer.state_dict without the above)

It is written under a temporary name in the same parent directory, every file is
fsynced, ``manifest.json`` is written last, and the directory is renamed into place; an
existing checkpoint is moved aside first and deleted only once the new one is in place
(:mod:`epochtrain.checkpoint_files` names and recovers the leftovers of a killed save).
Loading checks the manifest's schema and every file's size and sha256, reads every file
with ``weights_only=True``, and checks every state against the trainer before changing
anything, so a partial, corrupt or unsafe checkpoint raises :class:`CheckpointError`
naming the file and the problem, and leaves the trainer as it was. Nothing ever prompts.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import os
import platform
import warnings
import weakref
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import torch

from epochtrain.checkpoint_files import (
    OLD,
    TMP,
    CheckpointLock,
    clean_leftovers,
    deferred_signals,
    is_complete,
    leftover_name,
    recover,
    remove_dir,
)
from epochtrain.data.io import safe_torch_load, write_durably
from epochtrain.errors import CheckpointError, NonFiniteError

if TYPE_CHECKING:
    from epochtrain.algorithms.base import Policy
    from epochtrain.trainer.base import BaseTrainer

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "MANIFEST",
    "CheckpointError",
    "check_finite_weights",
    "find_checkpoints",
    "hold_checkpoint_dir",
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
    write_durably(
        path,
        lambda f: torch.save(obj, f),
        what="checkpoint file",
        fix="free disk space (or raise the file-size limit) and save again; the previous "
        "checkpoint is untouched",
    )
    return {"bytes": path.stat().st_size, "sha256": _sha256(path)}


def _manifest(trainer: BaseTrainer[Any], files: dict[str, Any]) -> dict[str, Any]:
    test = trainer.last_test_stat
    # every RunState counter, derived from the dataclass (non-finite floats as null)
    counters = {
        name: _finite_or_none(value) if isinstance(value, float) else value
        for name, value in dataclasses.asdict(trainer.state).items()
    }
    return {
        "format": _FORMAT,
        "format_version": CHECKPOINT_FORMAT_VERSION,
        "versions": _versions(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(),
        **counters,
        "test_return": _finite_or_none(
            test.returns_stat.mean if test and test.returns_stat else None
        ),
        "stop_reason": trainer.stop_reason,
        "config": {
            "trainer": type(trainer).__name__,
            "policy": type(trainer.policy).__name__,
            "params": trainer.params.to_dict(),
            "algo_config": trainer.policy.config.to_dict(),
        },
        "spec": trainer.spec,
        "settings": trainer.resume_settings(),
        "files": files,
    }


def check_finite_weights(trainer: BaseTrainer[Any], path: str | os.PathLike[str]) -> None:
    """Raise :class:`NonFiniteError` if a floating tensor of the policy holds NaN or inf.

    Run before every save (one reduction per tensor, once per checkpoint), so no
    checkpoint is ever written from non-finite weights.
    """
    for name, tensor in trainer.policy.state_dict().items():
        floating = isinstance(tensor, torch.Tensor) and tensor.is_floating_point()
        if floating and not bool(torch.isfinite(tensor).all()):
            last = trainer.last_checkpoint
            raise NonFiniteError(
                f"refusing to write the checkpoint {os.fspath(path)!r}: the policy's "
                f"tensor {name!r} holds NaN or inf (epoch {trainer.state.epoch}, gradient step "
                f"{trainer.state.gradient_step}); the last good checkpoint is "
                + (repr(os.fspath(last)) if last is not None else "none (none was saved)"),
                where=f"policy tensor {name!r}",
            )


def save_checkpoint(trainer: BaseTrainer[Any], path: str | os.PathLike[str]) -> Path:
    """Write ``trainer``'s checkpoint directory at ``path`` atomically; returns ``path``.

    An existing checkpoint at ``path`` is replaced only once the new one is complete: at
    every moment ``path`` (or, after a kill between the two renames, its ``.old-*`` or
    ``.tmp-*`` copy, which the next save or load puts back) holds a complete checkpoint.
    Raises :class:`NonFiniteError` rather than save non-finite weights, and
    :class:`CheckpointError` naming the file when a write fails (the disk is full).
    Prefer ``trainer.save_checkpoint``.
    """
    path = Path(path)
    check_finite_weights(trainer, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recover(path)
    clean_leftovers(path.parent, name=path.name)
    state = trainer.state_dict()
    payload = {"policy.pt": state.pop("policy"), "buffer.pt": state.pop("buffer", None)}
    payload["trainer.pt"] = state
    tmp = path.parent / leftover_name(TMP, path.name)
    remove_dir(tmp)
    tmp.mkdir()
    try:
        files = {
            name: _write_file(tmp / name, obj) for name, obj in payload.items() if obj is not None
        }
        manifest = json.dumps(_manifest(trainer, files), indent=2, default=repr)
        write_durably(
            tmp / MANIFEST,
            lambda f: _write_text(f, manifest + "\n"),
            what="checkpoint manifest",
            fix="free disk space and save again; the previous checkpoint is untouched",
        )
        _fsync_dir(tmp)
    except BaseException:
        remove_dir(tmp)
        raise
    try:
        _swap_into_place(tmp, path)
    except BaseException:
        if tmp.exists():  # the swap did not happen: the previous checkpoint is in place
            remove_dir(tmp)
        else:  # a Ctrl-C held during the swap, raised once the new checkpoint was in place
            trainer.last_checkpoint = path
        raise
    trainer.last_checkpoint = path
    return path


def _write_text(f: BinaryIO, text: str) -> None:
    f.write(text.encode("utf-8"))


def _swap_into_place(tmp: Path, path: Path) -> None:
    """Rename ``tmp`` to ``path``; an existing ``path`` is moved aside first, then deleted.

    Ctrl-C and SIGTERM are held until the old one is gone; any error between the two
    renames moves the old checkpoint back.
    """
    old = path.parent / leftover_name(OLD, path.name)
    with deferred_signals():
        moved = False
        try:
            if path.exists():
                remove_dir(old)
                os.replace(path, old)
                moved = True
            os.replace(tmp, path)
        except BaseException:
            if moved and not path.exists():
                os.replace(old, path)
            raise
        _fsync_dir(path.parent)
        if moved:
            remove_dir(old)


_SHA256_HEX = frozenset("0123456789abcdef")


def _check_schema(manifest_path: Path, manifest: Any) -> dict[str, Any]:
    """The manifest, if every field a loader reads has the right type; else CheckpointError."""
    where = repr(os.fspath(manifest_path))
    fix = "the file was edited or damaged: restore it, or load another checkpoint"
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        raise CheckpointError(f"{where} is not an epochtrain checkpoint manifest")
    version = manifest.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise CheckpointError(
            f"{where}: 'format_version' must be an int, got {version!r} "
            f"({type(version).__name__}); {fix}"
        )
    if version > CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(
            f"{where} has format version {version}; this epochtrain reads version "
            f"{CHECKPOINT_FORMAT_VERSION}: upgrade epochtrain"
        )
    for key in ("epoch", "env_step", "gradient_step"):
        value = manifest.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CheckpointError(f"{where}: {key!r} must be an int >= 0, got {value!r}; {fix}")
    for key in ("versions", "config", "files"):
        if not isinstance(manifest.get(key), dict):
            raise CheckpointError(
                f"{where}: {key!r} must be an object, got {manifest.get(key)!r}; {fix}"
            )
    files: dict[str, Any] = manifest["files"]
    for required in ("policy.pt", "trainer.pt"):
        if required not in files:
            raise CheckpointError(f"{where} has no entry for {required!r} in 'files'; {fix}")
    for name, entry in files.items():
        if name not in _PAYLOAD:
            raise CheckpointError(
                f"{where} lists the file {name!r}; a checkpoint holds only {_PAYLOAD}; {fix}"
            )
        size = entry.get("bytes") if isinstance(entry, dict) else None
        digest = entry.get("sha256") if isinstance(entry, dict) else None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise CheckpointError(
                f"{where}: files[{name!r}] needs 'bytes' (an int), got {entry!r}; {fix}"
            )
        if not isinstance(digest, str) or len(digest) != 64 or set(digest) - _SHA256_HEX:
            raise CheckpointError(
                f"{where}: files[{name!r}] needs 'sha256' (64 hex digits), got {entry!r}; {fix}"
            )
    return manifest


def read_manifest(path: str | os.PathLike[str], *, verify_files: bool = True) -> dict[str, Any]:
    """The manifest of the checkpoint directory ``path``, checked.

    Raises :class:`CheckpointError` when the manifest is missing (a partial checkpoint),
    unreadable, malformed (a field missing or of the wrong type) or of a newer format, or
    (``verify_files``) when a file it lists is missing or differs in size or sha256. Warns
    when the checkpoint comes from another epochtrain, torch or gymnasium version.
    """
    ckpt = Path(path)
    manifest_path = ckpt / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(
            f"{os.fspath(manifest_path)!r} is missing: {os.fspath(ckpt)!r} is not a complete "
            "checkpoint (its save was interrupted, or it is not a checkpoint directory)"
        )
    try:
        raw = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{os.fspath(manifest_path)!r} is corrupt: {exc}") from exc
    manifest = _check_schema(manifest_path, raw)
    _warn_versions(ckpt, manifest["versions"])
    if verify_files:
        for name, entry in manifest["files"].items():
            _verify_file(ckpt / name, entry)
    return manifest


def _warn_versions(ckpt: Path, saved: dict[str, Any]) -> None:
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
    return safe_torch_load(file, "checkpoint file")


def _load_dict(file: Path) -> dict[str, Any]:
    state = _load_file(file)
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{os.fspath(file)!r} holds a {type(state).__name__}, not the dict epochtrain "
            "writes: it is not an epochtrain checkpoint file"
        )
    return state


def find_checkpoints(root: str | os.PathLike[str]) -> list[Path]:
    """The complete periodic checkpoints in ``root``, oldest first.

    Complete: an ``epoch_*`` directory whose manifest lists files that all exist with
    their sizes (a torn directory left by a killed rotation is not one).
    """
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith(_PERIODIC_PREFIX) and is_complete(p)]
    return sorted(found, key=lambda p: p.name)


def resolve_checkpoint(path: str | os.PathLike[str]) -> Path:
    """``path`` itself if it is a checkpoint, else the latest complete checkpoint in it.

    A checkpoint whose replacement was killed between its two renames is put back first.
    """
    path = Path(path)
    recover(path)
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


def _read_states(ckpt: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Every state file of ``ckpt`` (verified by ``read_manifest``), as one trainer state."""
    state = _load_dict(ckpt / "trainer.pt")
    state["policy"] = _load_dict(ckpt / "policy.pt")
    if "buffer.pt" in manifest["files"]:
        state["buffer"] = _load_dict(ckpt / "buffer.pt")
    return state


def load_checkpoint(trainer: BaseTrainer[Any], path: str | os.PathLike[str]) -> Path:
    """Restore the checkpoint at ``path`` (see :func:`resolve_checkpoint`) into ``trainer``.

    All or nothing: the manifest, every file's hash and every state are checked against
    the trainer before anything changes; on any error the trainer, its logger and its log
    files are as they were. A trainer with a ``checkpoint_dir`` takes its writer lock
    first (:class:`CheckpointError` if another live trainer holds it). The trainer must be
    built as the checkpointed run was (same classes, hooks, envs, buffer capacity). Returns
    the checkpoint directory loaded.
    """
    ckpt = resolve_checkpoint(path)
    manifest = read_manifest(ckpt)
    config = manifest["config"]
    for key, own in (
        ("trainer", type(trainer).__name__),
        ("policy", type(trainer.policy).__name__),
    ):
        if config.get(key) != own:
            raise ValueError(
                f"checkpoint {os.fspath(ckpt)!r} was written by a {config.get(key)} {key}, "
                f"this one is a {own}: build the trainer as the checkpointed run was"
            )
    if "settings" in manifest:  # older checkpoints did not record them
        from epochtrain.trainer.params import compare_settings

        changed = compare_settings(
            trainer.resume_settings(), manifest["settings"], trainer.setting_defaults()
        )
        if changed:
            warnings.warn(
                f"resuming {os.fspath(ckpt)!r} with changed settings (allowed: they do not "
                f"alter what was computed): {'; '.join(changed)}",
                stacklevel=3,
            )
    state = _read_states(ckpt, manifest)
    # The restore rewrites the run's log files: a trainer writing this run in another
    # process (a sweep started twice, a Tune actor set up for a trial that runs
    # elsewhere) would lose what it logged since its checkpoint. Its lock stops us first.
    hold_checkpoint_dir(trainer)
    try:
        trainer.load_state_dict(state)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"checkpoint {os.fspath(ckpt)!r} does not fit this trainer: {exc}; nothing was "
            "restored (build the trainer as the checkpointed run was)"
        ) from exc
    trainer.last_checkpoint = ckpt
    return ckpt


def load_policy(policy: Policy[Any], path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load only the policy (weights and optimizers) of a checkpoint; returns its manifest.

    All or nothing: on a mismatch the policy is as it was.
    """
    from epochtrain.trainer.state import check_policy_state, load_policy_state

    ckpt = resolve_checkpoint(path)
    manifest = read_manifest(ckpt)
    state = _load_dict(ckpt / "policy.pt")
    check_policy_state(policy, state)
    load_policy_state(policy, state)
    return manifest


def load_hook_states(path: str | os.PathLike[str]) -> list[tuple[str, dict[str, Any]]]:
    """The hooks saved in a checkpoint, in registration order: ``(type name, state)`` pairs.

    Lets a tool that loads only the policy (``epochtrain eval``) rebuild the hooks that
    change what the policy sees, such as an ``ObservationNormalizer``'s statistics.
    """
    ckpt = resolve_checkpoint(path)
    manifest = read_manifest(ckpt, verify_files=False)
    _verify_file(ckpt / "trainer.pt", manifest["files"]["trainer.pt"])  # not the buffer
    state = _load_dict(ckpt / "trainer.pt")
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


def hold_checkpoint_dir(trainer: BaseTrainer[Any]) -> None:
    """Take the writer lock of ``trainer.checkpoint_dir`` (idempotent; released when the
    trainer is garbage-collected, the process exits or the run finishes)."""
    root = trainer.checkpoint_dir
    if root is None:
        return
    lock = trainer._checkpoint_lock
    if lock is None or lock.root != root:
        if lock is not None:
            lock.release()
        lock = CheckpointLock(root)
        trainer._checkpoint_lock = lock
        weakref.finalize(trainer, lock.release)
    lock.acquire()


def save_periodic(trainer: BaseTrainer[Any], root: Path) -> Path | None:
    """Save ``root/epoch_<epoch>`` and rotate: keep the last ``trainer.params.keep_last`` and, with
    ``trainer.params.keep_best``, the one of the best test return.

    Holds ``root``'s writer lock; first puts back a checkpoint whose replacement was
    killed and removes the leftovers of killed saves and rotations. A rotated-out
    checkpoint is renamed out of ``epoch_*`` before it is deleted. Nothing is saved for
    an epoch that ended the run on a non-finite value (``stop_reason == "nonfinite"``),
    or, with ``on_nonfinite`` other than ``"raise"``, from non-finite weights (a warning
    says so); with ``"raise"`` such weights raise :class:`NonFiniteError`.
    """
    hold_checkpoint_dir(trainer)
    try:
        return _save_and_rotate(trainer, root)
    finally:
        if trainer.finished and trainer._checkpoint_lock is not None:
            trainer._checkpoint_lock.release()


def _save_and_rotate(trainer: BaseTrainer[Any], root: Path) -> Path | None:
    if trainer.stop_reason == "nonfinite":
        return None
    try:
        check_finite_weights(trainer, root / f"{_PERIODIC_PREFIX}{trainer.state.epoch:06d}")
    except NonFiniteError as exc:
        if trainer.params.on_nonfinite == "raise":
            raise
        warnings.warn(str(exc), stacklevel=4)
        return None
    for entry in list(root.iterdir()):
        for prefix in (TMP, OLD):
            if entry.name.startswith(prefix):
                recover(root / entry.name[len(prefix) :].rpartition("-")[0])
    clean_leftovers(root, owned=True)
    path = save_checkpoint(trainer, root / f"{_PERIODIC_PREFIX}{trainer.state.epoch:06d}")
    found = find_checkpoints(root)
    keep = set(found if trainer.params.keep_last is None else found[-trainer.params.keep_last :])
    if trainer.params.keep_best:
        returns = [(_test_return(p), p) for p in found]
        scored = [(r, p) for r, p in returns if r is not None]
        if scored:
            best = max(r for r, _ in scored)
            keep.add(next(p for r, p in scored if r == best))
    for old in found:
        if old not in keep:
            remove_dir(old)
    return path
