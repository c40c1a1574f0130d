"""Ray Tune integration: a run as a Tune trial (:class:`EpochTrainable`), sweeps on a cluster.

Optional extra ``epochtrain[ray]``; importing this module without ray raises
:class:`~epochtrain.extras.MissingExtraError` naming ``pip install 'epochtrain[ray]'``.

- :class:`EpochTrainable` is a ``ray.tune.Trainable``: its config is a run spec
  (``{"spec": RunSpec.to_dict(), "lr": 3e-4, "trainer.batch_size": 64}``, built by
  :func:`param_space`, whose other keys are setting names), or, for the experiment runner,
  ``{"run_dir": ...}``. One Tune iteration is one epoch (``next(trainer)``); the result is
  the epoch's stats under the log tags of ``docs/logging.md``. Tune checkpoints are our
  checkpoints, so a restored trial continues exactly; a checkpoint of another trial (a
  Population Based Training clone) keeps this trial's hyper-parameters and draws fresh
  random streams.
- :func:`run_trials` runs the pending run directories of
  :func:`epochtrain.experiment.run_experiment` (``backend="ray"``), one trial each.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import socket
import threading
import time
import warnings
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from epochtrain.extras import require

require("ray", extra="ray")  # the one-line error naming the extra when ray is missing
require("ray.tune", extra="ray")  # ray without its tune extra

import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray.tune.experiment import Trial  # noqa: E402
from ray.tune.result import SHOULD_CHECKPOINT  # noqa: E402

from epochtrain.checkpoint import read_manifest  # noqa: E402
from epochtrain.checkpoint_files import LOCK_FILE  # noqa: E402
from epochtrain.errors import Terminated, raise_terminated  # noqa: E402
from epochtrain.experiment.progress import Progress  # noqa: E402
from epochtrain.experiment.runs import (  # noqa: E402
    CHECKPOINTS,
    RESULT_FILE,
    failed_result,
    finished_result,
    is_finished,
    open_trainer,
    read_json,
    spec_of,
    write_json,
)
from epochtrain.logger.base import (  # noqa: E402
    collect_stats_to_tags,
    info_stats_to_tags,
    training_stats_to_tags,
)
from epochtrain.spec import RunSpec  # noqa: E402
from epochtrain.stats import EpochStats  # noqa: E402

__all__ = [
    "EpochTrainable",
    "RayConnectionError",
    "connect",
    "epoch_result",
    "param_space",
    "run_trials",
    "spec_from_config",
]

SPEC_KEY = "spec"
RUN_DIR_KEY = "run_dir"
_CHECKPOINT = "epochtrain"  # our checkpoint inside Tune's checkpoint directory
_TRIAL_FILE = "trial.json"  # which trial wrote it, and its wall time so far


class RayConnectionError(ConnectionError):
    """No Ray cluster answers at the given address; the message names the fix."""


# --------------------------------------------------------------------------- configs
def param_space(spec: RunSpec, search_space: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Tune ``param_space`` of ``spec`` with ``search_space`` on setting names.

    ``search_space`` maps setting names (``"lr"``, ``"trainer.batch_size"``, as
    :meth:`RunSpec.with_overrides` takes them) to values or Tune domains
    (``tune.loguniform(1e-4, 1e-2)``). An unknown or ambiguous name raises ``ValueError``
    naming it and its close matches, before any trial starts.
    """
    space = dict(search_space or {})
    for name in space:
        _check_setting(spec, name)
    return {SPEC_KEY: spec.to_dict(), **space}


def _check_setting(spec: RunSpec, name: str) -> None:
    if name in (SPEC_KEY, RUN_DIR_KEY, "algo", "env_id"):
        raise ValueError(
            f"search space: {name!r} cannot be searched over (it names the run, not a setting); "
            "build one RunSpec per algo and env instead"
        )
    try:
        spec.resolve_name(name)
    except ValueError as exc:
        raise ValueError(f"search space: {exc}") from None


def spec_from_config(config: Mapping[str, Any]) -> RunSpec:
    """The :class:`RunSpec` of a Tune trial config (``config["spec"]`` plus the settings
    named by its other keys); ``ValueError`` naming an unknown setting."""
    if SPEC_KEY not in config or not isinstance(config[SPEC_KEY], Mapping):
        raise ValueError(
            f"an EpochTrainable config needs {SPEC_KEY!r}: a RunSpec dict (build the config "
            "with epochtrain.ray.param_space(spec, search_space))"
        )
    spec = RunSpec.from_dict(config[SPEC_KEY])
    overrides = {k: v for k, v in config.items() if k != SPEC_KEY}
    for name in overrides:
        _check_setting(spec, name)
    return spec.with_overrides(overrides)


def epoch_result(stats: EpochStats[Any]) -> dict[str, float]:
    """The tags of one epoch (``test/returns_stat/mean``, ``update/loss/actor``, ...)."""
    tags: dict[str, float] = {"epoch": float(stats.epoch)}
    if stats.train_collect_stat is not None:
        tags.update(collect_stats_to_tags(stats.train_collect_stat, "train"))
    if stats.test_collect_stat is not None:
        tags.update(collect_stats_to_tags(stats.test_collect_stat, "test"))
    if stats.training_stat is not None:
        tags.update(training_stats_to_tags(stats.training_stat))
    tags.update(info_stats_to_tags(stats.info_stat))
    return tags


# --------------------------------------------------------------------------- trainable
class EpochTrainable(tune.Trainable):
    """A run as a Tune trial: one ``step`` is one epoch (module docstring).

    ``torch.set_num_threads`` follows the trial's CPUs (1 by default), so a trial computes
    the floats a local backend does. In a ``"spec"`` trial the spec's log directory, if
    it has one, becomes the trial's directory and its checkpoints are Tune's; a
    ``"run_dir"`` trial writes its run directory exactly as the local backends do.
    """

    def setup(self, config: dict[str, Any]) -> None:
        """Take ``config`` (see the module docstring); the trainer is built when first used.

        Tune sets up an actor with the config of the trial it was started for, and may then
        run that trial on a cached actor and keep this one for another trial. Building here
        would open (and, from its checkpoint, rewind the logs of) a run that is going on
        elsewhere; building on first use touches only the run this actor runs.
        """
        resources = self.trial_resources
        if resources is not None:
            cpus = resources.required_resources.get("CPU", 1.0)
            torch.set_num_threads(max(1, int(cpus)))
        self._take_config(config)

    def _take_config(self, config: Mapping[str, Any]) -> None:
        self.run_dir = None if RUN_DIR_KEY not in config else Path(config[RUN_DIR_KEY])
        self._config = dict(config)
        self._trainer: Any = None
        self.wall_time = 0.0
        """Seconds this run has spent in ``next(trainer)`` (a restored trial's included)."""

    @property
    def trainer(self) -> Any:
        """The trial's trainer, built from its config on first use."""
        if self._trainer is None:
            self._trainer = self._build(self._config)
        return self._trainer

    def _build(self, config: Mapping[str, Any]) -> Any:
        from epochtrain.factory import make_trainer

        if self.run_dir is not None:
            return open_trainer(self.run_dir)
        spec = spec_from_config(config)
        logdir = None if spec.logging.logdir is None else self.logdir
        return make_trainer(
            spec.with_overrides(
                {
                    "logging.logdir": logdir,
                    "checkpoint_dir": None,  # Tune keeps the checkpoints
                    "resume_from": None,
                    "show_progress": False,
                    "verbose": False,
                }
            )
        )

    def step(self) -> dict[str, Any]:
        """One epoch; ``done`` once the run has ended. A ``run_dir`` trial writes its
        ``result.json`` at the end, or a failed one if the epoch raises."""
        trainer = self.trainer  # built outside the try: a run it cannot open is not failed
        start = time.perf_counter()
        try:
            stats = next(trainer)
        except StopIteration:  # resumed from the checkpoint of its last epoch
            stats = None
        except Exception as exc:
            if self.run_dir is None:
                raise
            failed_result(self.run_dir, spec_of(self.run_dir), exc)
            return {"done": True, "failed": 1.0}
        self.wall_time += time.perf_counter() - start
        if stats is None:
            result = {"epoch": float(self.trainer.state.epoch)}
            result.update(info_stats_to_tags(self.trainer.info_stat()))
        else:
            result = epoch_result(stats)
        done = bool(self.trainer.finished)
        if self.run_dir is None:
            return {**result, "done": done}
        if done:
            finished_result(self.run_dir, self.trainer, self.wall_time)
        # Tune checkpoints a run-directory trial as often as the spec checkpoints the run
        every = self.trainer.params.checkpoint_every
        return {**result, "done": done, SHOULD_CHECKPOINT: self.trainer.state.epoch % every == 0}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """Write our checkpoint into ``checkpoint_dir`` (Tune persists it)."""
        self.trainer.save_checkpoint(Path(checkpoint_dir) / _CHECKPOINT)
        write_json(
            Path(checkpoint_dir) / _TRIAL_FILE,
            {"trial_id": self.trial_id, "wall_time": self.wall_time},
        )

    def load_checkpoint(self, checkpoint: str | dict[str, Any] | None) -> None:
        """Restore a checkpoint of :meth:`save_checkpoint`: exactly if this trial wrote it;
        else (a PBT clone) with this trial's hyper-parameters and fresh random streams."""
        if not isinstance(checkpoint, str):
            raise TypeError(f"EpochTrainable restores checkpoint directories, got {checkpoint!r}")
        root = Path(checkpoint)
        meta = read_json(root / _TRIAL_FILE)
        if meta.get("trial_id") == self.trial_id:
            if self.run_dir is not None:  # the only trials with a checkpoint_dir
                _take_over_lock(self.run_dir / CHECKPOINTS)  # before a build loads from it
            self.trainer.load_checkpoint(root / _CHECKPOINT)
            self.wall_time = float(meta.get("wall_time", 0.0))
        else:
            self._load_donor(root / _CHECKPOINT, str(meta.get("trial_id")))

    def _load_donor(self, path: Path, donor_id: str) -> None:
        """Load another trial's checkpoint, then put back this trial's learning rates and
        draw random streams of its own (so a clone explores instead of replaying)."""
        trainer, policy = self.trainer, self.trainer.policy
        own_lrs = {n: [g["lr"] for g in o.param_groups] for n, o in policy.optimizers.items()}
        own_spec = trainer.spec
        # The donor's settings differ by the mutated hyper-parameters; this trainer was built
        # with ours, which are put back below, so its checkpoint is loaded as the donor's run.
        trainer.spec = read_manifest(path, verify_files=False).get("spec")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                trainer.load_checkpoint(path)
        finally:
            trainer.spec = own_spec
        for name, lrs in own_lrs.items():
            for group, lr in zip(policy.optimizers[name].param_groups, lrs, strict=True):
                group["lr"] = lr
        policy.set_progress(trainer.state.env_step)  # an annealed rate follows the env steps
        seed = zlib.crc32(f"{self.trial_id}/{donor_id}/{trainer.state.epoch}".encode())
        reseed(trainer, seed % 2**31)

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Take ``new_config`` in this actor (PBT, or the next run of a sweep): the trainer is
        rebuilt from it, and a donor's checkpoint Tune loads next keeps these settings."""
        self._take_config(new_config)
        return True


def _take_over_lock(checkpoint_dir: Path) -> None:
    """Drop the writer lock of this trial's previous worker when it ran on another host.

    Tune restores a trial only once its previous actor is dead, but the lock can test
    only pids of its own host; a lock of this host is left to it (stale if its pid died).
    """
    lock = checkpoint_dir / LOCK_FILE
    try:
        record = json.loads(lock.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(record, dict) and record.get("host") != socket.gethostname():
        lock.unlink(missing_ok=True)


def reseed(trainer: Any, seed: int) -> None:
    """Give ``trainer`` fresh random streams from ``seed``: python, numpy and torch (the
    trainer's own), and its training envs' generators and action space (when they are in
    this process), without resetting the episodes under way."""
    trainer._rng_state = {  # the streams rng_scope swaps in at the next epoch
        "python": random.Random(seed).getstate(),
        "numpy": np.random.RandomState(seed).get_state(),
        "torch": torch.Generator().manual_seed(seed).get_state(),
    }
    if trainer.kind == "offline":
        return
    envs = trainer.train_collector.env
    envs.action_space.seed(seed)
    children = np.random.SeedSequence(seed).spawn(len(getattr(envs, "envs", [])))
    for sub_env, child in zip(getattr(envs, "envs", []), children, strict=True):
        sub_env.np_random = np.random.default_rng(child)


# --------------------------------------------------------------------------- clusters
@contextlib.contextmanager
def connect(address: str | None) -> Iterator[None]:
    """Use the Ray this process is connected to, or connect to ``address`` (``None``: start
    a local Ray, ``"auto"``: the cluster of this node, ``"host:port"``: its head) for the
    block and disconnect after. ``RayConnectionError`` names the fix when none answers (a
    ``host:port`` is checked even when this process is already connected)."""
    if address not in (None, "auto", "local"):
        _check_reachable(address)
    if ray.is_initialized():
        yield
        return
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
    try:
        yield
    finally:
        ray.shutdown()


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

    ``ray.init`` replaces the CLI's SIGTERM handler with Ray's (a stack, exit status 1,
    trials cut mid-epoch); this one is set after it. A second SIGTERM, or one before Tune
    set its handler, raises :class:`~epochtrain.errors.Terminated` at once.
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
    for index in range(len(grid)):
        result = grid[index]
        config = result.config or {}
        run_dir = names[str(config[RUN_DIR_KEY])]
        if result.error is not None and not is_finished(run_dir):
            failed_result(run_dir, spec_of(run_dir), result.error)
        progress.end(run_dir, failed=not is_finished(run_dir))
    stopped = [d.name for d in run_dirs if not (d / RESULT_FILE).exists()]
    if stopped:  # neither finished nor failed: Tune was stopped (Ctrl-C) before they ended
        interrupt = Terminated if terminated else KeyboardInterrupt
        raise interrupt(f"Ray Tune stopped before these runs ended: {', '.join(stopped)}")
