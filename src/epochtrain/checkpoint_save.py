"""Writing a checkpoint: the atomic save, and finding the complete ones in a directory.

:func:`save_checkpoint` writes one checkpoint directory atomically, refusing to replace
anything a user saved; :func:`find_checkpoints` lists the complete ``epoch_*`` ones.
Periodic saves, their rotation and the writer lock are in
:mod:`epochtrain.checkpoint_periodic`. The format, its guarantee and loading are in
:mod:`epochtrain.checkpoint` (and ``docs/checkpointing.md``), which also re-exports every
public name of this module.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import io
import json
import math
import os
import pickle
import platform
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import torch

from epochtrain.checkpoint_files import (
    OLD,
    TMP,
    clean_leftovers,
    deferred_signals,
    is_complete,
    leftover_name,
    recover,
    remove_dir,
)
from epochtrain.data.io import safe_globals
from epochtrain.data.writes import fsync_dir, write_durably
from epochtrain.errors import CheckpointError, NonFiniteError

if TYPE_CHECKING:
    from epochtrain.trainer.base import BaseTrainer

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "MANIFEST",
    "check_finite_weights",
    "epoch_order",
    "find_checkpoints",
    "jsonable",
    "save_checkpoint",
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
    from epochtrain.trainer.hook_settings import (
        hook_settings,  # the trainer package imports this one
    )

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
        "hooks": hook_settings(trainer.hooks),
        "dataset": trainer.dataset_record(),
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


def _check_loadable(obj: object, what: str) -> None:
    """``CheckpointError`` naming ``what`` unless ``obj`` loads back through the safe loader
    every resume uses: else every checkpoint would save and none would resume."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    try:
        with torch.serialization.safe_globals(safe_globals()):
            torch.load(buf, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        lines = str(exc).strip().splitlines()
        detail = next((line.strip() for line in lines if "GLOBAL" in line), lines[0])
        raise CheckpointError(
            f"{what} holds what a checkpoint cannot load back safely ({detail}), so no "
            "resume could read it: keep to tensors, numpy arrays, numbers, strings, lists "
            "and dicts (e.g. list(a_deque), generator.bit_generator.state, a_datetime.isoformat())"
        ) from exc


def save_checkpoint(trainer: BaseTrainer[Any], path: str | os.PathLike[str]) -> Path:
    """Write ``trainer``'s checkpoint directory at ``path`` atomically; returns ``path``.

    ``path`` must be new, an empty directory, or a checkpoint of this run (same trainer
    and policy classes and, for runs of ``make_trainer``, the same algorithm, env and
    seed), which is replaced: saving twice to ``"manual/after-2"`` keeps the second. A
    file, a directory holding anything else, or another run's checkpoint is refused with a
    ``ValueError`` naming it, before anything is written: nothing a user saved is replaced.
    An existing checkpoint at ``path`` is replaced only once the new one is complete: at
    every moment ``path`` (or, after a kill between the two renames, its ``.old-*`` or
    ``.tmp-*`` copy, which the next save or load puts back) holds a complete checkpoint.
    Raises :class:`NonFiniteError` rather than save non-finite weights, and
    :class:`CheckpointError` naming the file when a write fails (the disk is full).
    Prefer ``trainer.save_checkpoint``.
    """
    path = _checked_target(trainer, path)
    check_finite_weights(trainer, path)
    recover(path)
    _refuse_to_replace(trainer, path)
    _make_parent(path)
    clean_leftovers(path.parent, name=path.name)
    state = trainer.state_dict()
    for entry in state["hooks"]:
        _check_loadable(entry["state"], f"hook {entry['type']}'s state_dict()")
    payload = {"policy.pt": state.pop("policy"), "buffer.pt": state.pop("buffer", None)}
    payload["trainer.pt"] = state
    tmp = path.parent / leftover_name(TMP, path.name)
    remove_dir(tmp)
    try:  # the mkdir too: an interrupt lands as a system call returns, so right after it
        tmp.mkdir()
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
        fsync_dir(tmp)
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


def _checked_target(trainer: BaseTrainer[Any], path: str | os.PathLike[str]) -> Path:
    """``path`` as a ``Path``; ``ValueError`` for one that names no directory to create."""
    given = os.fspath(path)
    target = Path(given)
    if given == "" or target.name in ("", ".", ".."):
        raise ValueError(
            f"save_checkpoint: path {given!r} names no directory to create (a checkpoint is "
            "a directory of its own): give a new path, e.g. 'checkpoints/manual'"
        )
    return target


def _run_of(manifest: Mapping[str, Any]) -> tuple[Any, ...]:
    """What tells one run's checkpoints from another's: the trainer and policy classes and,
    when the run was built by ``make_trainer``, its algorithm, env and seed."""
    config = manifest.get("config")
    config = config if isinstance(config, dict) else {}
    spec = manifest.get("spec")
    ident = (config.get("trainer"), config.get("policy"))
    if isinstance(spec, dict):
        params = spec.get("trainer")
        seed = params.get("seed") if isinstance(params, dict) else None
        return (*ident, spec.get("algo"), spec.get("env_id"), seed)
    return ident


def _describe_run(manifest: Mapping[str, Any]) -> str:
    run = _run_of(manifest)
    if len(run) == 5:
        return f"{run[2]} on {run[3]}, seed {run[4]}"
    return f"a {run[0]} of a {run[1]} policy"


def _refuse_to_replace(trainer: BaseTrainer[Any], path: Path) -> None:
    """``ValueError`` unless saving at ``path`` loses nothing: ``path`` is missing, an empty
    directory, or a checkpoint of this run (the docs' "saved to the same path again")."""
    if not os.path.lexists(path):
        return
    where = f"save_checkpoint: {os.fspath(path)!r}"
    fix = "pass a new path (or an earlier checkpoint of this run, which is then replaced)"
    if path.is_symlink() or not path.is_dir():
        raise ValueError(
            f"{where} is a {'symbolic link' if path.is_symlink() else 'file'}, not a "
            f"checkpoint directory, and saving would replace it: {fix}, or delete it first"
        )
    entries = sorted(p.name for p in path.iterdir())
    if not entries:
        return
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise ValueError(
            f"{where} is a directory that holds no epochtrain checkpoint (it holds {shown}), "
            f"and saving would delete what it holds: {fix}, or an empty directory"
        )
    own = _manifest_run(trainer)
    saved, ours = _run_of(manifest), _run_of(own)
    common = min(len(saved), len(ours))  # a hand-built trainer has no spec to compare
    if saved[:common] != ours[:common]:
        raise ValueError(
            f"{where} holds the checkpoint of another run ({_describe_run(manifest)}, "
            f"epoch {manifest.get('epoch')}; this one is {_describe_run(own)}), and saving "
            f"would replace it: {fix}, or delete it first if it is no longer needed"
        )


def _manifest_run(trainer: BaseTrainer[Any]) -> dict[str, Any]:
    """The part of ``trainer``'s manifest that :func:`_run_of` reads."""
    config = {"trainer": type(trainer).__name__, "policy": type(trainer.policy).__name__}
    return {"config": config, "spec": trainer.spec}


def _make_parent(path: Path) -> None:
    """Create ``path``'s parent; ``ValueError`` naming the part of it that is a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        blocking = next((p for p in (path.parent, *path.parent.parents) if p.is_file()), None)
        what = os.fspath(blocking) if blocking is not None else os.fspath(path.parent)
        raise ValueError(
            f"save_checkpoint: cannot create {os.fspath(path.parent)!r}: {what!r} is a file; "
            "pass a path under a directory"
        ) from exc


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
        fsync_dir(path.parent)
        if moved:
            remove_dir(old)


def find_checkpoints(root: str | os.PathLike[str]) -> list[Path]:
    """The complete periodic checkpoints in ``root``, oldest first.

    Complete: an ``epoch_*`` directory whose manifest lists files that all exist with
    their sizes (a torn directory left by a killed rotation is not one).
    """
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith(_PERIODIC_PREFIX) and is_complete(p)]
    return sorted(found, key=epoch_order)


def epoch_order(path: Path) -> tuple[int, str]:
    """Sort key of periodic checkpoints, oldest first: by epoch number, not by name
    (``epoch_1000000`` comes after ``epoch_999999``, past the 6 digits of the name)."""
    number = path.name[len(_PERIODIC_PREFIX) :]
    return (int(number) if number.isdigit() else -1, path.name)
