"""Trainer parameters as data: one frozen dataclass per trainer kind, validated on build.

``TrainerParams`` holds what every trainer shares (epochs, tests, seed, checkpoints);
``OnlineParams`` adds the collect step; ``OnpolicyParams``, ``OffpolicyParams`` and
``OfflineParams`` add each kind's update step. Units are in the names' docstrings:
``step_per_epoch`` counts env steps online and gradient steps offline.

The objects a trainer works on (policy, collectors, logger, hooks, callbacks) are not data;
they are the trainer constructor's other keyword arguments, checked with the params by
:func:`~epochtrain.trainer.checks.check_arguments` before any work starts.

A checkpoint stores the settings of the run that wrote it (:func:`settings_of`, its
directories absolute); a resume compares them with the resuming trainer's
(:func:`compare_settings`), a setting the checkpoint predates counting as unchanged while
it is at its default (:func:`setting_defaults_of`), and a directory it recorded relative
(an older checkpoint) as unchanged while it names the same one (:func:`match_saved_paths`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from epochtrain.config import Config, param
from epochtrain.config_ignored import IgnoredSetting

if TYPE_CHECKING:
    from epochtrain.trainer.base import BaseTrainer

__all__ = [
    "PATH_SETTINGS",
    "SAFE_TO_CHANGE",
    "OfflineParams",
    "OffpolicyParams",
    "OnlineParams",
    "OnpolicyParams",
    "SettingsMismatchError",
    "TrainerParams",
    "compare_settings",
    "match_saved_paths",
    "setting_defaults_of",
    "settings_of",
]

NonFinitePolicy = Literal["raise", "stop", "skip"]


@dataclass(frozen=True, kw_only=True)
class TrainerParams(Config):
    """Parameters every trainer shares."""

    max_epoch: int = param(10, ge=1)
    """Epochs to run (the run may stop earlier through stop_fn or a hook)."""
    step_per_epoch: int = param(5000, ge=1)
    """Length of an epoch: env steps (online trainers) or gradient steps (offline)."""
    episode_per_test: int = param(10, ge=1)
    """Deterministic test episodes at the end of each epoch."""
    test_in_train: bool = False
    """When the training episodes already satisfy stop_fn, test at once (may stop early)."""
    test_before_train: bool = False
    """Run a test step before the first epoch."""
    seed: int = param(0, ge=0, le=2**32 - 1)
    """Seed of the run's random streams (python, numpy, torch) and of the envs, from the
    trainer's construction on: a policy built by hand drew its initial weights before, from
    the global torch generator (call ``torch.manual_seed`` first; ``make_trainer`` does)."""
    show_progress: bool = True
    """Show the run and epoch progress bars (in a terminal or notebook only, not when stderr
    is redirected to a file)."""
    verbose: bool = False
    """Print one line per epoch."""
    checkpoint_dir: str | None = None
    """Write a checkpoint here every checkpoint_every epochs and at the end (None: never)."""
    checkpoint_every: int = param(1, ge=1)
    """Epochs between two periodic checkpoints."""
    keep_last: int | None = param(3, ge=1)
    """Periodic checkpoints to keep (None: all)."""
    keep_best: bool = True
    """Also keep the checkpoint of the best test return."""
    resume_from: str | None = None
    """Restore this checkpoint (or the latest one in this checkpoint_dir) before epoch 1."""
    on_nonfinite: NonFinitePolicy = "raise"
    """What a non-finite loss or env value does: raise an error, stop the run, or skip the
    gradient step."""


@dataclass(frozen=True, kw_only=True)
class OnlineParams(TrainerParams):
    """Parameters of the trainers that collect from envs: one collect step's size."""

    step_per_collect: int | None = param(None, ge=1)
    """Env steps per collect step (set exactly one of this and episode_per_collect)."""
    episode_per_collect: int | None = param(None, ge=1)
    """Episodes per collect step (set step_per_collect=None to use it)."""

    def check(self) -> None:
        """Exactly one of ``step_per_collect`` and ``episode_per_collect``."""
        super().check()
        if (self.step_per_collect is None) == (self.episode_per_collect is None):
            raise ValueError(
                f"{type(self).__name__}: give exactly one of step_per_collect and "
                f"episode_per_collect, got step_per_collect={self.step_per_collect!r}, "
                f"episode_per_collect={self.episode_per_collect!r}"
            )


@dataclass(frozen=True, kw_only=True)
class OnpolicyParams(OnlineParams):
    """On-policy update step: ``repeat_per_collect`` passes over each fresh rollout in
    minibatches of ``batch_size`` (the PPO paper's 2048 steps, 10 passes, minibatch 64)."""

    step_per_collect: int | None = param(2048, ge=1)
    """Env steps per collect step (set exactly one of this and episode_per_collect)."""
    repeat_per_collect: int = param(10, ge=1)
    """Passes over each rollout."""
    batch_size: int | None = param(64, ge=1)
    """Transitions per minibatch (None: the whole rollout in one gradient step)."""


@dataclass(frozen=True, kw_only=True)
class OffpolicyParams(OnlineParams):
    """Off-policy update step: ``update_per_step`` gradient steps per collected env step,
    each on a minibatch of ``batch_size`` sampled from the replay buffer."""

    step_per_collect: int | None = param(1, ge=1)
    """Env steps per collect step (set exactly one of this and episode_per_collect)."""
    update_per_step: float = param(1.0, gt=0)
    """Gradient steps per collected env step."""
    batch_size: int = param(256, ge=1)
    """Transitions per sampled minibatch."""
    warmup_steps: int = param(0, ge=0)
    """Env steps collected with random actions before the first epoch."""
    async_collection: bool = False
    """Collect the next collect step in a background thread while the gradient steps run:
    it acts with weights one update step old and its own random stream (reproducible
    given the seed; docs/async-collection.md)."""


@dataclass(frozen=True, kw_only=True)
class OfflineParams(TrainerParams):
    """Offline training step: one gradient step on a minibatch sampled from the dataset."""

    step_per_epoch: int = param(1000, ge=1)
    """Gradient steps per epoch."""
    batch_size: int = param(256, ge=1)
    """Transitions per sampled minibatch."""

    def ignored_settings(self) -> list[IgnoredSetting]:
        """``test_in_train``: an offline trainer runs no training episodes whose returns
        could call for an early test (refused in code, a warning in a saved spec)."""
        return super().ignored_settings() + self.ignored_if_set(
            "test_in_train",
            "an offline trainer runs no training episodes whose returns could call for a test",
            "drop test_in_train",
        )


SAFE_TO_CHANGE = frozenset(
    {
        "max_epoch",
        "episode_per_test",
        "show_progress",
        "verbose",
        "checkpoint_dir",
        "checkpoint_every",
        "keep_last",
        "keep_best",
        "resume_from",
        "on_nonfinite",
    }
)
"""Trainer parameters a resumed run may change: they do not alter what was computed."""


SAFE_OUTSIDE_TRAINER = frozenset(
    {"logging.logdir", "logging.loggers", "device", "stop_at", "dataset", "num_test_envs"}
)
"""Run-spec settings outside ``trainer`` that a resumed run may change."""


_NOT_WORTH_A_WARNING = frozenset(
    {"trainer.resume_from", "trainer.show_progress", "trainer.verbose"}
)
"""Settings a resume always or harmlessly changes: not compared at all."""


class SettingsMismatchError(ValueError):
    """A checkpoint's run settings differ from those of the trainer it is loaded into;
    ``settings`` names the differing ones (``"trainer.step_per_epoch"``, ``"config.lr"``)
    and ``detail`` lists them with both values (``"trainer.step_per_epoch: saved 512, now
    1024"``)."""

    def __init__(self, message: str, settings: Sequence[str] = (), detail: str = "") -> None:
        super().__init__(message)
        self.settings: tuple[str, ...] = tuple(settings)
        self.detail = detail


PATH_SETTINGS = ("logging.logdir", "trainer.checkpoint_dir")
"""Settings that name a directory: :func:`settings_of` gives them as absolute paths, so a
checkpoint records the directory whatever the working directory was, and a resume compares
the directories they name (:func:`match_saved_paths` for older, relative records)."""


def settings_of(trainer: BaseTrainer[Any]) -> dict[str, Any]:
    """``trainer``'s :meth:`~BaseTrainer.resume_settings`: its spec, or else its params, the
    policy's config, the buffer kind and the env id; :data:`PATH_SETTINGS` made absolute."""
    if trainer.spec is not None:
        return _absolute_paths(dict(trainer.spec))
    envs = [collector.env for _, collector in trainer._collectors()]
    env_spec = getattr(envs[0], "spec", None) if envs else None
    return _absolute_paths(
        {
            "trainer": trainer.params.to_dict(),
            "config": trainer.policy.config.to_dict(),
            "buffer": {"kind": trainer._buffer_kind()},
            "env_id": None if env_spec is None else env_spec.id,
        }
    )


def _absolute_paths(settings: dict[str, Any]) -> dict[str, Any]:
    for key in PATH_SETTINGS:
        value = _setting(settings, key)
        if isinstance(value, str) and value:
            settings = _replaced(settings, key, os.fspath(Path(value).resolve()))
    return settings


def match_saved_paths(
    own: Mapping[str, Any], saved: Mapping[str, Any], location: Path
) -> dict[str, Any]:
    """``saved`` (a checkpoint's settings) with each relative :data:`PATH_SETTINGS` value
    replaced by ``own``'s when both name the same directory.

    A checkpoint written before these were recorded absolute holds them relative to a
    working directory it did not record. They name ``own``'s directory when they resolve
    to it from the current working directory, or from the run's own, inferred from
    ``location`` (where the checkpoint is now, the directory holding it): the saved
    relative ``checkpoint_dir`` must be the trailing part of ``location``.
    """
    bases = [Path.cwd()]
    old_cwd = _run_cwd(_setting(saved, "trainer.checkpoint_dir"), location)
    if old_cwd is not None:
        bases.append(old_cwd)
    out = dict(saved)
    for key in PATH_SETTINGS:
        then, now = _setting(saved, key), _setting(own, key)
        if not (isinstance(then, str) and then and isinstance(now, str) and now):
            continue
        if not Path(then).is_absolute():
            target = Path(now).resolve()
            if any((base / then).resolve() == target for base in bases):
                out = _replaced(out, key, now)
    return out


def _run_cwd(checkpoint_dir: Any, location: Path) -> Path | None:
    """The working directory from which ``checkpoint_dir`` (relative) named ``location``."""
    if not isinstance(checkpoint_dir, str) or not checkpoint_dir:
        return None
    relative = Path(os.path.normpath(checkpoint_dir))
    if relative.is_absolute() or ".." in relative.parts:
        return None
    here = location.resolve().parts
    n = len(relative.parts)
    if n >= len(here) or here[len(here) - n :] != relative.parts:
        return None
    return Path(*here[: len(here) - n])


def _setting(settings: Mapping[str, Any], key: str) -> Any:
    """The value of the dotted ``key`` (``section.name``) in nested ``settings``, or None."""
    section, _, name = key.partition(".")
    part = settings.get(section)
    return part.get(name) if isinstance(part, Mapping) else None


def _replaced(settings: Mapping[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of ``settings`` with the dotted ``key`` set to ``value`` (its section exists)."""
    section, _, name = key.partition(".")
    return {**settings, section: {**settings[section], name: value}}


def setting_defaults_of(trainer: BaseTrainer[Any]) -> dict[str, Any]:
    """``trainer``'s :meth:`~BaseTrainer.setting_defaults`: the declared defaults of its
    params and of its policy's config."""
    return {
        "trainer": _field_defaults(type(trainer.params)),
        "config": _field_defaults(type(trainer.policy.config)),
    }


def _field_defaults(cls: type) -> dict[str, Any]:
    """``{field: default}`` of a dataclass's fields that declare a plain default."""
    return {
        f.name: list(f.default) if isinstance(f.default, tuple) else f.default
        for f in dataclasses.fields(cls)
        if f.default is not dataclasses.MISSING
    }


def compare_settings(
    own: Mapping[str, Any], saved: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
) -> list[str]:
    """Compare a trainer's :meth:`~BaseTrainer.resume_settings` with a checkpoint's.

    Raises :class:`SettingsMismatchError` listing every differing setting that changes
    what the run computes; returns the differing settings that are safe to change (such as
    ``trainer.max_epoch``), for a warning. A setting the checkpoint lacks (it was written
    before the setting existed) counts as unchanged while it is at its value in
    ``defaults`` (same nesting as ``own``; :meth:`~BaseTrainer.setting_defaults`).
    """
    changes = {
        key: (then, now)
        for key, then, now in differing_settings(own, saved, defaults)
        if key not in _NOT_WORTH_A_WARNING
    }
    safe = {f"trainer.{name}" for name in SAFE_TO_CHANGE} | SAFE_OUTSIDE_TRAINER
    unsafe = [k for k in changes if k not in safe]
    if unsafe:
        detail = ", ".join(f"{k}: saved {changes[k][0]!r}, now {changes[k][1]!r}" for k in unsafe)
        raise SettingsMismatchError(
            f"the checkpoint was written by a run with other settings ({detail}): build the "
            "trainer as the checkpointed run was (RunSpec.from_dict(manifest['spec']) for a "
            "spec'd run), or start a new run; nothing was restored",
            unsafe,
            detail,
        )
    return [f"{k}: saved {then!r}, now {now!r}" for k, (then, now) in changes.items()]


def differing_settings(
    own: Mapping[str, Any], saved: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
) -> list[tuple[str, Any, Any]]:
    """``(dotted key, saved value, own value)`` of every setting that differs between two
    nested mappings, sorted by key; a setting ``saved`` lacks (written before it existed)
    counts as unchanged while ``own`` holds its value in ``defaults`` (same nesting)."""
    mine, theirs, known = _flatten(own), _flatten(saved), _flatten(defaults or {})
    return [
        (k, theirs.get(k), mine.get(k))
        for k in sorted(mine.keys() | theirs.keys())
        if mine.get(k) != theirs.get(k)
        and not (k not in theirs and k in known and mine[k] == known[k])
    ]


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out
