"""Read an experiment back: each run's status, test curve and score, as plain arrays.

``load_experiment("exp/")`` reads ``exp/experiment.json`` and each listed run's
``result.json``; a run without one is ``"running"`` while another live process holds its
checkpoint lock (a sweep running it now), else ``"pending"`` (never started, or interrupted).
:meth:`Experiment.scores` gives the ``{algorithm: [n_runs, n_envs]}`` matrix that the
statistics take, :meth:`Experiment.curves` the test curves of one env. A run that reached its
goal (``stop_reason`` :data:`STOPPED_AT_GOAL`) is scored as if held at its last test return up
to the last test of the longest run on its env (:func:`~epochtrain.experiment.carry_forward`),
as the report's curves draw it.
"""

from __future__ import annotations

import importlib
import math
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from epochtrain.envs import env_name
from epochtrain.experiment.bootstrap import FloatArray
from epochtrain.experiment.curves import SCORE_METHODS, ScoreMethod, carry_forward, run_score
from epochtrain.experiment.runs import (
    EXPERIMENT_FILE,
    RESULT_FILE,
    SPEC_FILE,
    check_format,
    read_index,
    read_json,
    read_test_curve,
    run_in_use,
    sample_settings,
)

if TYPE_CHECKING:
    from epochtrain.spec import RunSpec

__all__ = ["STOPPED_AT_GOAL", "Experiment", "RunResult", "RunStatus", "load_experiment"]

RunStatus = Literal["finished", "failed", "pending", "running"]

STOPPED_AT_GOAL = "stop_fn"
"""The ``stop_reason`` of a run that reached its ``stop_at`` return (it solved the task)."""


@dataclass(frozen=True)
class RunResult:
    """One run of an experiment as read from its directory."""

    run_id: str
    algo: str
    env_id: str
    seed: int
    status: RunStatus
    steps: FloatArray = field(repr=False)
    """Env steps (gradient steps offline) of each test."""
    test_returns: FloatArray = field(repr=False)
    """Mean test return of each test."""
    stop_reason: str | None = None
    error: str | None = None
    path: Path | None = None

    def score(self, method: ScoreMethod = "final") -> float:
        """The run's score from its own test curve (:func:`~epochtrain.experiment.run_score`);
        :meth:`Experiment.scores` scores a run that reached its goal over the common span."""
        if self.test_returns.size == 0:
            raise ValueError(f"run {self.run_id} has no test yet: it cannot be scored")
        return run_score(self.steps, self.test_returns, method)


@dataclass(frozen=True)
class Experiment:
    """The runs of one or more experiment directories."""

    runs: tuple[RunResult, ...]

    @property
    def algos(self) -> list[str]:
        """Algorithms, in the order the runs list them."""
        return list(dict.fromkeys(r.algo for r in self.runs))

    @property
    def envs(self) -> list[str]:
        """Env ids, in the order the runs list them."""
        return list(dict.fromkeys(r.env_id for r in self.runs))

    def finished(self) -> list[RunResult]:
        """The runs that ended normally (``status == "finished"``)."""
        return [r for r in self.runs if r.status == "finished"]

    def scores(
        self, method: ScoreMethod = "final", *, envs: Sequence[str] | None = None
    ) -> tuple[dict[str, FloatArray], list[str]]:
        """``({algorithm: [n_runs, n_envs]}, env_ids)`` of the finished runs' scores.

        Rows are seeds in ascending order. Every algorithm needs the same seeds on every
        env (the matrix has no holes): a missing or failed run raises ``ValueError`` naming
        it, so re-run the experiment or pass ``envs=`` to leave an env out.

        The runs of an env are scored over one span, the last test of the longest of them:
        a run that reached its goal (``stop_at``) counts at its last test return up to there
        (:func:`~epochtrain.experiment.carry_forward`); a run that ended earlier for another
        reason is not extended, and with ``method="auc"`` a warning names it.
        """
        if method not in SCORE_METHODS:
            raise ValueError(f"method must be one of {SCORE_METHODS}, got {method!r}")
        env_ids = self.envs if envs is None else list(envs)
        unknown = [e for e in env_ids if e not in self.envs]
        if unknown or not env_ids:
            raise ValueError(f"envs must be a non-empty subset of {self.envs}, got {env_ids}")
        missing = self.unfinished(env_ids)
        if missing:
            raise ValueError(
                f"runs not finished: {', '.join(missing)}; every algorithm needs a finished "
                "run of each of its seeds on every env; re-run the experiment to finish them, "
                "or pass envs= to compare fewer envs"
            )
        per_run: dict[str, float] = {}
        for env in env_ids:
            per_run.update(self._span_scores(env, method))
        result: dict[str, FloatArray] = {}
        for algo in self.algos:
            runs = {(r.env_id, r.seed): r for r in self.finished() if r.algo == algo}
            seeds = sorted({seed for _, seed in runs})
            result[algo] = np.array(
                [[per_run[runs[(env, seed)].run_id] for env in env_ids] for seed in seeds]
            )
        return result, env_ids

    def _span_scores(self, env_id: str, method: ScoreMethod) -> dict[str, float]:
        """``{run_id: score}`` of the finished runs on ``env_id``, over their common span."""
        runs = [r for r in self.finished() if r.env_id == env_id]
        for run in runs:
            if run.test_returns.size == 0:
                run.score(method)  # the error naming the untested run
        curves = carry_forward(
            [(r.steps, r.test_returns) for r in runs],
            [r.stop_reason == STOPPED_AT_GOAL for r in runs],
        )
        span_end = max(float(steps[-1]) for steps, _ in curves)
        short = [
            r.run_id for r, (steps, _) in zip(runs, curves, strict=True) if steps[-1] < span_end
        ]
        if short and method == "auc":  # final and best do not depend on the span
            warnings.warn(
                f"{env_id}: {', '.join(short)} ended before {span_end:g} steps (the last test "
                "of the longest run) without reaching stop_at; their auc covers their own "
                "tests only, so it is not comparable with the longer runs'",
                stacklevel=3,
            )
        return {
            r.run_id: run_score(steps, returns, method)
            for r, (steps, returns) in zip(runs, curves, strict=True)
        }

    def unfinished(self, envs: Sequence[str] | None = None) -> list[str]:
        """What a comparison on ``envs`` (default: all) lacks: for each algorithm, each of
        its seeds on each env without a finished run, as ``"<run id> (<status>)"`` or
        ``"<run id> (no run)"``; an algorithm without runs on ``envs`` as
        ``"<algo> (no run on <envs>)"``. Empty when the score matrix has no holes."""
        env_ids = self.envs if envs is None else list(envs)
        missing: list[str] = []
        for algo in self.algos:
            own = {(r.env_id, r.seed): r for r in self.runs if r.algo == algo}
            seeds = sorted({seed for env, seed in own if env in env_ids})
            if not seeds:
                missing.append(f"{algo} (no run on {', '.join(env_ids)})")
            for env in env_ids:
                for seed in seeds:
                    run = own.get((env, seed))
                    if run is None:
                        missing.append(f"{algo}-{env_name(env)}-s{seed} (no run)")  # RunSpec.run_id
                    elif run.status != "finished":
                        missing.append(f"{run.run_id} ({run.status})")
        return missing

    def curves(self, env_id: str) -> dict[str, list[tuple[FloatArray, FloatArray]]]:
        """``{algorithm: [(steps, test_returns), ...]}`` of the finished runs on ``env_id``."""
        if env_id not in self.envs:
            raise ValueError(f"env_id must be one of {self.envs}, got {env_id!r}")
        out: dict[str, list[tuple[FloatArray, FloatArray]]] = {}
        for run in self.finished():
            if run.env_id == env_id and run.test_returns.size:
                out.setdefault(run.algo, []).append((run.steps, run.test_returns))
        return out

    def to_dataframe(self) -> Any:
        """One row per run and test (pandas ``DataFrame``; needs pandas installed)."""
        try:
            pandas = importlib.import_module("pandas")
        except ImportError as exc:
            raise ImportError(f"to_dataframe needs pandas: pip install pandas ({exc})") from exc
        rows = [
            {
                "run_id": r.run_id,
                "algo": r.algo,
                "env_id": r.env_id,
                "seed": r.seed,
                "status": r.status,
                "step": float(step),
                "test_return": float(ret),
            }
            for r in self.runs
            for step, ret in zip(r.steps, r.test_returns, strict=True)
        ]
        return pandas.DataFrame(rows)


def _numbers(data: dict[str, Any], key: str, path: Path) -> FloatArray:
    value = data.get(key)
    if not isinstance(value, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        raise ValueError(f"{os.fspath(path)!r}: {key!r} must be a list of numbers")
    return np.asarray(value, dtype=np.float64)


def _curve_fault(steps: FloatArray, returns: FloatArray) -> str | None:
    """What is wrong with a test curve read from a file (None: nothing)."""
    if not np.isfinite(steps).all() or not np.isfinite(returns).all():
        return "its test curve holds NaN or infinite values"
    if len(steps) > 1 and not bool((np.diff(steps) > 0).all()):
        return "its test steps do not increase"
    return None


_REDO = (
    "epochtrain never writes that, so the file was edited, damaged or copied from another "
    "run: delete it and re-run the sweep's command, which runs the run again"
)


def _field(data: dict[str, Any], key: str, path: Path, ok: Callable[[Any], bool], what: str) -> Any:
    """``data[key]`` if present and ``ok``; else ``ValueError`` naming the file and field."""
    if key not in data or not ok(data[key]):
        got = "no such field" if key not in data else repr(data[key])
        raise ValueError(f"{os.fspath(path)!r}: {key!r} must be {what}, got {got}; {_REDO}")
    return data[key]


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_str_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_seconds(value: Any) -> bool:
    if value is None:
        return True
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and value >= 0


def _read_result(path: Path, run_dir: Path, spec: RunSpec) -> RunResult:
    """The ``result.json`` at ``path`` of the run ``spec`` in ``run_dir``, checked:
    ``ValueError`` naming the file and the entry that is missing, wrong, or names another run
    (a file edited by hand, or from someone else)."""
    data = check_format(read_json(path), path, "run result")
    for key in ("run_id", "algo", "env_id", "status"):
        _field(data, key, path, _is_str, "a string")
    seed = _field(data, "seed", path, _is_count, "an int >= 0")
    _check_identity(data, path, run_dir, spec)
    _field(data, "status", path, lambda v: v in ("finished", "failed"), "'finished' or 'failed'")
    stop_reason = _field(data, "stop_reason", path, _is_str_or_none, "a string or null")
    error = _field(data, "error", path, _is_str_or_none, "a string or null")
    _field(data, "epochs", path, _is_count, "an int >= 0")
    _field(data, "wall_time", path, _is_seconds, "a number >= 0 or null")
    units = ("env_step", "gradient_step")
    _field(data, "step_unit", path, lambda v: v in units, "'env_step' or 'gradient_step'")
    steps, returns = _numbers(data, "steps", path), _numbers(data, "test_returns", path)
    if len(steps) != len(returns):
        raise ValueError(
            f"{os.fspath(path)!r} has {len(steps)} steps but {len(returns)} test_returns; " + _REDO
        )
    bad = _curve_fault(steps, returns)
    if bad is not None:
        raise ValueError(f"{os.fspath(path)!r} (run {data['run_id']}): {bad}; {_REDO}")
    return RunResult(
        run_id=data["run_id"],
        algo=data["algo"],
        env_id=data["env_id"],
        seed=seed,
        status="finished" if data["status"] == "finished" else "failed",
        steps=steps,
        test_returns=returns,
        stop_reason=stop_reason,
        error=error,
        path=run_dir,
    )


def _check_identity(data: dict[str, Any], path: Path, run_dir: Path, spec: RunSpec) -> None:
    """``ValueError`` unless the result at ``path`` is of the run ``spec`` in ``run_dir``."""
    own = {"run_id": spec.run_id, "algo": spec.algo, "env_id": spec.env_id, "seed": spec.seed}
    says = [f"{k} {data[k]!r}" for k, v in own.items() if data[k] != v]
    if says:
        raise ValueError(
            f"{os.fspath(path)!r} says {', '.join(says)}, but it is in the directory of run "
            f"{spec.run_id} ({os.fspath(run_dir)!r}, per its {SPEC_FILE}): it is the result "
            f"of another run; delete it (or the run directory) and re-run the sweep with seed "
            f"{spec.seed}, which runs that seed again"
        )


def _own_spec(run_dir: Path) -> RunSpec:
    """The spec in ``run_dir``; ``ValueError`` if it is the spec of another run."""
    from epochtrain.spec import RunSpec  # the spec module imports the algorithms: lazily

    path = run_dir / SPEC_FILE
    spec = RunSpec.from_file(path)
    if spec.run_id != run_dir.name:
        raise ValueError(
            f"{os.fspath(path)!r} is the spec of run {spec.run_id}, but its directory is "
            f"{run_dir.name!r}: it was copied from another run; delete {os.fspath(run_dir)!r} "
            "and re-run the sweep with that directory's seed, which runs it again"
        )
    return spec


def _load_run(run_dir: Path, spec: RunSpec) -> tuple[RunResult, dict[str, Any]]:
    """The run ``spec`` in ``run_dir`` and the settings of its sample (:func:`sample_settings`)."""
    result_path = run_dir / RESULT_FILE
    if result_path.is_file():
        return _read_result(result_path, run_dir, spec), sample_settings(spec)
    steps, returns = read_test_curve(run_dir)
    holder = run_in_use(run_dir)
    run = RunResult(
        run_id=spec.run_id,
        algo=spec.algo,
        env_id=spec.env_id,
        seed=spec.seed,
        status="pending" if holder is None else "running",
        steps=np.asarray(steps, dtype=np.float64),
        test_returns=np.asarray(returns, dtype=np.float64),
        error=None if holder is None else f"in use by another sweep ({holder})",
        path=run_dir,
    )
    return run, sample_settings(spec)


def _check_seeds(seeds: Iterable[int] | None, name: str) -> list[int] | None:
    """``seeds`` as a list of distinct ints >= 0 (``None`` stays ``None``), else a
    ``ValueError`` naming ``name``."""
    if seeds is None:
        return None
    if isinstance(seeds, str | bytes) or not isinstance(seeds, Iterable):
        raise ValueError(f"{name} must be a list of ints >= 0, e.g. [0, 1, 2], got {seeds!r}")
    wanted = list(seeds)
    bad = [s for s in wanted if isinstance(s, bool) or not isinstance(s, int) or s < 0]
    if bad or not wanted:
        got = f"{bad} in {wanted}" if bad else "none"
        raise ValueError(f"{name} must be a non-empty list of ints >= 0, e.g. [0, 1, 2], got {got}")
    return list(dict.fromkeys(wanted))


def _listed_runs(root: Path) -> list[tuple[Path, RunSpec]]:
    """Each run that ``root/experiment.json`` lists, as its directory and its spec."""
    index = root / EXPERIMENT_FILE
    if not index.is_file():
        raise ValueError(
            f"{os.fspath(root)!r} is not an experiment directory (no {EXPERIMENT_FILE}): "
            "pass the --out directory of `epochtrain sweep` or of run_experiment"
        )
    listed: list[tuple[Path, RunSpec]] = []
    for run_id in read_index(index):
        run_dir = root / run_id
        if not run_dir.exists():
            raise ValueError(
                f"{os.fspath(index)!r} lists run {run_id!r} but its directory "
                f"{os.fspath(run_dir)!r} is gone: re-run the sweep (with its seed, to "
                "start it again; without, to drop it from the list)"
            )
        if not (run_dir / SPEC_FILE).is_file():
            raise ValueError(
                f"{os.fspath(index)!r} lists run {run_id!r} but {os.fspath(run_dir)!r} "
                f"has no {SPEC_FILE}: the directory is incomplete"
            )
        listed.append((run_dir, _own_spec(run_dir)))
    return listed


def load_experiment(
    path: str | os.PathLike[str],
    *more: str | os.PathLike[str],
    seeds: Iterable[int] | None = None,
    seeds_name: str = "seeds",
) -> Experiment:
    """Read the experiment written by :func:`~epochtrain.experiment.run_experiment` to
    ``path`` (and to each of ``more``, merged; a run id may appear only once).

    ``seeds`` (default: all) keeps only the runs of those seeds; each must be the seed of a
    listed run, else a ``ValueError`` naming ``seeds_name`` (``--seeds`` from the command
    line) and the seeds there are. The other runs are left out before their results are read
    or compared, so a seed of other settings does not stop a comparison of the rest.

    Every file of a run kept is checked before a run is returned (``ValueError`` naming the
    file, what it says and the fix): ``experiment.json`` lists plain run ids, once each; each
    run's ``spec.toml`` and ``result.json`` are of the run their directory is named after;
    and the runs of an algorithm on an env differ only in their seed, within a directory as
    across directories, as they are pooled as one sample.
    """
    wanted = _check_seeds(seeds, seeds_name)
    roots = [Path(directory) for directory in (path, *more)]
    resolved = [root.resolve() for root in roots]
    again = [os.fspath(r) for i, r in enumerate(roots) if resolved[i] in resolved[:i]]
    if again:
        raise ValueError(
            f"experiment directories {again} are given more than once: give each directory once"
        )
    listed = [run for root in roots for run in _listed_runs(root)]
    if not listed:
        raise ValueError(f"{os.fspath(path)!r} lists no runs")
    if wanted is not None:
        present = sorted({spec.seed for _, spec in listed})
        unknown = [seed for seed in wanted if seed not in present]
        if unknown:
            raise ValueError(
                f"{seeds_name} {unknown}: the experiment has seeds {present}; choose among them"
            )
        listed = [(run_dir, spec) for run_dir, spec in listed if spec.seed in wanted]
    ids = [spec.run_id for _, spec in listed]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:  # each directory lists a run once, and a run's files name its directory
        raise ValueError(
            f"runs {duplicates} appear in more than one experiment directory: "
            "compare directories of different runs"
        )
    loaded = [_load_run(run_dir, spec) for run_dir, spec in listed]
    _check_one_sample(loaded)
    return Experiment(tuple(run for run, _ in loaded))


def _check_one_sample(loaded: list[tuple[RunResult, dict[str, Any]]]) -> None:
    """``ValueError`` if runs of one algorithm and env differ in more than their seed (a
    run directory copied in by hand, or directories of other settings): a comparison pools
    them as one sample. Each run comes with its :func:`sample_settings`."""
    first: dict[tuple[str, str], tuple[RunResult, dict[str, Any]]] = {}
    for run, settings in loaded:
        other, theirs = first.setdefault((run.algo, run.env_id), (run, settings))
        if theirs == settings:
            continue
        assert other.path is not None and run.path is not None
        keys = sorted(
            k for k in theirs.keys() | settings.keys() if theirs.get(k) != settings.get(k)
        )
        what = "; ".join(f"{k}: {theirs.get(k)!r} there, {settings.get(k)!r} here" for k in keys)
        there, here = os.fspath(other.path.parent), os.fspath(run.path.parent)
        if there == here:
            runs = f"runs {other.run_id} and {run.run_id} in {here!r}"
            fix = (
                "delete the run directories that do not belong (a sweep with their seeds runs "
                "them again with the settings of the others), or move them to an experiment "
                "of their own"
            )
        else:
            runs = f"runs {other.run_id} in {there!r} and {run.run_id} in {here!r}"
            fix = "compare the directories apart"
        raise ValueError(
            f"{runs} run {run.algo} on {run.env_id} with different settings ({what}): compare "
            f"pools the seeds of an algorithm on an env as one sample, so they may differ only "
            f"in their seed; {fix}"
        )
