"""Setting up an experiment directory: every run's directory and ``spec.toml``, and the
``experiment.json`` index (:mod:`epochtrain.experiment.runs` describes the layout).

Every check comes before anything is written, and the writes happen under a lock on the
directory, so sweeps set up at once all get their runs listed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epochtrain.experiment.runs import (
    CHECKPOINTS,
    EXPERIMENT_FILE,
    FORMAT,
    FORMAT_VERSION,
    SPEC_FILE,
    check_same_run,
    is_finished,
    read_index,
    resolve_spec,
    sample_settings,
    write_json,
)
from epochtrain.spec import RunSpec

__all__ = ["INDEX_LOCK", "check_writable", "prepare_runs"]

INDEX_LOCK = ".experiment.lock"
"""Held (``flock``) by a sweep while it checks and updates the run directories and index."""


def prepare_runs(specs: Sequence[RunSpec], out_dir: Path) -> list[Path]:
    """Create or check each run's directory and ``out_dir/experiment.json``; the run dirs.

    Every check comes before anything is written (:class:`ValueError` naming the problem):
    an ``out_dir`` that is not a writable directory, a run directory holding other
    settings, and runs of the same algorithm and env whose settings differ in more than
    the seed (``epochtrain compare`` pools them as one sample). ``experiment.json`` keeps
    the runs it listed, adds the new ones and drops, with a warning, a listed run whose
    directory was deleted (a sweep that includes it starts it again). The update happens
    under a lock on ``out_dir``, so sweeps set up at once all get their runs listed; an
    unchanged file is not written again, nor the ``spec.toml`` of a finished run copied or
    moved from elsewhere (whose log and checkpoint paths name its old place): a finished
    sweep re-runs on a read-only copy, and an unfinished one resumes in its copy.
    """
    ids = [spec.run_id for spec in specs]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(
            f"specs must have distinct run ids (<algo>-<env_id>-s<seed>), got {duplicates} "
            "more than once: give each run its own seed, or use one out_dir per setting"
        )
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"out_dir {os.fspath(out_dir)!r} is a file: give a directory")
    plan = _plan(specs, out_dir)
    if plan.writes or plan.index_changed:
        created: list[Path] = []  # what this set-up added, removed again if it fails
        try:
            with _index_lock(out_dir, created):
                plan = _plan(specs, out_dir)  # again: another sweep may have written meanwhile
                _write(plan, out_dir, created)
        except BaseException:
            _remove(created)  # a refused set-up leaves out_dir as it was
            raise
    for run_id in plan.dropped:
        warnings.warn(
            f"{os.fspath(out_dir / EXPERIMENT_FILE)!r} no longer lists run {run_id!r}: its "
            "directory was deleted (a sweep with its seed starts it again)",
            stacklevel=2,
        )
    return [out_dir / run_id for run_id in ids]


@dataclass(frozen=True)
class _Plan:
    """What :func:`prepare_runs` writes: each new or changed ``spec.toml`` and the index."""

    writes: list[tuple[Path, RunSpec]]
    runs: list[str]
    index_changed: bool
    dropped: list[str]


def _plan(specs: Sequence[RunSpec], out_dir: Path) -> _Plan:
    """Check ``specs`` against ``out_dir`` as it is now (``ValueError``), writing nothing."""
    index = out_dir / EXPERIMENT_FILE
    listed = read_index(index) if index.is_file() else []
    wanted = {s.run_id: resolve_spec(s, (out_dir / s.run_id).resolve()) for s in specs}
    stored: dict[str, RunSpec] = {}
    for run_id in dict.fromkeys([*listed, *wanted]):
        if (out_dir / run_id / SPEC_FILE).is_file():
            stored[run_id] = _stored_spec(out_dir / run_id)
    _check_one_setting(wanted, stored, out_dir)
    for run_id, spec in wanted.items():
        if run_id in stored:
            check_same_run(stored[run_id], spec, out_dir / run_id)
    dropped = [r for r in listed if r not in wanted and not (out_dir / r).exists()]
    runs = [r for r in dict.fromkeys([*listed, *wanted]) if r not in dropped]
    # A run directory copied or moved here holds a spec.toml naming its old place (the
    # other settings were checked above): rewritten for a run still to run, which runs here;
    # a finished run's is left alone, so re-running a finished sweep on a read-only copy
    # writes nothing (open_trainer places a run wherever its directory is now).
    writes = [
        (out_dir / run_id, spec)
        for run_id, spec in wanted.items()
        if run_id not in stored
        or (stored[run_id].to_toml() != spec.to_toml() and not is_finished(out_dir / run_id))
    ]
    return _Plan(writes, runs, runs != listed or not index.is_file(), dropped)


def _stored_spec(run_dir: Path) -> RunSpec:
    """The ``spec.toml`` of ``run_dir``; a ``ValueError`` naming the file and the way out
    if this epochtrain cannot read it (written by another version, or damaged)."""
    try:
        return RunSpec.from_file(run_dir / SPEC_FILE)
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"{exc}. This run directory was written by another epochtrain version, or is "
            f"damaged: run it with the epochtrain that wrote it, or delete "
            f"{os.fspath(run_dir)!r} to run that seed again"
        ) from exc


def _check_one_setting(
    wanted: Mapping[str, RunSpec], stored: Mapping[str, RunSpec], out_dir: Path
) -> None:
    """``ValueError`` if runs of one algorithm and env, wanted or already in ``out_dir``,
    differ in more than their seed: a comparison would pool them as one sample."""
    samples: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    for run_id, spec in wanted.items():
        key, settings = (spec.algo, spec.env_id), sample_settings(spec)
        first_id, first = samples.setdefault(key, (run_id, settings))
        if first != settings:
            raise ValueError(
                f"specs {first_id} and {run_id} run {spec.algo} on {spec.env_id} with "
                f"different settings ({_differences([first], settings)}): the runs of an "
                "algorithm on an env may differ only in their seed; use one out_dir per setting"
            )
    for (algo, env_id), (_, settings) in samples.items():
        others = {
            run_id: sample_settings(spec)
            for run_id, spec in stored.items()
            if (spec.algo, spec.env_id) == (algo, env_id) and sample_settings(spec) != settings
        }
        if others:
            raise ValueError(
                f"out_dir {os.fspath(out_dir)!r} holds runs of {algo} on {env_id} with other "
                f"settings ({_differences(list(others.values()), settings)}) in "
                f"{', '.join(others)}: `epochtrain compare` pools the seeds of an algorithm "
                "on an env as one sample, so they may differ only in their seed. Write this "
                "experiment to another out_dir (epochtrain sweep --out), or delete those run "
                "directories to start them again with these settings"
            )
    kept: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    for run_id, spec in stored.items():  # a run directory copied in by hand
        settings = sample_settings(spec)
        first_id, first = kept.setdefault((spec.algo, spec.env_id), (run_id, settings))
        if first != settings:
            raise ValueError(
                f"out_dir {os.fspath(out_dir)!r} holds runs {first_id} and {run_id} of "
                f"{spec.algo} on {spec.env_id} with different settings "
                f"({_differences([first], settings)}): `epochtrain compare` pools them as one "
                "sample; delete the run directories that do not belong, or move them to an "
                "experiment of their own"
            )


def _differences(old: Sequence[Mapping[str, Any]], new: Mapping[str, Any]) -> str:
    keys = sorted({k for o in old for k in o.keys() | new.keys() if o.get(k) != new.get(k)})
    return "; ".join(
        f"{k}: {' or '.join(dict.fromkeys(repr(o.get(k)) for o in old))} there, {new.get(k)!r} now"
        for k in keys
    )


def _write(plan: _Plan, out_dir: Path, created: list[Path]) -> None:
    """Write ``plan``'s ``spec.toml`` files and index, each new path appended to
    ``created``; an ``OSError`` becomes the ``ValueError`` saying what to do."""
    try:
        for run_dir, spec in plan.writes:
            if not run_dir.exists():
                run_dir.mkdir()
                created.append(run_dir)
            if not (run_dir / SPEC_FILE).exists():  # else replaced atomically, or kept
                created.append(run_dir / SPEC_FILE)
            spec.to_file(run_dir / SPEC_FILE)
        if plan.index_changed:
            index = {"format": FORMAT, "version": FORMAT_VERSION, "runs": plan.runs}
            write_json(out_dir / EXPERIMENT_FILE, index)
    except OSError as exc:
        raise ValueError(_unusable(out_dir, exc)) from exc


def _remove(created: list[Path]) -> None:
    """Remove ``created`` (files and the directories made for them), newest first; best
    effort, as on a full disk or a vanished mount nothing more can be done."""
    for path in reversed(created):
        with contextlib.suppress(OSError):
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink(missing_ok=True)


_DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


def _unusable(out_dir: Path, exc: OSError) -> str:
    detail = exc.strerror or str(exc)
    if exc.filename is not None and os.fspath(exc.filename) != os.fspath(out_dir):
        detail = f"{os.fspath(exc.filename)!r}: {detail}"
    fix = (
        "free space there (or raise the quota), or give a directory on another disk"
        if exc.errno in _DISK_FULL
        else "give a directory this user can write"
    )
    return f"out_dir {os.fspath(out_dir)!r} cannot hold an experiment ({detail}): {fix}"


@contextlib.contextmanager
def _index_lock(out_dir: Path, created: list[Path]) -> Iterator[None]:
    """Hold ``out_dir``'s index lock (created with ``out_dir``) for the block; the
    directories and the lock file it creates are appended to ``created``."""
    missing = [d for d in (out_dir, *out_dir.parents) if not d.exists()]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        created.extend(reversed(missing))
        if not (out_dir / INDEX_LOCK).exists():
            created.append(out_dir / INDEX_LOCK)
        fd = os.open(out_dir / INDEX_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ValueError(_unusable(out_dir, exc)) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def check_writable(out_dir: Path, run_dirs: Sequence[Path]) -> None:
    """``ValueError`` naming ``out_dir`` if this user cannot write one of ``run_dirs``
    (runs still to run): said before any work, not as a failure of each run."""
    for run_dir in run_dirs:
        for path in (run_dir, run_dir / CHECKPOINTS):
            if path.exists() and not os.access(path, os.W_OK | os.X_OK):
                raise ValueError(
                    f"out_dir {os.fspath(out_dir)!r} cannot hold an experiment: "
                    f"{os.fspath(path)!r} is not writable, and its run has not finished: "
                    "give a directory this user can write"
                )
