"""The experiment runner's Ray backend: a sweep's runs as Tune trials, on a local Ray or a
cluster.

:func:`run_trials` runs the pending run directories of
:func:`epochtrain.experiment.run_experiment` (``backend="ray"``), one
:class:`~epochtrain.ray.EpochTrainable` trial each; :func:`connect` starts or joins the Ray
they run on. Optional extra ``epochtrain[ray]``, as :mod:`epochtrain.ray`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, cast

from epochtrain.extras import require

require("ray", extra="ray")  # the one-line error naming the extra when ray is missing
require("ray.tune", extra="ray")

import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray.tune.experiment import Trial  # noqa: E402

from epochtrain.errors import Terminated, raise_terminated  # noqa: E402
from epochtrain.experiment.progress import Progress  # noqa: E402
from epochtrain.experiment.runs import RESULT_FILE, failed_result, is_finished, spec_of  # noqa: E402
from epochtrain.ray import RUN_DIR_KEY, EpochTrainable  # noqa: E402

__all__ = ["RayConnectionError", "connect", "run_trials"]


class RayConnectionError(ConnectionError):
    """No Ray cluster answers at the given address; the message names the fix."""


@contextlib.contextmanager
def connect(address: str | None, *, gpus_per_run: float = 0.0) -> Iterator[None]:
    """Use the Ray this process is connected to, or connect to ``address`` (``None``: start
    a local Ray, ``"auto"``: the cluster of this node, ``"host:port"``: its head) for the
    block and disconnect after. ``RayConnectionError`` names the fix when none answers (a
    ``host:port`` is checked even when this process is already connected); ``ValueError``
    when the cluster has fewer GPUs than ``gpus_per_run``, before the block runs."""
    if address not in (None, "auto", "local"):
        _check_reachable(address)
    if ray.is_initialized():
        _check_gpus(gpus_per_run)
        yield
        return
    with _sigterm_kept():
        try:
            ray.init(
                address=address,
                include_dashboard=False,
                logging_level=logging.WARNING,
                log_to_driver=False,  # a trial's output is its run directory
            )
        except ConnectionError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RayConnectionError(_unreachable(address, first)) from None
        except SystemExit as exc:  # Ray's SIGTERM handler, set first thing in ray.init
            if exc.code != signal.SIGTERM:
                raise
            with _sigterm_deferred():
                ray.shutdown()  # what ray.init had started
            raise Terminated(f"signal {signal.SIGTERM}") from None
    try:
        _check_gpus(gpus_per_run)
        yield
    finally:
        with _sigterm_deferred():  # the local Ray stops whole, then the SIGTERM acts
            ray.shutdown()


@contextlib.contextmanager
def _sigterm_kept() -> Iterator[None]:
    """Put the SIGTERM handler of before the block back after it (main thread only).

    ``ray.init`` sets Ray's own (``sys.exit``, after a C++ stack dump), which would stay for
    the rest of the process: a SIGTERM outside Tune's run (:func:`_sigterm_stops_tune`)
    then ended the sweep with exit status 15, or an abort, instead of the CLI's
    ``terminated`` line and 143.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if previous is not None:  # None: set outside Python, cannot be put back
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _sigterm_deferred() -> Iterator[None]:
    """Hold a SIGTERM received during the block (``ray.shutdown``, which a SIGTERM would cut
    half-way, leaving Ray's processes) until after it, then deliver it to the handler of
    before the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        if received:
            signal.raise_signal(signal.SIGTERM)


_QUIET_TUNE = {
    # the old console reporter honours verbose=0; the new one prints its configuration table
    "RAY_AIR_NEW_OUTPUT": "0",
    # one Tune checkpoint per epoch is the design (num_to_keep=1), not a bottleneck to warn of
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
}


@contextlib.contextmanager
def _quiet_tune() -> Iterator[None]:
    """Keep Tune's console tables and snapshot warnings out of a sweep's output for the
    block (the runner prints its own progress); a variable the user set is left alone."""
    added = [name for name in _QUIET_TUNE if name not in os.environ]
    os.environ.update({name: _QUIET_TUNE[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


@contextlib.contextmanager
def _sigterm_stops_tune() -> Iterator[list[int]]:
    """SIGTERM during the block stops Tune as Ctrl-C does, through the SIGINT handler Tune
    sets while it runs; the list it yields holds the signals received.

    Outside the block the CLI's handler raises :class:`~epochtrain.errors.Terminated`
    (:func:`connect` puts it back after ``ray.init`` set Ray's own); inside, a second
    SIGTERM, or one before Tune set its handler, raises it at once.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def stop_tune(signum: int, frame: Any) -> None:
        tune_handler = signal.getsignal(signal.SIGINT)
        first = not received
        received.append(signum)
        if first and callable(tune_handler) and tune_handler is not signal.default_int_handler:
            tune_handler(signal.SIGINT, frame)
        else:
            raise_terminated(signum, frame)

    previous = signal.signal(signal.SIGTERM, stop_tune)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)


def _unreachable(address: str | None, why: str) -> str:
    return (
        f"cannot connect to a Ray cluster at address={address!r} ({why}): start one with "
        "`ray start --head` (then --address auto on that node, or HOST:6379 from another), "
        "or leave --address out to start a local Ray"
    )


def _check_gpus(gpus_per_run: float) -> None:
    """Refuse ``gpus_per_run`` more than the cluster's GPUs: Tune would wait for them
    forever, repeating the autoscaler's "No available node types can fulfill"."""
    resources = cast(Callable[[], dict[str, float]], ray.cluster_resources)  # untyped in ray
    gpus = float(resources().get("GPU", 0.0))
    if gpus_per_run > gpus:
        raise ValueError(
            f"gpus_per_run={gpus_per_run:g} but the Ray cluster has {gpus:g} GPUs, so no trial "
            "could start: set gpus_per_run=0 (--gpus-per-run 0), or start the GPU nodes first"
        )


def _check_reachable(address: str) -> None:
    """Fail fast, in one line, when nothing listens at ``address`` (``[ray://]host:port``)."""
    hostport = address.removeprefix("ray://")
    host, colon, port = hostport.rpartition(":")
    if not colon or not port.isdigit() or not host:
        raise RayConnectionError(
            _unreachable(address, "write it as HOST:PORT, e.g. 10.0.0.1:6379, or auto")
        )
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise RayConnectionError(_unreachable(address, exc.strerror or str(exc))) from None


def _run_id(trial: Trial) -> str:
    return Path(str(trial.config[RUN_DIR_KEY])).name


def _result_run_dir(
    result: tune.Result, names: Mapping[str, Path], by_id: Mapping[str, Path]
) -> Path | None:
    """The run directory of a trial's ``result``, ``None`` for a trial of no run here.

    A trial stopped (Ctrl-C) or failed before its first result has no config in its result;
    its Tune directory is then named by the run id (``trial_dirname_creator``)."""
    config = result.config or {}
    if RUN_DIR_KEY in config:
        return names.get(str(config[RUN_DIR_KEY]))
    return by_id.get(PurePosixPath(str(result.path)).name)


class _ProgressCallback(tune.Callback):
    """Feeds the runner's progress bars from the driver's view of the trials."""

    def __init__(self, progress: Progress, run_dirs: Mapping[str, Path]) -> None:
        self.progress = progress
        self.run_dirs = run_dirs  # the run directory of each trial's (resolved) run_dir
        self.started: set[Path] = set()

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        run_dir = self.run_dirs[str(trial.config[RUN_DIR_KEY])]
        epoch = int(result.get("epoch", 0))
        if run_dir not in self.started:
            self.started.add(run_dir)
            self.progress.start(run_dir, max(epoch - 1, 0))
        self.progress.epoch(run_dir, epoch)


def _record_results(
    results: Sequence[tune.Result],
    run_dirs: Sequence[Path],
    names: Mapping[str, Path],
    progress: Progress,
) -> None:
    """Write the ``result.json`` of each trial Tune recorded as failed, and end the
    progress line of each run that finished or failed. A run Tune stopped (Ctrl-C,
    SIGTERM) has neither and gets no line, as with the other backends: the driver's
    ``interrupted`` line names the command that continues it."""
    by_id = {d.name: d for d in run_dirs}
    for result in results:
        run_dir = _result_run_dir(result, names, by_id)
        if run_dir is None:
            continue
        if result.error is not None and not is_finished(run_dir):
            failed_result(run_dir, spec_of(run_dir), result.error)
        if (run_dir / RESULT_FILE).exists():
            progress.end(run_dir, failed=not is_finished(run_dir))


def run_trials(
    run_dirs: Sequence[Path],
    root: Path,
    progress: Progress,
    *,
    address: str | None = None,
    workers: int | None = None,
    max_failures: int = 3,
    gpus_per_run: float = 0.0,
    storage_path: str | os.PathLike[str] | None = None,
) -> None:
    """Run each of ``run_dirs`` (prepared by the experiment runner) as one Tune trial.

    A trial takes 1 CPU and ``gpus_per_run`` GPUs; at most ``workers`` run at once
    (``None``: as many as the cluster's CPUs allow). A trial whose worker dies is restored
    from its last checkpoint up to ``max_failures`` times, then recorded as failed. Tune's
    own files go to ``storage_path`` (default ``root/.tune``; on a cluster, a directory
    every node mounts).
    """
    if not run_dirs:
        return
    if storage_path is None:
        storage = os.fspath((root / ".tune").resolve())
    elif "://" in os.fspath(storage_path):  # a URI Tune syncs to (s3://, gs://, ...)
        storage = os.fspath(storage_path)
    else:
        storage = os.fspath(Path(storage_path).resolve())
    trainable = tune.with_resources(EpochTrainable, {"cpu": 1, "gpu": gpus_per_run})
    names = {os.fspath(d.resolve()): d for d in run_dirs}
    with connect(address):
        _check_gpus(gpus_per_run)
        tuner = tune.Tuner(
            trainable,
            param_space={RUN_DIR_KEY: tune.grid_search(list(names))},
            tune_config=tune.TuneConfig(
                max_concurrent_trials=workers,
                reuse_actors=True,  # a worker runs run after run without new imports
                trial_name_creator=_run_id,
                trial_dirname_creator=_run_id,
            ),
            run_config=tune.RunConfig(
                name=f"sweep-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
                storage_path=storage,
                failure_config=tune.FailureConfig(max_failures=max_failures),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),  # at SHOULD_CHECKPOINT
                callbacks=[_ProgressCallback(progress, names)],
                verbose=0,
            ),
        )
        with _quiet_tune(), _sigterm_stops_tune() as terminated:
            grid = tuner.fit()
    _record_results([grid[index] for index in range(len(grid))], run_dirs, names, progress)
    stopped = [d.name for d in run_dirs if not (d / RESULT_FILE).exists()]
    if stopped:  # neither finished nor failed: Tune was stopped (Ctrl-C) before they ended
        interrupt = Terminated if terminated else KeyboardInterrupt
        raise interrupt(f"Ray Tune stopped before these runs ended: {', '.join(stopped)}")
