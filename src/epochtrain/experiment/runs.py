"""One run of an experiment on disk: its directory, resolved spec, result file and curve.

``out_dir/<run_id>/`` holds ``spec.toml`` (the resolved :class:`~epochtrain.spec.RunSpec`),
``log.jsonl`` (every logged record), ``checkpoints/epoch_*`` and, once the run has ended,
``result.json``. ``out_dir/experiment.json`` lists the run ids. The functions here prepare
the run directories (every check before anything is written; the index updated under a
lock), open a run (resuming from its latest checkpoint), and write its result atomically;
the backends in :mod:`epochtrain.experiment.runner` decide which process advances which
trainer.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epochtrain.checkpoint import RUN_CHECKPOINTS
from epochtrain.checkpoint_files import LOCK_FILE
from epochtrain.data.io import pid_alive, replace_file
from epochtrain.errors import CheckpointError
from epochtrain.spec import RunSpec

__all__ = [
    "EXPERIMENT_FILE",
    "RESULT_FILE",
    "SPEC_FILE",
    "check_format",
    "check_same_run",
    "check_writable",
    "close_envs",
    "failed_result",
    "finished_result",
    "in_use_error",
    "is_finished",
    "note_in_use",
    "open_trainer",
    "prepare_runs",
    "read_index",
    "read_json",
    "read_test_curve",
    "resolve_spec",
    "run_in_use",
    "spec_of",
    "write_json",
]

EXPERIMENT_FILE = "experiment.json"
RESULT_FILE = "result.json"
SPEC_FILE = "spec.toml"
LOG_FILE = "log.jsonl"
INDEX_LOCK = ".experiment.lock"
"""Held (``flock``) by a sweep while it checks and updates the run directories and index."""
CHECKPOINTS = RUN_CHECKPOINTS
FORMAT = "epochtrain-experiment"
FORMAT_VERSION = 1

# Settings that say where a run lives or how it reports, not what it computes.
_LOCATION = {"logdir", "checkpoint_dir", "resume_from", "show_progress", "verbose"}


def resolve_spec(spec: RunSpec, run_dir: Path) -> RunSpec:
    """``spec`` as run inside ``run_dir``: JSONL log and checkpoints there, no bars of its own."""
    loggers = tuple(dict.fromkeys((*spec.logging.loggers, "jsonl")))
    return spec.with_overrides(
        {
            "logging.logdir": str(run_dir),
            "logging.loggers": loggers,
            "checkpoint_dir": str(run_dir / CHECKPOINTS),
            "resume_from": None,
            "show_progress": False,
            "verbose": False,
        }
    )


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        elif key not in _LOCATION:
            out[prefix + key] = list(value) if isinstance(value, tuple) else value
    return out


def check_same_run(stored: RunSpec, wanted: RunSpec, run_dir: Path) -> None:
    """``ValueError`` unless ``stored`` (from ``run_dir``) computes what ``wanted`` does."""
    old, new = _flat(stored.to_dict()), _flat(wanted.to_dict())
    differing = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if differing:
        detail = ", ".join(f"{k}: {old.get(k)!r} there, {new.get(k)!r} now" for k in differing)
        raise ValueError(
            f"run directory {os.fspath(run_dir)!r} holds a run with other settings ({detail}): "
            "write this experiment to another out_dir, or delete that run directory to start "
            "it again"
        )


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON atomically (temp file, fsync, rename)."""
    text = json.dumps(data, indent=2, allow_nan=False) + "\n"
    replace_file(path, text.encode("utf-8"))


def read_json(path: Path) -> Any:
    """The JSON in ``path``; ``ValueError`` naming the file if it is not valid JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{os.fspath(path)!r} is not valid JSON: {exc}") from exc


def check_format(data: Any, path: Path, what: str) -> dict[str, Any]:
    """``data`` (read from ``path``) as a dict of the experiment format this epochtrain
    reads; ``ValueError`` naming the file otherwise (a newer version: upgrade)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{os.fspath(path)!r} is not an epochtrain {what}")
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{os.fspath(path)!r} has no valid format version (got {version!r})")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{os.fspath(path)!r} has format version {version}, this epochtrain reads "
            f"{FORMAT_VERSION}: upgrade epochtrain to read it"
        )
    return data


def read_index(path: Path) -> list[str]:
    """The run ids listed by the experiment index at ``path``, checked (``ValueError``
    naming the file)."""
    runs = check_format(read_json(path), path, "experiment index").get("runs", [])
    if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
        raise ValueError(f"{os.fspath(path)!r}: 'runs' must be a list of run ids")
    return runs


def read_test_curve(run_dir: Path) -> tuple[list[float], list[float]]:
    """``(steps, mean test returns)`` of the ``test`` records in ``run_dir/log.jsonl``.

    A step logged twice keeps its last record; a torn last line is ignored.
    """
    path = run_dir / LOG_FILE
    points: dict[float, float] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(record, dict) or record.get("scope") != "test":
                continue
            value, step = record.get("test/returns_stat/mean"), record.get("step")
            if isinstance(value, int | float) and isinstance(step, int | float):
                points[float(step)] = float(value)
    steps = sorted(points)
    return steps, [points[s] for s in steps]


def open_trainer(run_dir: Path) -> Any:
    """The trainer of ``run_dir/spec.toml``, resumed from its latest checkpoint if any; a
    run without one starts over, and the log records an earlier start wrote are dropped."""
    from epochtrain.checkpoint import find_checkpoints
    from epochtrain.factory import make_trainer

    trainer = make_trainer(RunSpec.from_file(run_dir / SPEC_FILE))
    if find_checkpoints(run_dir / CHECKPOINTS):
        # loaded here rather than through resume_from, so the spec stays the one on disk
        trainer.load_checkpoint(run_dir / CHECKPOINTS)
    else:  # started over (killed before its first checkpoint): its old records are dropped
        trainer.logger.load_state_dict(trainer.logger.state_dict())
    return trainer


def close_envs(trainer: Any) -> None:
    """Close ``trainer`` (:meth:`BaseTrainer.close`: its envs, then its logger): an
    ``env_backend='async'`` run's env processes end with its run, not when a reused worker
    process exits. Its result is already written: an env or a logger that fails to close
    changes nothing but a warning."""
    try:
        trainer.close()
    except Exception as exc:  # e.g. a logger's upload at close; the envs closed first
        warnings.warn(f"closing the trainer of a finished run failed: {exc!r}", stacklevel=2)


def _base(spec: RunSpec) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "run_id": spec.run_id,
        "algo": spec.algo,
        "env_id": spec.env_id,
        "seed": spec.seed,
        "step_unit": "gradient_step" if spec.entry.kind == "offline" else "env_step",
    }


def finished_result(run_dir: Path, trainer: Any, wall_time: float) -> dict[str, Any]:
    """Write and return ``result.json`` of a run that ended (``trainer.stop_reason``)."""
    spec = RunSpec.from_file(run_dir / SPEC_FILE)
    steps, returns = read_test_curve(run_dir)
    result = {
        **_base(spec),
        "status": "finished",
        "stop_reason": trainer.stop_reason,
        "epochs": int(trainer.state.epoch),
        "steps": steps,
        "test_returns": returns,
        "error": None,
        "wall_time": wall_time,
    }
    write_json(run_dir / RESULT_FILE, result)
    return result


def failed_result(run_dir: Path, spec: RunSpec, exc: BaseException) -> dict[str, Any]:
    """Write and return ``result.json`` of a run that raised ``exc``."""
    steps, returns = read_test_curve(run_dir)
    result = {
        **_base(spec),
        "status": "failed",
        "stop_reason": None,
        "epochs": len(steps),
        "steps": steps,
        "test_returns": returns,
        "error": f"{type(exc).__name__}: {exc}",
        "traceback": "".join(traceback.format_exception(exc)),
        "wall_time": None,
    }
    write_json(run_dir / RESULT_FILE, result)
    return result


def prepare_runs(specs: Sequence[RunSpec], out_dir: Path) -> list[Path]:
    """Create or check each run's directory and ``out_dir/experiment.json``; the run dirs.

    Every check comes before anything is written (:class:`ValueError` naming the problem):
    an ``out_dir`` that is not a writable directory, a run directory holding other
    settings, and runs of the same algorithm and env whose settings differ in more than
    the seed (``epochtrain compare`` pools them as one sample). ``experiment.json`` keeps
    the runs it listed, adds the new ones and drops, with a warning, a listed run whose
    directory was deleted (a sweep that includes it starts it again). The update happens
    under a lock on ``out_dir``, so sweeps set up at once all get their runs listed; an
    unchanged file is not written again (a finished sweep re-runs on a read-only copy).
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
        with _index_lock(out_dir):
            plan = _plan(specs, out_dir)  # again: another sweep may have written meanwhile
            try:
                for run_dir, spec in plan.writes:
                    run_dir.mkdir(exist_ok=True)
                    spec.to_file(run_dir / SPEC_FILE)
                if plan.index_changed:
                    index = {"format": FORMAT, "version": FORMAT_VERSION, "runs": plan.runs}
                    write_json(out_dir / EXPERIMENT_FILE, index)
            except OSError as exc:
                raise ValueError(_unusable(out_dir, exc)) from exc
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
            stored[run_id] = RunSpec.from_file(out_dir / run_id / SPEC_FILE)
    _check_one_setting(wanted, stored, out_dir)
    for run_id, spec in wanted.items():
        if run_id in stored:
            check_same_run(stored[run_id], spec, out_dir / run_id)
    dropped = [r for r in listed if r not in wanted and not (out_dir / r).exists()]
    runs = [r for r in dict.fromkeys([*listed, *wanted]) if r not in dropped]
    writes = [
        (out_dir / run_id, spec)
        for run_id, spec in wanted.items()
        if run_id not in stored or stored[run_id].to_toml() != spec.to_toml()
    ]
    return _Plan(writes, runs, runs != listed or not index.is_file(), dropped)


def _settings(spec: RunSpec) -> dict[str, Any]:
    """What ``spec`` computes, but for its seed: equal for the runs of one sample."""
    settings = _flat(spec.to_dict())
    settings.pop("trainer.seed")
    return settings


def _check_one_setting(
    wanted: Mapping[str, RunSpec], stored: Mapping[str, RunSpec], out_dir: Path
) -> None:
    """``ValueError`` if runs of one algorithm and env, wanted or already in ``out_dir``,
    differ in more than their seed: a comparison would pool them as one sample."""
    samples: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    for run_id, spec in wanted.items():
        key, settings = (spec.algo, spec.env_id), _settings(spec)
        first_id, first = samples.setdefault(key, (run_id, settings))
        if first != settings:
            raise ValueError(
                f"specs {first_id} and {run_id} run {spec.algo} on {spec.env_id} with "
                f"different settings ({_differences([first], settings)}): the runs of an "
                "algorithm on an env may differ only in their seed; use one out_dir per setting"
            )
    for (algo, env_id), (_, settings) in samples.items():
        others = {
            run_id: _settings(spec)
            for run_id, spec in stored.items()
            if (spec.algo, spec.env_id) == (algo, env_id) and _settings(spec) != settings
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


def _differences(old: Sequence[Mapping[str, Any]], new: Mapping[str, Any]) -> str:
    keys = sorted({k for o in old for k in o.keys() | new.keys() if o.get(k) != new.get(k)})
    return "; ".join(
        f"{k}: {' or '.join(dict.fromkeys(repr(o.get(k)) for o in old))} there, {new.get(k)!r} now"
        for k in keys
    )


def _unusable(out_dir: Path, exc: OSError) -> str:
    detail = exc.strerror or str(exc)
    if exc.filename is not None and os.fspath(exc.filename) != os.fspath(out_dir):
        detail = f"{os.fspath(exc.filename)!r}: {detail}"
    return (
        f"out_dir {os.fspath(out_dir)!r} cannot hold an experiment ({detail}): give a "
        "directory this user can write"
    )


@contextlib.contextmanager
def _index_lock(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir``'s index lock (created with ``out_dir``) for the block."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
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


def run_in_use(run_dir: Path) -> str | None:
    """Who else writes ``run_dir`` now (``"process 12 on host 'h'"``): the holder of its
    checkpoint lock if that is another live process (or one on another host, which cannot
    be checked from here); ``None`` if free, stale or held by this process."""
    try:
        record = json.loads((run_dir / CHECKPOINTS / LOCK_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    pid = record.get("pid") if isinstance(record, dict) else None
    host = record.get("host") if isinstance(record, dict) else None
    if isinstance(pid, bool) or not isinstance(pid, int) or not isinstance(host, str):
        return None
    if host == socket.gethostname() and (pid == os.getpid() or not pid_alive(pid)):
        return None
    return f"process {pid} on host {host!r}"


def in_use_error(run_dir: Path, exc: BaseException) -> str | None:
    """The holder (:func:`run_in_use`) if ``exc`` is the checkpoint lock refusing this run
    because another live process writes it: the run is not failed, only not ours now."""
    return run_in_use(run_dir) if isinstance(exc, CheckpointError) else None


def note_in_use(run_dir: Path, holder: str) -> None:
    """Warn that ``run_dir`` is skipped: ``holder`` (another sweep) runs it."""
    lock = run_dir / CHECKPOINTS / LOCK_FILE
    warnings.warn(
        f"{run_dir.name}: in use by another sweep ({holder}); skipped, its files untouched "
        f"(if that sweep has ended without releasing it, delete {os.fspath(lock)!r})",
        stacklevel=2,
    )


def is_finished(run_dir: Path) -> bool:
    """True if ``run_dir`` has a ``result.json`` of a finished run."""
    path = run_dir / RESULT_FILE
    if not path.is_file():
        return False
    try:
        return bool(read_json(path).get("status") == "finished")
    except (ValueError, AttributeError):
        return False


def spec_of(run_dir: Path) -> RunSpec:
    """The resolved spec stored in ``run_dir``."""
    return RunSpec.from_file(run_dir / SPEC_FILE)
