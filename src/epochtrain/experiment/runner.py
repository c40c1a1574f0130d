"""Run many specs: ``grid`` enumerates them, ``run_experiment`` runs them resumably.

Backends, which write the same run directories and the same numbers for the same spec:

- ``"lockstep"``: one process; the trainers are built together and advanced one epoch each
  in turn (the ``zip`` usage of the iterator), each owning its random streams; a sweep
  whose runs (buffers, offline datasets, networks) together would not fit in memory is
  refused before any run opens
  (:func:`~epochtrain.experiment.memory.check_lockstep_memory`);
- ``"processes"``: a pool of ``workers`` spawned processes, one run at a time each
  (:mod:`epochtrain.experiment.processes`);
- ``"ray"``: one Ray Tune trial per run (:func:`epochtrain.experiment.ray_backend.run_trials`, extra
  ``epochtrain[ray]``), on a local Ray or the cluster at ``address``; a trial whose worker
  dies is restored from its last checkpoint (``max_failures`` times; with ``"processes"``
  a run whose worker died starts again from its last checkpoint as often).

All run torch on one thread per run (a Ray trial: one per CPU it holds, 1 by default), so a
run computes the same floats whichever backend runs it. Re-running skips runs whose
``result.json`` says finished, and resumes the others (interrupted or failed) from their
latest checkpoint. A run that raises gets a ``result.json`` with ``status = "failed"`` and
its error, and the other runs go on; a run another live sweep is running (its checkpoint
lock) is skipped with a warning and its files are left alone. A sweep takes a run's lock
before it builds the run's trainer and holds it until the run's ``result.json`` is written
(:func:`~epochtrain.experiment.runs.open_trainer`). An interrupt (Ctrl-C, or
SIGTERM through the CLI) stops every run at its last complete epoch, closes its envs and is
raised again; the interrupted runs get no ``result.json`` and resume on the next run.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from epochtrain.experiment.memory import check_lockstep_memory
from epochtrain.experiment.prepare import check_writable, prepare_runs
from epochtrain.experiment.processes import run_processes
from epochtrain.experiment.progress import Progress
from epochtrain.experiment.results import Experiment, load_experiment
from epochtrain.experiment.runs import (
    close_envs,
    drop_stale_lock,
    failed_result,
    finished_result,
    hold_run,
    in_use_error,
    is_finished,
    note_in_use,
    open_trainer,
    run_in_use,
    spec_of,
    timed_epoch,
)
from epochtrain.spec import RunSpec
from epochtrain.spec_names import algorithm, check_env_id

if TYPE_CHECKING:
    from epochtrain.algorithms import Policy

__all__ = ["BACKENDS", "Backend", "grid", "run_experiment"]

Backend = Literal["lockstep", "processes", "ray"]
BACKENDS: tuple[str, ...] = get_args(Backend)


def grid(
    algos: Sequence[str],
    envs: Sequence[str],
    seeds: Iterable[int],
    *,
    base: RunSpec | str | os.PathLike[str] | None = None,
    **overrides: object,
) -> list[RunSpec]:
    """Every (algorithm, env, seed) run as a :class:`RunSpec`, in that nesting order.

    Each spec is ``RunSpec.tuned(algo, env, seed=seed)`` with ``overrides`` applied by
    setting name (``max_epoch=5``, ``lr=3e-4``, ``**{"trainer.batch_size": 128}``).
    ``base`` replaces the tuned spec: a spec file's path is read for each env
    (:meth:`RunSpec.from_file` with ``env_id``: the settings the file leaves out take that
    env's tuned values, ``stop_at`` included); a :class:`RunSpec` is kept whole, moved to
    each env and seed. Unknown algorithms, envs and settings raise ``ValueError`` before
    any run starts.
    """
    seed_list = list(seeds)
    for name, values in (("algos", algos), ("envs", envs), ("seeds", seed_list)):
        if isinstance(values, str) or not values:
            raise ValueError(f"{name} must be a non-empty list, got {values!r}")
        if len(set(values)) != len(values):
            raise ValueError(f"{name} must not repeat a value, got {values!r}")
    for seed in seed_list:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seeds must be non-negative ints, got {seed!r} in {seed_list}")
    for env_id in envs:
        check_env_id(env_id)
    bases = {env_id: _base_at(base, env_id) for env_id in envs} if base is not None else {}
    for algo in algos:
        algorithm(algo)
        for spec in bases.values():
            if algo != spec.algo:
                raise ValueError(
                    f"algos must be [{spec.algo!r}] (the algo of base), got {list(algos)!r}"
                )
    specs = []
    for algo in algos:
        for env_id in envs:
            for seed in seed_list:
                if base is None:
                    spec = RunSpec.tuned(algo, env_id, seed=seed)
                else:
                    spec = bases[env_id].with_overrides({"seed": seed})
                try:
                    specs.append(spec.with_overrides(overrides))
                except (TypeError, ValueError) as exc:
                    raise type(exc)(f"grid run {spec.run_id}: {exc}") from exc
    return specs


def _base_at(base: RunSpec | str | os.PathLike[str], env_id: str) -> RunSpec:
    """``grid``'s ``base`` on ``env_id``: a file read for it, a spec moved to it."""
    if isinstance(base, RunSpec):
        return base if base.env_id == env_id else base.replace(env_id=env_id)
    return RunSpec.from_file(base, env_id=env_id)


def run_experiment(
    specs: Sequence[RunSpec],
    out_dir: str | os.PathLike[str],
    *,
    backend: Backend = "lockstep",
    workers: int | None = None,
    show_progress: bool = True,
    address: str | None = None,
    max_failures: int | None = None,
    gpus_per_run: float = 0.0,
    storage_path: str | os.PathLike[str] | None = None,
) -> Experiment:
    """Run ``specs`` into ``out_dir`` (module docstring) and return the loaded experiment.

    ``workers`` is the ``"processes"`` pool size (default: CPU count, at most one per run),
    or the most Ray trials running at once (default: as the cluster's CPUs allow);
    ``show_progress`` draws a bar per run and an overall bar with an ETA on stderr;
    ``max_failures`` is how often a run whose worker process died (Ray, processes) starts
    again from its last checkpoint before it is recorded as failed (``None``: 3; the
    ``"lockstep"`` backend, one process that restarts nothing, refuses it).
    Ray only (``docs/cluster.md``): ``address`` of the cluster (``None``: the Ray this
    process is connected to, else a new local one; ``"auto"``: this node's cluster),
    ``gpus_per_run`` GPUs per trial and ``storage_path`` for Tune's own files (default
    ``out_dir/.tune``).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    _check_ray_options(backend, address, max_failures, gpus_per_run, storage_path)
    restarts = DEFAULT_MAX_FAILURES if max_failures is None else max_failures
    if not specs or not all(isinstance(s, RunSpec) for s in specs):
        raise ValueError(
            "specs must be a non-empty list of RunSpec (e.g. grid(['ppo'], ['CartPole-v1'], "
            f"range(3))), got {specs!r:.80}"
        )
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)):
        raise ValueError(f"workers must be a positive int or None, got {workers!r}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be a positive int or None, got {workers!r}")
    cluster: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if backend == "ray":
        from epochtrain.experiment.ray_backend import (
            connect,
            run_trials,  # without ray: the error naming the extra, first
        )

        # an address where nothing answers, or GPUs the cluster lacks: refused before any
        # file is written (a half-made experiment would refuse the corrected command)
        if address is not None or gpus_per_run > 0:
            cluster = connect(address, gpus_per_run=gpus_per_run)
    root = Path(out_dir)
    with cluster:
        _check_specs(specs)
        run_dirs = prepare_runs(specs, root)
        for run_dir in run_dirs:
            if is_finished(run_dir):
                drop_stale_lock(run_dir)
        pending = _not_held([d for d in run_dirs if not is_finished(d)])
        check_writable(root, pending)
        if backend == "lockstep":
            check_lockstep_memory(pending)  # the open runs add up: refused before any opens
        with Progress(run_dirs, pending, enabled=show_progress) as progress:
            if backend == "lockstep":
                _run_lockstep(pending, progress)
            elif backend == "ray":
                run_trials(
                    pending,
                    root,
                    progress,
                    address=address,
                    workers=workers,
                    max_failures=restarts,
                    gpus_per_run=gpus_per_run,
                    storage_path=storage_path,
                )
            else:
                n = min(workers or os.cpu_count() or 1, max(len(pending), 1))
                run_processes(pending, n, progress, max_failures=restarts)
        return load_experiment(root)


def _check_specs(specs: Sequence[RunSpec]) -> None:
    """Refuse, before any run starts or any file is written, a spec that only its run would
    find unbuildable (DQN on Box actions, an offline algorithm without its dataset, or with
    a dataset recorded on another env): one check per algorithm, env and settings (seeds
    build alike)."""
    from epochtrain.factory import check_spec

    seen: set[str] = set()
    offline: list[RunSpec] = []
    for spec in specs:
        key = spec.with_overrides({"seed": 0}).to_json()
        if key not in seen:
            seen.add(key)
            try:
                check_spec(spec)
            except ValueError as exc:
                raise ValueError(f"run {spec.run_id}: {exc}") from exc
            if spec.entry.kind == "offline":
                offline.append(spec)
    _check_dataset_spaces(offline)


def _check_dataset_spaces(specs: Sequence[RunSpec]) -> None:
    """Refuse an offline run whose dataset does not fit its env's spaces (observations or
    actions of another shape, Discrete values out of range): the check its trainer makes
    when it is built (:func:`~epochtrain.trainer.offline.check_dataset_spaces`), made here
    for every run before any starts, not by that run after the others have trained. Each
    dataset is read once, on the CPU, and let go before the next."""
    from epochtrain.data import ReplayBuffer
    from epochtrain.trainer.offline import check_dataset_spaces

    by_dataset: dict[str, list[RunSpec]] = {}
    for spec in specs:
        if spec.dataset is not None:  # check_spec has refused a run without one
            by_dataset.setdefault(spec.dataset, []).append(spec)
    for dataset, runs in by_dataset.items():
        if dataset.startswith("minari:"):
            buffer = ReplayBuffer.from_minari(dataset.removeprefix("minari:"))
        else:
            buffer = ReplayBuffer.load(dataset)
        for spec in runs:
            try:
                check_dataset_spaces(_policy_on_its_env(spec), buffer)
            except ValueError as exc:
                raise ValueError(f"run {spec.run_id}: {exc}") from exc
        del buffer


def _policy_on_its_env(spec: RunSpec) -> Policy[Any]:
    """The policy of ``spec`` on its env's spaces, on the CPU (only its spaces are read),
    built without touching the global random state."""
    import torch

    from epochtrain.config_ignored import keeping_ignored
    from epochtrain.envs import make_envs

    envs = make_envs(spec.env_id, 1)
    try:
        with torch.random.fork_rng(), keeping_ignored():  # check_spec has judged the config
            return spec.entry.policy_cls(
                envs.single_observation_space,
                envs.single_action_space,
                spec.config,
                device="cpu",
            )
    finally:
        envs.close()


DEFAULT_MAX_FAILURES = 3
"""Restarts of a run whose worker process died, when ``max_failures`` is not given."""

HOLD_WAIT = 20.0
"""Seconds a sweep waits for runs another live process holds before it skips them: the
workers of a sweep whose driver was just killed (Ray's actors) take seconds to die."""


def _not_held(run_dirs: list[Path]) -> list[Path]:
    """``run_dirs`` but those another live sweep runs now (skipped, each with a note)."""
    held = {d: h for d in run_dirs if (h := run_in_use(d)) is not None}
    deadline = time.monotonic() + HOLD_WAIT
    while held and time.monotonic() < deadline:
        time.sleep(0.25)
        held = {d: h for d in held if (h := run_in_use(d)) is not None}
    for run_dir, holder in held.items():
        note_in_use(run_dir, holder)
    return [d for d in run_dirs if d not in held]


def _check_ray_options(
    backend: str,
    address: str | None,
    max_failures: int | None,
    gpus_per_run: float,
    storage_path: str | os.PathLike[str] | None,
) -> None:
    if max_failures is not None and (
        isinstance(max_failures, bool) or not isinstance(max_failures, int) or max_failures < 0
    ):
        raise ValueError(f"max_failures must be an int >= 0 or None, got {max_failures!r}")
    if backend == "lockstep" and max_failures is not None:
        raise ValueError(
            "max_failures counts restarts of a run whose worker process died; "
            "backend='lockstep' runs every run in this process and restarts nothing: "
            "leave max_failures out, or use backend='processes'"
        )
    if isinstance(gpus_per_run, bool) or not isinstance(gpus_per_run, int | float):
        raise ValueError(f"gpus_per_run must be a number >= 0, got {gpus_per_run!r}")
    if not gpus_per_run >= 0:
        raise ValueError(f"gpus_per_run must be a number >= 0, got {gpus_per_run!r}")
    if address is not None and (not isinstance(address, str) or not address):
        raise ValueError(f"address must be 'auto', 'HOST:PORT' or None, got {address!r}")
    if backend != "ray":
        given = {
            "address": address is not None,
            "gpus_per_run": gpus_per_run != 0,
            "storage_path": storage_path is not None,
        }
        for name, set_ in given.items():
            if set_:
                raise ValueError(f"{name} is a setting of backend='ray', got backend={backend!r}")


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run_lockstep(run_dirs: Sequence[Path], progress: Progress) -> None:
    trainers: dict[Path, Any] = {}
    with _one_torch_thread():
        try:
            _advance_lockstep(run_dirs, trainers, progress)
        finally:  # interrupted (Ctrl-C): the unfinished runs' envs and loggers close too
            for trainer in trainers.values():
                close_envs(trainer)


def _advance_lockstep(
    run_dirs: Sequence[Path], trainers: dict[Path, Any], progress: Progress
) -> None:
    wall: dict[Path, float] = {}  # seconds, earlier sessions' included
    for run_dir in run_dirs:
        try:
            trainers[run_dir] = open_trainer(run_dir)
        except Exception as exc:
            _end_with_error(run_dir, exc, progress)
            continue
        wall[run_dir] = trainers[run_dir].state.total_time  # restored from the checkpoint
        progress.start(run_dir, trainers[run_dir].state.epoch)
    while trainers:
        for run_dir, trainer in list(trainers.items()):
            try:
                more, seconds = timed_epoch(trainer)
            except Exception as exc:
                _end_with_error(run_dir, exc, progress)
                close_envs(trainers.pop(run_dir))
                continue
            wall[run_dir] += seconds
            if more:
                progress.epoch(run_dir, trainer.state.epoch)
            else:
                with hold_run(run_dir) as ours:  # the trainer's lock, held to its close
                    if ours:
                        finished_result(run_dir, trainer, wall[run_dir])
                close_envs(trainers.pop(run_dir))
                _ended(run_dir, ours, progress, failed=False)


def _end_with_error(run_dir: Path, exc: Exception, progress: Progress) -> None:
    """Record ``run_dir`` as failed with ``exc`` under its lock (its trainer's, or taken
    for the write when the run failed to open), unless another sweep holds it."""
    if in_use_error(run_dir, exc) is None:
        with hold_run(run_dir) as ours:
            if ours:
                failed_result(run_dir, spec_of(run_dir), exc)
    else:
        ours = False
    _ended(run_dir, ours, progress, failed=True)


def _ended(run_dir: Path, ours: bool, progress: Progress, *, failed: bool) -> None:
    """``run_dir`` has ended here (``ours``: its result written) or is another sweep's."""
    if ours:
        progress.end(run_dir, failed=failed)
    else:
        note_in_use(run_dir, run_in_use(run_dir) or "it has ended since")
