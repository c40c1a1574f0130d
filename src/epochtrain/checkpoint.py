"""Checkpoints: the format, and loading one back into a trainer for an exact resume.

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
(:mod:`epochtrain.checkpoint_save` writes it, :mod:`epochtrain.checkpoint_periodic` saves
and rotates ``epoch_*``; :mod:`epochtrain.checkpoint_files` names and recovers the
leftovers of a killed save). Loading (this module) checks the manifest's
schema and every file's size and sha256, reads every file with ``weights_only=True``, and
checks every state against the trainer before changing anything, so a partial, corrupt
or unsafe checkpoint raises :class:`CheckpointError` naming the file and the problem, and
leaves the trainer as it was. Nothing ever prompts.

The saving functions are re-exported here: import either half from this module.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochtrain.checkpoint_files import is_complete, recover
from epochtrain.checkpoint_periodic import hold_checkpoint_dir, save_periodic
from epochtrain.checkpoint_save import (
    _FORMAT,
    _PAYLOAD,
    _PERIODIC_PREFIX,
    CHECKPOINT_FORMAT_VERSION,
    MANIFEST,
    _sha256,
    _versions,
    check_finite_weights,
    epoch_order,
    find_checkpoints,
    jsonable,
    save_checkpoint,
)
from epochtrain.data.io import safe_torch_load
from epochtrain.errors import CheckpointError
from epochtrain.logger import LoggerResumeError

if TYPE_CHECKING:
    from epochtrain.algorithms.base import Policy
    from epochtrain.trainer.base import BaseTrainer

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "MANIFEST",
    "RUN_CHECKPOINTS",
    "CheckpointError",
    "CheckpointVersionWarning",
    "DatasetMismatchError",
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

_SHA256_HEX = frozenset("0123456789abcdef")


class DatasetMismatchError(ValueError):
    """An offline checkpoint was written on other data than the trainer's dataset (their
    fingerprints differ); raised by :func:`load_checkpoint` before anything changes."""


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
    if version < 1:  # no epochtrain wrote it
        raise CheckpointError(
            f"{where}: 'format_version' is {version}, not a version any epochtrain wrote "
            f"(1 to {CHECKPOINT_FORMAT_VERSION}); {fix}"
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
    _check_records(where, manifest, fix)
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


def _check_records(where: str, manifest: dict[str, Any], fix: str) -> None:
    """The optional ``hooks`` and ``dataset`` entries (older checkpoints lack them)."""
    hooks = manifest.get("hooks")
    if hooks is not None and not (
        isinstance(hooks, dict) and all(isinstance(v, dict) for v in hooks.values())
    ):
        raise CheckpointError(
            f"{where}: 'hooks' must map each hook to an object of its settings, got "
            f"{hooks!r}; {fix}"
        )
    dataset = manifest.get("dataset")
    digest = dataset.get("sha256") if isinstance(dataset, dict) else None
    valid_digest = isinstance(digest, str) and len(digest) == 64 and not set(digest) - _SHA256_HEX
    if dataset is not None and not valid_digest:
        raise CheckpointError(
            f"{where}: 'dataset' must be null or an object with 'sha256' (64 hex digits), "
            f"got {dataset!r}; {fix}"
        )


class CheckpointVersionWarning(UserWarning):
    """A checkpoint was written with another epochtrain, torch or gymnasium version: it
    loads, but a resumed run may not match an uninterrupted one bit for bit."""


def read_manifest(path: str | os.PathLike[str], *, verify_files: bool = True) -> dict[str, Any]:
    """The manifest of the checkpoint directory ``path``, checked.

    Raises :class:`CheckpointError` when the manifest is missing (a partial checkpoint),
    unreadable, malformed (a field missing or of the wrong type) or of a format version
    this epochtrain does not read, or (``verify_files``) when a file it lists is missing or
    differs in size or sha256. Warns (:class:`CheckpointVersionWarning`) when the
    checkpoint comes from another epochtrain, torch or gymnasium version.
    """
    manifest = _read_manifest(Path(path), verify_files=verify_files)
    _warn_versions(Path(path), manifest["versions"])
    return manifest


def _read_manifest(ckpt: Path, *, verify_files: bool) -> dict[str, Any]:
    """:func:`read_manifest` without the version warning."""
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
            CheckpointVersionWarning,
            stacklevel=3,
        )


def _verify_size(file: Path, entry: dict[str, Any]) -> None:
    if not file.is_file():
        raise CheckpointError(f"{os.fspath(file)!r} is missing from the checkpoint")
    size = file.stat().st_size
    if size != entry.get("bytes"):
        raise CheckpointError(
            f"{os.fspath(file)!r} has {size} bytes, the manifest says {entry.get('bytes')}: "
            "the file is truncated or was changed"
        )


def _verify_file(file: Path, entry: dict[str, Any]) -> None:
    _verify_size(file, entry)
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


RUN_CHECKPOINTS = "checkpoints"
"""The checkpoint_dir inside a run directory (``epochtrain train --logdir``, a sweep's run)."""


def resolve_checkpoint(path: str | os.PathLike[str]) -> Path:
    """``path`` itself if it is a checkpoint, else the latest complete checkpoint in it, or
    in its ``checkpoints/`` (a run directory of ``epochtrain train --logdir`` or a sweep).

    A checkpoint whose replacement was killed between its two renames is put back first.
    """
    path = Path(path)
    recover(path)
    own_files = any((path / name).exists() for name in (MANIFEST, *_PAYLOAD))
    if own_files or path.name.startswith(_PERIODIC_PREFIX):
        return path  # a checkpoint, maybe partial: read_manifest says what is wrong
    latest = _latest_checkpoint(path)
    if latest is None and (path / RUN_CHECKPOINTS).is_dir():
        recover(path / RUN_CHECKPOINTS)
        latest = _latest_checkpoint(path / RUN_CHECKPOINTS)
    if latest is None:
        raise CheckpointError(
            f"{os.fspath(path)!r} holds no complete checkpoint (no epoch_*/{MANIFEST}, nor "
            f"{RUN_CHECKPOINTS}/epoch_*/{MANIFEST}); pass a checkpoint directory, a "
            "checkpoint_dir a run has written to, or its run directory"
        )
    return latest


def _latest_checkpoint(root: Path) -> Path | None:
    """The newest ``epoch_*`` checkpoint in ``root`` (``None`` if there is none), checked.

    A save publishes a checkpoint by renaming it into place once complete (a killed save
    leaves a ``.tmp-*`` directory, never read), so an ``epoch_*`` directory that fails the
    check was damaged after it was written: :class:`CheckpointError` naming the file and
    the checkpoint before it, rather than resuming from that one without a word.
    """
    if not root.is_dir():
        return None
    published = sorted(
        (p for p in root.iterdir() if p.name.startswith(_PERIODIC_PREFIX) and p.is_dir()),
        key=epoch_order,
    )
    if not published:
        return None
    newest = published[-1]
    try:
        manifest = _read_manifest(newest, verify_files=False)
        for name, entry in manifest["files"].items():
            _verify_size(newest / name, entry)
    except CheckpointError as exc:
        earlier = [p for p in published[:-1] if is_complete(p)]
        if earlier:
            fix = f"to resume from (or test) the one before it, pass {os.fspath(earlier[-1])!r}"
        else:
            fix = "it is the only checkpoint there: restore it from a backup, or start again"
        raise CheckpointError(
            f"the latest checkpoint in {os.fspath(root)!r}, {newest.name}, is damaged: {exc}. "
            f"It is left as it is; {fix}"
        ) from exc
    return newest


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
    built as the checkpointed run was (same classes, hooks, envs, buffer capacity): a
    setting that changes what is computed (the trainer's, a hook's ``resume_settings``)
    raises ``SettingsMismatchError`` naming it, a safe one (``max_epoch``, ...) warns;
    offline, a dataset of other content (by fingerprint; the path may differ) raises
    :class:`DatasetMismatchError`. Returns the checkpoint directory loaded.
    """
    ckpt = resolve_checkpoint(path)
    manifest = read_manifest(ckpt)
    changed = _compare_with_trainer(trainer, ckpt, manifest)
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
    except LoggerResumeError as exc:  # the trainer fits; a logger's destination does not
        raise CheckpointError(
            f"checkpoint {os.fspath(ckpt)!r}: {exc}; nothing was restored"
        ) from exc
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"checkpoint {os.fspath(ckpt)!r} does not fit this trainer: {exc}; nothing was "
            "restored (build the trainer as the checkpointed run was)"
        ) from exc
    trainer.last_checkpoint = ckpt
    return ckpt


def _compare_with_trainer(
    trainer: BaseTrainer[Any], ckpt: Path, manifest: dict[str, Any]
) -> list[str]:
    """Refuse a checkpoint of another trainer or policy class, of other settings (the
    trainer's, its hooks') or of other data (offline); return the safe settings that differ.
    What an older checkpoint did not record is not compared."""
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
    changed: list[str] = []
    if "settings" in manifest:
        from epochtrain.trainer.params import compare_settings, match_saved_paths

        settings = trainer.resume_settings()
        saved = match_saved_paths(settings, manifest["settings"], ckpt.parent)
        changed = compare_settings(settings, saved, trainer.setting_defaults())
    if manifest.get("hooks") is not None:
        from epochtrain.trainer.hook_settings import compare_hook_settings

        compare_hook_settings(trainer.hooks, manifest["hooks"])
    _compare_dataset(trainer, ckpt, manifest)
    return changed


def _compare_dataset(trainer: BaseTrainer[Any], ckpt: Path, manifest: dict[str, Any]) -> None:
    """Refuse a resume of an offline run onto other data than its checkpoint's (compared by
    fingerprint: the same data under another path is accepted)."""
    own = trainer.dataset_record()
    if own is None:  # no dataset
        return
    saved = manifest.get("dataset")
    if saved is None:
        warnings.warn(
            f"checkpoint {os.fspath(ckpt)!r} records no dataset fingerprint (an older "
            "epochtrain wrote it): the dataset is not checked, resume with the run's own",
            stacklevel=5,
        )
        return
    if own["sha256"] != saved["sha256"]:
        raise DatasetMismatchError(
            f"the checkpoint {os.fspath(ckpt)!r} was written by a run on other data (dataset: "
            f"saved {_describe(saved)}, now {_describe(own)}): resume with the original "
            "dataset (it may have moved: its data is compared, not its path), or start a new "
            "run; nothing was restored"
        )


def _describe(dataset: dict[str, Any]) -> str:
    path = dataset.get("path")
    where = "a buffer passed in" if path is None else repr(path)
    return f"{where} ({dataset.get('transitions')} transitions, sha256 {dataset['sha256'][:16]})"


def load_policy(policy: Policy[Any], path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load only the policy (weights and optimizers) of a checkpoint; returns its manifest.

    All or nothing: on a mismatch the policy is as it was.
    """
    from epochtrain.trainer.state import check_policy_state, load_policy_state

    ckpt = resolve_checkpoint(path)
    manifest = read_manifest(ckpt)
    state = _load_dict(ckpt / "policy.pt")
    try:
        check_policy_state(policy, state)
    except ValueError as exc:
        raise CheckpointError(
            f"{os.fspath(ckpt / 'policy.pt')!r} does not fit this {type(policy).__name__} "
            f"(the policy its manifest names): {exc}; the file was replaced or damaged"
        ) from exc
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
