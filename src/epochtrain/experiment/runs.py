"""One run of an experiment on disk: its directory, resolved spec, result file and curve.

``out_dir/<run_id>/`` holds ``spec.toml`` (the resolved :class:`~epochtrain.spec.RunSpec`),
``log.jsonl`` (every logged record), ``checkpoints/epoch_*`` and, once the run has ended,
``result.json``. ``out_dir/experiment.json`` lists the run ids. The functions here open a
run (resuming from its latest checkpoint), write its result atomically and say whether
another sweep runs it; :mod:`epochtrain.experiment.prepare` sets the directories up, and
the backends in :mod:`epochtrain.experiment.runner` decide which process advances which
trainer.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import traceback
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from epochtrain.checkpoint import RUN_CHECKPOINTS
from epochtrain.checkpoint_files import LOCK_FILE, CheckpointLock
from epochtrain.data.writes import pid_alive, replace_file
from epochtrain.errors import CheckpointError
from epochtrain.spec import RunSpec

__all__ = [
    "EXPERIMENT_FILE",
    "RESULT_FILE",
    "SPEC_FILE",
    "RunLock",
    "check_format",
    "check_same_run",
    "close_envs",
    "drop_stale_lock",
    "failed_result",
    "finished_result",
    "flatten",
    "hold_run",
    "in_use_error",
    "is_finished",
    "note_in_use",
    "open_trainer",
    "read_index",
    "read_json",
    "read_test_curve",
    "resolve_spec",
    "run_in_use",
    "sample_settings",
    "spec_of",
    "timed_epoch",
    "write_json",
]

EXPERIMENT_FILE = "experiment.json"
RESULT_FILE = "result.json"
SPEC_FILE = "spec.toml"
LOG_FILE = "log.jsonl"
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


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``: a spec's dict as one level of settings."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        elif key not in _LOCATION:
            out[prefix + key] = list(value) if isinstance(value, tuple) else value
    return out


def sample_settings(spec: RunSpec) -> dict[str, Any]:
    """What ``spec`` computes, but for its seed and locations: equal for the runs of one
    sample (the seeds of an algorithm on an env, which ``compare`` pools)."""
    settings = flatten(spec.to_dict())
    settings.pop("trainer.seed")
    return settings


def check_same_run(stored: RunSpec, wanted: RunSpec, run_dir: Path) -> None:
    """``ValueError`` unless ``stored`` (from ``run_dir``) computes what ``wanted`` does."""
    old, new = flatten(stored.to_dict()), flatten(wanted.to_dict())
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
    naming the file and the entry): each is the name of a directory beside the index (no
    path, so no run of another experiment is read, or deleted on advice) and is listed once.
    """
    try:
        data = read_json(path)
    except ValueError as exc:
        raise ValueError(
            f"{exc}: the experiment index is damaged. Delete it and run again each sweep "
            "command that wrote to this directory: it lists their runs again, keeps the "
            "finished ones and resumes the others"
        ) from exc
    runs = check_format(data, path, "experiment index").get("runs", [])
    if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
        raise ValueError(f"{os.fspath(path)!r}: 'runs' must be a list of run ids")
    seen: set[str] = set()
    for run_id in runs:
        if run_id in ("", ".", "..") or Path(run_id).name != run_id or "\\" in run_id:
            raise ValueError(
                f"{os.fspath(path)!r} lists run {run_id!r}, which is not a run id (a plain "
                f"directory name inside {os.fspath(path.parent)!r}, no path): remove the "
                "entry, or move that run's directory here and list it by its name"
            )
        if run_id in seen:
            raise ValueError(
                f"{os.fspath(path)!r} lists run {run_id!r} twice: remove the repeated entry "
                "from its 'runs' list"
            )
        seen.add(run_id)
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


class RunLock(CheckpointLock):
    """The writer lock of a run's ``checkpoints/``, held by the sweep that runs it from
    before its trainer is built until its ``result.json`` is written.

    The trainer releases its lock after the run's last checkpoint; this one holds that
    release back until :meth:`end` (:func:`close_envs`, or the trainer's collection), so no
    other sweep takes a run over between its last epoch and its result.
    """

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self._ending = False

    def release(self) -> None:
        """Held back until :meth:`end` (class docstring)."""
        if self._ending:
            super().release()

    def end(self) -> None:
        """Release the lock (if still ours)."""
        self._ending = True
        super().release()


_RUN_LOCKS: weakref.WeakKeyDictionary[Any, RunLock] = weakref.WeakKeyDictionary()
"""The :class:`RunLock` of each trainer :func:`open_trainer` opened, ended by :func:`close_envs`."""


def open_trainer(run_dir: Path) -> Any:
    """The trainer of ``run_dir/spec.toml``, resumed from its latest checkpoint if any; a
    run without one starts over, and the log records an earlier start wrote are dropped.

    The run's :class:`RunLock` is taken first, before anything is built or created in
    ``run_dir``: a run another sweep is running raises
    :class:`~epochtrain.checkpoint.CheckpointError` having touched nothing. The trainer
    holds the lock until :func:`close_envs`. Its logs and checkpoints go to ``run_dir`` as
    it is now: a sweep copied elsewhere (whose ``spec.toml`` may still name the old place)
    resumes in its copy and never writes to the original."""
    from epochtrain.checkpoint_periodic import adopt_checkpoint_lock
    from epochtrain.factory import make_trainer

    here = run_dir.resolve()
    lock = RunLock(here / CHECKPOINTS)  # the spec's checkpoint_dir, as resolved below
    lock.acquire()
    try:
        trainer = make_trainer(resolve_spec(spec_of(run_dir), here))
    except BaseException:
        lock.end()
        raise
    adopt_checkpoint_lock(trainer, lock)  # its saves and loads hold it from here
    _RUN_LOCKS[trainer] = lock
    weakref.finalize(trainer, lock.end)
    try:
        ckpts = run_dir / CHECKPOINTS
        if ckpts.is_dir() and any(p.name.startswith("epoch_") for p in ckpts.iterdir()):
            # a damaged latest checkpoint is refused (naming it), not started over
            # loaded here rather than through resume_from, which the spec would record
            trainer.load_checkpoint(run_dir / CHECKPOINTS)
        else:  # started over (killed before its first checkpoint): old records are dropped
            trainer.logger.load_state_dict(trainer.logger.state_dict())
    except BaseException:
        close_envs(trainer)
        raise
    return trainer


@contextlib.contextmanager
def hold_run(run_dir: Path) -> Iterator[bool]:
    """Hold ``run_dir``'s writer lock for the block, to write its ``result.json``: yields
    True if this process holds it (its trainer, or taken here and released after the
    block), False if another live process does (that sweep runs it now: write nothing)."""
    if _lock_holder(run_dir) == (os.getpid(), socket.gethostname()):
        yield True
        return
    lock = CheckpointLock(run_dir / CHECKPOINTS)
    try:
        lock.acquire()
    except CheckpointError:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def timed_epoch(trainer: Any) -> tuple[bool, float]:
    """Advance ``trainer`` by one epoch: ``(True, seconds)`` after an epoch, ``(False,
    seconds)`` once the run has ended (``next`` raised ``StopIteration``).

    A run's ``wall_time`` in ``result.json`` is the sum of these seconds plus its earlier
    sessions' ``trainer.state.total_time`` (restored from the checkpoint). Every backend
    counts it so: the seconds in the run's epochs, never the trainer's construction, a
    resume's loading or a worker's imports. An exception from the epoch propagates.
    """
    start = time.perf_counter()
    try:
        next(trainer)
    except StopIteration:
        return False, time.perf_counter() - start
    return True, time.perf_counter() - start


def close_envs(trainer: Any) -> None:
    """Close ``trainer`` (:meth:`BaseTrainer.close`: its envs, then its logger), then
    release its :class:`RunLock`: an ``env_backend='async'`` run's env processes end with
    its run, not when a reused worker process exits. Its result is already written: an env
    or a logger that fails to close changes nothing but a warning."""
    try:
        trainer.close()
    except Exception as exc:  # e.g. a logger's upload at close; the envs closed first
        warnings.warn(f"closing the trainer of a finished run failed: {exc!r}", stacklevel=2)
    finally:
        lock = _RUN_LOCKS.pop(trainer, None)
        if lock is not None:
            lock.end()


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


def _lock_holder(run_dir: Path) -> tuple[int, str] | None:
    """``(pid, host)`` of the process ``run_dir``'s checkpoint lock names, if readable."""
    try:
        record = json.loads((run_dir / CHECKPOINTS / LOCK_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    pid = record.get("pid") if isinstance(record, dict) else None
    host = record.get("host") if isinstance(record, dict) else None
    if isinstance(pid, bool) or not isinstance(pid, int) or not isinstance(host, str):
        return None
    return pid, host


def run_in_use(run_dir: Path) -> str | None:
    """Who else writes ``run_dir`` now (``"process 12 on host 'h'"``): the holder of its
    checkpoint lock if that is another live process (or one on another host, which cannot
    be checked from here); ``None`` if free, stale or held by this process."""
    holder = _lock_holder(run_dir)
    if holder is None:
        return None
    pid, host = holder
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


def drop_stale_lock(run_dir: Path) -> None:
    """Remove the checkpoint lock a dead process of this host left in ``run_dir`` (a sweep
    killed between the run's ``result.json`` and the lock's release: a finished run is
    never opened again, so no taker would remove it). Best effort: a read-only copy keeps it.
    """
    with contextlib.suppress(OSError):
        CheckpointLock(run_dir / CHECKPOINTS).remove_if_stale()


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
