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
- The experiment runner's ``backend="ray"`` runs a sweep's runs as these trials:
  :mod:`epochtrain.experiment.ray_backend`.
"""

from __future__ import annotations

import json
import random
import socket
import time
import warnings
import zlib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import torch

from epochtrain.extras import require

require("ray", extra="ray")  # the one-line error naming the extra when ray is missing
require("ray.tune", extra="ray")  # ray without its tune extra

from ray import tune  # noqa: E402
from ray.tune.result import SHOULD_CHECKPOINT  # noqa: E402

from epochtrain.checkpoint import read_manifest  # noqa: E402
from epochtrain.checkpoint_files import LOCK_FILE  # noqa: E402
from epochtrain.config_ignored import keeping_ignored  # noqa: E402
from epochtrain.envs import seed_spaces  # noqa: E402
from epochtrain.experiment.runs import (  # noqa: E402
    CHECKPOINTS,
    close_envs,
    failed_result,
    finished_result,
    hold_run,
    in_use_error,
    note_in_use,
    open_trainer,
    read_json,
    run_in_use,
    spec_of,
    write_json,
)
from epochtrain.logger.tags import (  # noqa: E402
    collect_stats_to_tags,
    info_stats_to_tags,
    training_stats_to_tags,
)
from epochtrain.spec import RunSpec  # noqa: E402
from epochtrain.spec_data import warn_ignored  # noqa: E402
from epochtrain.stats import EpochStats  # noqa: E402
from epochtrain.trainer.safety import last_checkpoint_text  # noqa: E402

__all__ = [
    "EpochTrainable",
    "epoch_result",
    "param_space",
    "spec_from_config",
    "stored_checkpoint_text",
]

SPEC_KEY = "spec"
RUN_DIR_KEY = "run_dir"
_CHECKPOINT = "epochtrain"  # our checkpoint inside Tune's checkpoint directory
_PBT_SPACES = 0x7062  # a PBT clone's stream of seed_spaces (the trainers' are others)
_TRIAL_FILE = "trial.json"  # which trial wrote it, and its wall time so far


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
    # a search space crosses settings (auto_alpha and alpha_lr), and a PBT mutation changes
    # one alone: a combination that leaves a setting ignored is a warning, not a failed trial
    with keeping_ignored():
        changed = spec.with_overrides(overrides)
    warn_ignored(changed, "search space: ")
    return changed


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
        self.cleanup()  # a reused actor's previous run: its envs, loggers and lock
        self.run_dir = None if RUN_DIR_KEY not in config else Path(config[RUN_DIR_KEY])
        self._config = dict(config)
        self._trainer: Any = None
        self._ended = False  # a run_dir trial that finished, failed or is another's: no save
        self._begun = False  # step has run an epoch of this config
        self.wall_time = 0.0
        """Seconds this run has spent in ``next(trainer)`` (a restored trial's included)."""
        self._remote_checkpoint: str | None = None  # where Tune stored the last, if remote

    def cleanup(self) -> None:
        """Close the trainer, if built (its envs, then its loggers; a run directory's lock is
        released): Tune calls this when the trial stops, and a reused actor before its next
        trial."""
        trainer, self._trainer = getattr(self, "_trainer", None), None
        if trainer is not None:
            close_envs(trainer)

    @property
    def trainer(self) -> Any:
        """The trial's trainer, built from its config on first use; a run directory's
        trainer resumed from its own checkpoint counts its earlier sessions' time."""
        if self._trainer is None:
            self._trainer = self._build(self._config)
            if self.run_dir is not None:
                self.wall_time = float(self._trainer.state.total_time)
        return self._trainer

    def _build(self, config: Mapping[str, Any]) -> Any:
        from epochtrain.factory import UnusedSettingWarning, make_trainer

        if self.run_dir is not None:
            return open_trainer(self.run_dir)
        spec = spec_from_config(config)
        logdir = None if spec.logging.logdir is None else self.logdir
        spec = spec.with_overrides(
            {
                "logging.logdir": logdir,
                "checkpoint_dir": None,  # Tune keeps the checkpoints (its keep_last unused)
                "resume_from": None,
                "show_progress": False,
                "verbose": False,
            }
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnusedSettingWarning)
            return make_trainer(spec)

    def step(self) -> dict[str, Any]:
        """One epoch; ``done`` once the run has ended. A ``run_dir`` trial writes its
        ``result.json`` at the end, or a failed one if the epoch raises."""
        try:  # a run it cannot open is not failed (Tune retries), unless another sweep's
            trainer = self.trainer
        except Exception as exc:
            if self.run_dir is None or in_use_error(self.run_dir, exc) is None:
                raise
            return self._end(exc)
        if self.run_dir is None and trainer.state.epoch == 0 and not self._begun:
            # a trial (re)started from scratch in its directory: a failed attempt's records
            # there are dropped (a restored trial's epoch is > 0, its records are kept)
            trainer.logger.load_state_dict(trainer.logger.state_dict())
        self._begun = True
        start = time.perf_counter()
        try:
            stats = next(trainer)
        except StopIteration:  # resumed from the checkpoint of its last epoch
            stats = None
        except Exception as exc:
            if self.run_dir is None:
                self._name_remote_checkpoint(exc)
                raise
            return self._end(exc)
        self.wall_time += time.perf_counter() - start
        if stats is None:
            result = {"epoch": float(self.trainer.state.epoch)}
            result.update(info_stats_to_tags(self.trainer.info_stat()))
        else:
            result = epoch_result(stats)
        done = bool(self.trainer.finished)
        if self.run_dir is None:
            return {**result, "done": done}
        if done:  # the run's lock goes with its result, as with the local backends: not an
            # RPC later, when Tune stops the trial (a driver killed meanwhile left it behind)
            finished_result(self.run_dir, self.trainer, self.wall_time)
            self._ended = True  # its run directory holds everything: nothing left to save
            self.cleanup()
            return {**result, "done": True, SHOULD_CHECKPOINT: False}
        # Tune checkpoints a run-directory trial as often as the spec checkpoints the run
        every = self.trainer.params.checkpoint_every
        return {**result, "done": done, SHOULD_CHECKPOINT: self.trainer.state.epoch % every == 0}

    def _end(self, exc: Exception) -> dict[str, Any]:
        """End a ``run_dir`` trial whose run raised ``exc``: in use by another sweep (noted,
        not failed, not ours), or failed (its ``result.json`` says why). Tune is told the
        trial is done, not that it errored: it would retry the run, and a retry's save of
        the broken trainer would replace the error with its own."""
        assert self.run_dir is not None
        self._ended = True
        holder = in_use_error(self.run_dir, exc)
        if holder is not None:
            note_in_use(self.run_dir, holder)
            return {"done": True, "failed": 0.0}
        with hold_run(self.run_dir) as ours:  # its trainer's lock, or taken for the write
            if ours:
                failed_result(self.run_dir, spec_of(self.run_dir), exc)
        if not ours:  # another sweep took the run over since (a run that failed to open)
            note_in_use(self.run_dir, run_in_use(self.run_dir) or "it has ended since")
        return {"done": True, "failed": float(ours)}

    def save(self, checkpoint_dir: str | None = None) -> Any:
        """Tune's save: :meth:`save_checkpoint` into a directory Tune then copies to its
        storage and deletes. The trainer's last good checkpoint, which its error messages
        name, stays the run directory's (``run_dir/checkpoints/epoch_N``, written by the
        same epoch), or becomes Tune's stored copy: never that deleted directory."""
        kept = None if self._trainer is None else self._trainer.last_checkpoint
        try:
            saved = super().save(checkpoint_dir)
        except BaseException:
            if self._trainer is not None:
                self._trainer.last_checkpoint = kept
            raise
        if self._trainer is not None and not self._ended:
            if kept is not None and self.run_dir is not None:
                self._trainer.last_checkpoint = kept  # the run directory's own
            else:
                self._follow_stored(saved.checkpoint)
        return saved

    def restore(self, checkpoint_path: Any) -> None:
        """Tune's restore (``checkpoint_path`` as Tune passes it: a ``save`` result, a
        ``ray.tune.Checkpoint`` or a directory). A trainer that then names a checkpoint
        that is gone (Tune's download of a remote one, deleted once loaded) names Tune's
        stored one instead (:meth:`save`)."""
        super().restore(checkpoint_path)
        last = None if self._trainer is None else self._trainer.last_checkpoint
        if self._ended or last is None or last.exists():  # its own, or a local stored copy
            return
        if isinstance(checkpoint_path, str):
            checkpoint: Any = tune.Checkpoint.from_directory(checkpoint_path)
        else:
            checkpoint = getattr(checkpoint_path, "checkpoint", checkpoint_path)
        self._follow_stored(checkpoint)

    def _follow_stored(self, checkpoint: Any) -> None:
        """Make Tune's stored ``checkpoint`` the trainer's last: its path when it is on this
        node's file system, else none there, and its remote location for the error of a
        failed trial (:meth:`_name_remote_checkpoint`)."""
        stored = _stored_copy(checkpoint)
        self._trainer.last_checkpoint = stored
        self._remote_checkpoint = None if stored is not None else stored_checkpoint_text(checkpoint)

    def _name_remote_checkpoint(self, exc: Exception) -> None:
        """Name the remote stored checkpoint in ``exc``, the error of a ``"spec"`` trial, in
        place of the trainer's "no checkpoint was written or loaded yet" (it knows only
        checkpoints on this node), or in a note when the message does not say that."""
        trainer, remote = self._trainer, self._remote_checkpoint
        if trainer is None or remote is None or trainer.last_checkpoint is not None:
            return
        nothing = last_checkpoint_text(trainer)
        if len(exc.args) == 1 and isinstance(exc.args[0], str) and nothing in exc.args[0]:
            exc.args = (exc.args[0].replace(nothing, remote),)
            if remote in str(exc):
                return
        exc.add_note(f"epochtrain: {remote}")

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """Write our checkpoint into ``checkpoint_dir`` (Tune persists it); nothing for a
        trial that ended without a run to save (:meth:`_end`)."""
        if self._ended:
            return
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
            trainer = self.trainer  # a run directory's: resumed from its latest checkpoint
            own, own_epoch = trainer.last_checkpoint, trainer.state.epoch
            trainer.load_checkpoint(root / _CHECKPOINT)
            if own is not None and own_epoch == trainer.state.epoch:
                trainer.last_checkpoint = own  # the same epoch's, where a user finds it
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


def _stored_copy(checkpoint: Any) -> Path | None:
    """Our checkpoint in Tune's stored copy of a trial checkpoint (``ray.tune.Checkpoint``),
    or ``None`` when it is not on this node's file system (an ``s3://`` storage_path)."""
    if getattr(checkpoint.filesystem, "type_name", None) != "local":
        return None
    return Path(checkpoint.path) / _CHECKPOINT


_URI_SCHEMES = {"s3": "s3", "gcs": "gs", "hdfs": "hdfs", "abfs": "abfs"}
"""URI scheme of each pyarrow file system ``type_name`` a Tune ``storage_path`` resolves to."""


def _uri(filesystem: Any, path: str) -> str | None:
    """``path`` on the pyarrow ``filesystem`` as a URI (``s3://bucket/key``), ``None`` for
    a file system of no known scheme."""
    scheme = _URI_SCHEMES.get(str(getattr(filesystem, "type_name", "")))
    if scheme is not None:
        return f"{scheme}://{path.lstrip('/')}"
    fsspec_fs = getattr(getattr(filesystem, "handler", None), "fs", None)  # PyFileSystem
    unstrip = getattr(fsspec_fs, "unstrip_protocol", None)
    return str(unstrip(path)) if callable(unstrip) else None


def stored_checkpoint_text(checkpoint: Any) -> str:
    """What the error of a failed ``"spec"`` trial says of its last checkpoint when Tune
    stored it off this node (a ``ray.tune.Checkpoint`` on an ``s3://``, ``gs://``, ...
    ``storage_path``): where it is, and the two ways to resume from it."""
    filesystem, path = checkpoint.filesystem, str(checkpoint.path).rstrip("/")
    ours = f"{path}/{_CHECKPOINT}"
    parents = PurePosixPath(path).parents  # <experiment>/<trial>/checkpoint_00000N
    experiment_path = parents[1] if len(parents) > 1 else PurePosixPath(path)
    uri, tunes = _uri(filesystem, ours), _uri(filesystem, path)
    experiment = _uri(filesystem, str(experiment_path))
    if uri is None or tunes is None or experiment is None:
        kind = getattr(filesystem, "type_name", type(filesystem).__name__)
        return (
            f"the last good checkpoint is not on this node: it is {ours!r} on the {kind!r} file "
            "system of Tune's storage_path; copy that directory to this node and pass the copy "
            "as resume_from, or resume the trial with ray.tune.Tuner.restore(<storage_path>/"
            f"{experiment_path.name}, EpochTrainable, resume_errored=True)"
        )
    return (
        f"the last good checkpoint is not on this node: it is {uri!r} in Tune's storage_path; "
        f"copy it here (pyarrow.fs.copy_files({tunes!r}, 'checkpoint')) and pass "
        f"resume_from='checkpoint/{_CHECKPOINT}', or resume the trial with "
        f"ray.tune.Tuner.restore({experiment!r}, EpochTrainable, resume_errored=True)"
    )


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
    this process), with their spaces, without resetting the episodes under way."""
    trainer._rng_state = {  # the streams rng_scope swaps in at the next epoch
        "python": random.Random(seed).getstate(),
        "numpy": np.random.RandomState(seed).get_state(),
        "torch": torch.Generator().manual_seed(seed).get_state(),
    }
    if trainer.kind == "offline":
        return
    envs = trainer.train_collector.env
    seed_spaces(envs, seed, stream=(_PBT_SPACES,))  # the clone's spaces draw anew too
    envs.action_space.seed(seed)
    children = np.random.SeedSequence(seed).spawn(len(getattr(envs, "envs", [])))
    for sub_env, child in zip(getattr(envs, "envs", []), children, strict=True):
        sub_env.np_random = np.random.default_rng(child)
