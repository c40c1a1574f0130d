"""RunSpec: everything needed to rebuild a run, as typed data that round-trips TOML and JSON.

A spec names the algorithm and env, holds the algorithm's config (``PPOConfig``...), the
trainer params (``OnpolicyParams``...), the env counts, buffer, logging, stopping rule and
device. The CLI prints and reads it, a checkpoint stores it, a sweep enumerates it, a Ray
worker receives it; :func:`epochtrain.make_trainer` builds it::

    spec = RunSpec.tuned("ppo", "CartPole-v1", seed=3).with_overrides({"lr": 3e-4})
    spec.to_file("run.toml")
    assert RunSpec.from_file("run.toml") == spec

Setting names: a dotted path (``config.lr``, ``trainer.batch_size``, ``buffer.buffer_size``)
or a bare field name found in exactly one place (``lr``, ``batch_size``, ``seed``).

A setting the run would ignore (``buffer_size`` for an offline algorithm, ``priority_alpha``
without ``prioritized_replay``, ``alpha_lr`` with ``auto_alpha`` off, ``log_std_init`` for
Discrete actions: :func:`~epochtrain.spec_data.ignored_settings`) is refused when given in
code or by a flag, and a warning when read from a file or dict, which may have run before:
it still loads, and runs as it did.

Beside it: :mod:`epochtrain.spec_names` looks up and checks the algorithm and env a spec
names, :mod:`epochtrain.spec_files` writes and parses its TOML and JSON text,
:mod:`epochtrain.spec_data` reads a spec from plain data and :mod:`epochtrain.spec_args`
makes its command-line flags; the names of the first two are re-exported here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from epochtrain.config import Config, check_field_names, param
from epochtrain.config_ignored import IgnoredSetting, keeping_ignored, keeps_ignored
from epochtrain.data.writes import replace_file
from epochtrain.envs import Backend, env_name
from epochtrain.presets import preset_for
from epochtrain.registry import ALGORITHMS, Algorithm
from epochtrain.spec_data import (
    SECTIONS,
    algorithms_with,
    by_suffix,
    check_acts_on_env,
    check_top_names,
    collect_by_episodes,
    ignored_settings,
    left_out_nones,
    read_nones,
    refuse_ignored,
    replace_section,
    report_ignored_changes,
    section_of,
    warn_ignored,
    written_by_to_toml,
)
from epochtrain.spec_files import parse_value, read_spec_file, spec_toml
from epochtrain.spec_names import algorithm, check_env_id, reward_threshold
from epochtrain.suggestions import close_matches
from epochtrain.trainer.params import TrainerParams

__all__ = [
    "ENV_DEFAULTS",
    "BufferSpec",
    "LogSpec",
    "RunSpec",
    "algorithm",
    "check_env_id",
    "parse_value",
    "reward_threshold",
]

LoggerName = Literal["tensorboard", "jsonl", "csv"]

ENV_DEFAULTS: Mapping[str, str] = types.MappingProxyType(
    {
        "num_envs": "the tuned spec's: 1 for most algorithms, 0 for the offline ones, "
        "more where the registry or a preset says (`epochtrain config --algo A --env E`)",
        "stop_at": "the env's reward_threshold (none if it has none), as in the tuned spec, "
        "RunSpec.default and a spec file without stop_at",
    }
)
"""Top-level settings with a flag whose default depends on the algorithm and env (the tuned
spec's value, as a spec file or a ``RunSpec(...)`` that leaves them out takes it): the
words ``--help`` shows for their default."""


class _FromTuned:
    """The default of a :class:`RunSpec` field that depends on the algorithm and env: the
    value of ``RunSpec.tuned(algo, env_id)``, filled in when the spec is built."""

    def __repr__(self) -> str:
        return "<the tuned spec's>"


_FROM_TUNED: Any = _FromTuned()


@dataclass(frozen=True, kw_only=True)
class BufferSpec(Config):
    """The training buffer (online algorithms: an offline one learns from its dataset).
    The ``priority_*`` settings apply with ``prioritized_replay`` only."""

    buffer_size: int | None = param(None, ge=1)
    """Capacity in transitions (None: the algorithm's default; on-policy: one rollout;
    offline algorithms: leave it None)."""
    prioritized_replay: bool = False
    """Off-policy only: prioritized replay (Schaul et al. 2016, proportional)."""
    priority_alpha: float = param(0.6, ge=0)
    """Prioritized replay: how much priorities count (0: uniform)."""
    priority_beta: float = param(0.4, ge=0, le=1)
    """Prioritized replay: initial importance-sampling exponent, annealed to 1 over the run."""


@dataclass(frozen=True, kw_only=True)
class LogSpec(Config):
    """Where the run's curves go."""

    logdir: str | None = None
    """Directory of the run's logs (None: log nothing)."""
    loggers: tuple[LoggerName, ...] = ("tensorboard",)
    """Loggers writing into logdir: tensorboard, jsonl (log.jsonl), csv (log.csv); each
    at most once."""

    def check(self) -> None:
        """A logger named twice is refused: both would write the same file (the second
        ``jsonl`` or ``csv`` logger finds the first one's records and stops the run)."""
        super().check()
        for name in dict.fromkeys(self.loggers):
            if self.loggers.count(name) > 1:
                raise ValueError(
                    f"logging.loggers lists {name!r} twice: list each logger once, e.g. "
                    f"loggers = {json.dumps(list(dict.fromkeys(self.loggers)))}"
                )


@dataclass(frozen=True, kw_only=True)
class RunSpec(Config):
    """A whole run as data: ``RunSpec(algo=..., env_id=..., **settings)``, or
    :meth:`tuned`, :meth:`default`, :meth:`from_file`.

    ``config``, ``trainer``, ``num_envs``, ``buffer`` and ``stop_at`` left out take the
    values of ``RunSpec.tuned(algo, env_id)`` (the run ``epochtrain train --algo A --env E``
    starts); a section given as an object is kept whole.
    """

    algo: str
    """Registered algorithm name (epochtrain.registry.ALGORITHMS)."""
    env_id: str
    """Gymnasium env id."""
    config: Config = _FROM_TUNED
    """The algorithm's config (PPOConfig for 'ppo', ...)."""
    trainer: TrainerParams = _FROM_TUNED
    """The trainer params (OnpolicyParams, OffpolicyParams or OfflineParams by the algo)."""
    num_envs: int = param(_FROM_TUNED, ge=0)
    """Training envs (0 for offline algorithms)."""
    num_test_envs: int = param(10, ge=1)
    """Test envs; ``make_trainer`` builds at most ``episode_per_test`` of them (one more
    would run no test episode, yet step with the others)."""
    env_backend: Backend = "sync"
    """How the training and test envs are vectorised (:func:`epochtrain.envs.make_envs`):
    'sync' (one process; checkpoints hold the in-flight episodes), 'async' (gymnasium's
    AsyncVectorEnv, a process per env) or 'envpool' (extra ``envpool``)."""
    buffer: BufferSpec = _FROM_TUNED
    """The training buffer."""
    logging: LogSpec = LogSpec()
    """Where the curves go."""
    stop_at: float | None = _FROM_TUNED
    """Stop once the best mean test return reaches this (None: run all epochs)."""
    dataset: str | None = None
    """Offline algorithms: the dataset file (written by `epochtrain collect`), or
    'minari:<dataset id>' for a local Minari dataset."""
    device: str = "cpu"
    """Torch device of the networks ('cpu', 'cuda:0', ...)."""

    def __post_init__(self) -> None:
        """Fill in the settings left out from the tuned spec, then validate."""
        unset = [f.name for f in dataclasses.fields(self) if getattr(self, f.name) is _FROM_TUNED]
        if unset:
            tuned = RunSpec.tuned(self.algo, self.env_id)  # names a bad algo or env
            for name in unset:
                object.__setattr__(self, name, getattr(tuned, name))
        super().__post_init__()

    def check(self) -> None:
        """The algo, env and the kinds of the nested settings must agree, and no setting
        may be one the run would ignore (:meth:`ignored_settings`). :meth:`with_overrides`,
        :meth:`replace` and :meth:`from_dict` judge those themselves (the changed ones
        refused, those read from data a warning: :func:`~epochtrain.config.keeping_ignored`),
        so that a spec file holding one still loads and can be changed."""
        entry = algorithm(self.algo)
        check_env_id(self.env_id)
        if type(self.config) is not entry.config_cls:
            raise TypeError(
                f"RunSpec.config must be a {entry.config_cls.__name__} for algo "
                f"{self.algo!r}, got {type(self.config).__name__}"
            )
        if type(self.trainer) is not entry.params_cls:
            raise TypeError(
                f"RunSpec.trainer must be {entry.params_cls.__name__} for algo {self.algo!r} "
                f"(a {entry.kind} algorithm), got {type(self.trainer).__name__}"
            )
        if entry.kind != "offline" and self.num_envs < 1:
            raise ValueError(f"RunSpec.num_envs must be >= 1 for algo {self.algo!r}, got 0")
        if entry.kind == "offline" and self.num_envs != 0:
            raise ValueError(
                f"RunSpec.num_envs must be 0 for the offline algo {self.algo!r} (it learns "
                f"from its dataset, with no training envs), got {self.num_envs}"
            )
        if entry.kind == "offpolicy" and self.buffer.buffer_size is None:
            raise ValueError(
                f"buffer.buffer_size must be set for the off-policy algo {self.algo!r} (its "
                "replay buffer's capacity, e.g. 100000); None sizes an on-policy rollout"
            )
        if entry.kind != "offline" and self.dataset is not None:
            raise ValueError(
                f"RunSpec.dataset is the data of an offline algorithm; {self.algo!r} collects "
                f"its own: drop dataset={self.dataset!r} (--dataset)"
            )
        if self.buffer.prioritized_replay and entry.kind != "offpolicy":
            raise ValueError(
                f"buffer.prioritized_replay=True needs an off-policy algorithm (one that "
                f"samples minibatches from a replay buffer: {_offpolicy_names()}), got "
                f"algo={self.algo!r}"
            )
        if not keeps_ignored():
            refuse_ignored(self.ignored_settings())

    def ignored_settings(self) -> list[IgnoredSetting]:
        """The settings this run would ignore, as dotted names
        (:func:`epochtrain.spec_data.ignored_settings`)."""
        return ignored_settings(self)

    # ---------------------------------------------------------------- building
    @classmethod
    def default(cls, algo: str, env_id: str, *, seed: int = 0) -> RunSpec:
        """The algorithm's general setting on ``env_id`` (no env-tuned preset); it stops at
        the env's ``reward_threshold`` when the spec has one. An algorithm that cannot act
        on the env's spaces (DQN on Box actions, TD3 on Discrete ones) is refused with
        ``make_trainer``'s ``ValueError``: the spec could never run."""
        entry = algorithm(algo)
        check_env_id(env_id)
        spec = cls(
            algo=algo,
            env_id=env_id,
            config=entry.config_cls(),
            trainer=entry.params_cls(**{**entry.trainer, "seed": seed}),
            num_envs=entry.num_envs,
            buffer=BufferSpec(buffer_size=entry.buffer_size),
            stop_at=reward_threshold(env_id),
        )
        check_acts_on_env(spec)
        return spec

    @classmethod
    def tuned(cls, algo: str, env_id: str, *, seed: int = 0) -> RunSpec:
        """:meth:`default` with the tuned preset of ``(algo, env_id)`` applied, if any
        (:mod:`epochtrain.presets`); refused as by :meth:`default`."""
        spec = cls.default(algo, env_id, seed=seed)
        preset = preset_for(algo, env_id)
        return spec if preset is None else spec.with_overrides(preset.settings)

    @property
    def seed(self) -> int:
        """The run's seed (``trainer.seed``)."""
        return self.trainer.seed

    @property
    def run_id(self) -> str:
        """A readable id, ``<algo>-<env>-s<seed>``, usable as a directory name (``<env>`` is
        :func:`~epochtrain.envs.env_name` of the env id: ``"ppo-CartPole-v1-s3"``)."""
        return f"{self.algo}-{env_name(self.env_id)}-s{self.seed}"

    @property
    def entry(self) -> Algorithm:
        """The registry entry of :attr:`algo`."""
        return ALGORITHMS[self.algo]

    # --------------------------------------------------------------- overrides
    def resolve_name(self, name: str) -> tuple[str | None, str]:
        """``(section, field)`` of a setting name; section None for a top-level field.

        Raises ``ValueError`` for an unknown or ambiguous name, listing close matches.
        """
        top = {f.name for f in dataclasses.fields(self)} - set(SECTIONS)
        sections = {s: {f.name for f in dataclasses.fields(getattr(self, s))} for s in SECTIONS}
        if "." in name:
            section, _, field = name.partition(".")
            if section not in sections:
                raise ValueError(
                    f"unknown setting {name!r}: a dotted name starts with one of "
                    f"{', '.join(SECTIONS)}{close_matches(section, SECTIONS)}"
                )
            if field not in sections[section]:
                elsewhere = self._elsewhere(field, sections, section)
                raise ValueError(
                    f"unknown setting {name!r} for algo {self.algo!r}"
                    f"{close_matches(field, sections[section], spelling=not elsewhere)}; "
                    + (elsewhere or f"{section} fields: {', '.join(sorted(sections[section]))}")
                )
            return section, field
        if name in top:
            return None, name
        if name in SECTIONS:
            example = sorted(sections[name])[0]
            raise ValueError(
                f"setting {name!r} is a table: name each of its settings, by its dotted name "
                f"({name}.{example}) or its bare name ({example})"
            )
        found = [s for s in SECTIONS if name in sections[s]]
        if len(found) == 1:
            return found[0], name
        if len(found) > 1:
            raise ValueError(
                f"setting {name!r} is ambiguous: say " + " or ".join(f"'{s}.{name}'" for s in found)
            )
        every = top | {n for names in sections.values() for n in names}
        elsewhere = self._elsewhere(name, sections, None)
        raise ValueError(
            f"unknown setting {name!r} for algo {self.algo!r}"
            f"{close_matches(name, every, spelling=not elsewhere)}; "
            + (elsewhere or "see `epochtrain config --algo ALGO --env ENV` for every setting")
        )

    def _elsewhere(self, field: str, sections: Mapping[str, set[str]], section: str | None) -> str:
        """Where a setting ``field`` that is not in ``section`` (None: not in any) is: in
        another section of this spec (``trainer.lr``: a config setting), or in the section
        of other algorithms (``warmup_steps`` for ``ppo``); "" when nowhere."""
        found = [s for s in SECTIONS if s != section and field in sections[s]]
        if section is not None and found:
            bare = f" or {field!r}" if len(found) == 1 else ""  # else the bare name is ambiguous
            return f"{field!r} is a {found[0]} setting: say '{found[0]}.{field}'{bare}"
        for where in (section,) if section is not None else ("config", "trainer"):
            others = algorithms_with(where, field)
            if others:
                return (
                    f"{field!r} is a {where} setting of {', '.join(map(repr, others))}, "
                    f"not of {self.algo!r}"
                )
        return ""

    def with_overrides(self, overrides: Mapping[str, Any]) -> RunSpec:
        """A copy with each named setting replaced (names as :meth:`resolve_name` takes them).

        ``algo`` and ``env_id`` cannot be overridden: build a new spec for another run. A
        value the run would ignore is refused (``ValueError``); a setting this spec already
        held (read from a file) passes, and one left ignored by the change of another
        (``prioritized_replay`` off, ``priority_alpha`` kept) is a ``UserWarning``.
        """
        top: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
        for name, value in overrides.items():
            if name in SECTIONS and isinstance(value, Mapping):
                dotted = ", ".join(f"'{name}.{key}': {v!r}" for key, v in value.items())
                raise ValueError(
                    f"setting {name!r} is a table: give its settings one by one, by dotted "
                    f"name ({{{dotted}}}) or bare name"
                )
            section, field = self.resolve_name(name)
            if section is None:
                if field in ("algo", "env_id"):
                    raise ValueError(
                        f"{field} cannot be overridden: use RunSpec.tuned(algo, env_id)"
                    )
                top[field] = value
            else:
                nested[section][field] = value
        collect_by_episodes(nested["trainer"])
        with keeping_ignored():  # judged below, on the whole spec
            for section, changes in nested.items():
                if changes:
                    top[section] = replace_section(getattr(self, section), changes)
        spec = _changed(self, top)
        if not keeps_ignored():  # else the caller judges them (a Tune trial's config)
            report_ignored_changes(self, spec)
        return spec

    def replace(self, **changes: object) -> RunSpec:
        """A copy with ``changes`` to top-level fields (a section as a whole); ignored
        settings are judged as by :meth:`with_overrides`."""
        fields = {f.name for f in dataclasses.fields(self)}
        for name, value in changes.items():
            if name in fields:
                continue
            try:
                section, _ = self.resolve_name(name)
            except ValueError:
                break  # unknown: check_field_names names the close matches
            raise TypeError(
                f"RunSpec has no field {name!r}: it is a {section} setting: change it with "
                f"spec.with_overrides({{{name!r}: {value!r}}}) (or '{section}.{name}')"
            )
        check_field_names(type(self), changes)
        spec = _changed(self, changes)
        report_ignored_changes(self, spec)
        return spec

    # ------------------------------------------------------------- plain data
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        """Build from :meth:`to_dict`'s output or a hand-written spec. A setting left out
        takes its value in ``RunSpec.tuned(algo, env_id)``, and a table's settings apply over
        the tuned spec's, as the same flags of ``epochtrain train --algo A --env E`` do. A
        spec an earlier :meth:`to_toml` wrote (every table, every top-level setting) left
        out its Nones: a nullable setting it lacks is None, so it reloads as it ran. A
        setting the run would ignore is kept, with a ``UserWarning`` naming it: the spec
        may have run before, and runs as it did."""
        return cls._from_data(data, "")

    @classmethod
    def _from_data(cls, data: Mapping[str, Any], where: str) -> RunSpec:
        """:meth:`from_dict`; ``where`` (``"path: "``) opens its warnings."""
        if not isinstance(data, Mapping):
            raise TypeError(f"RunSpec.from_dict needs a mapping, got {type(data).__name__}")
        for key in ("algo", "env_id"):
            if key not in data:
                raise ValueError(
                    f"a run spec needs {key!r} (e.g. algo = 'ppo', env_id = 'CartPole-v1')"
                )
        base = cls.tuned(str(data["algo"]), data["env_id"])
        check_top_names(base, data)
        written = written_by_to_toml(cls, data)
        values = read_nones(cls, {k: v for k, v in data.items() if k not in SECTIONS})
        if written:
            values = {**left_out_nones(cls, data), **values}
        with keeping_ignored():  # a warning each, below
            for section in SECTIONS:
                if section in data:
                    values[section] = section_of(base, section, data[section], written)
        spec = _changed(base, values)
        warn_ignored(spec, where)
        return spec

    def to_json(self) -> str:
        """The spec as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    def to_toml(self) -> str:
        """The spec as TOML, every setting written. TOML has no null: ``None`` is written
        ``"none"``, except in a setting whose ``"none"`` would be a name (a directory or a
        dataset): there None, every spec's default, is left out."""
        return spec_toml(self)

    def to_file(self, path: str | os.PathLike[str]) -> Path:
        """Write the spec to ``path`` (``.toml`` or ``.json``) atomically; returns the path."""
        target = Path(path)
        text = by_suffix(target, toml=self.to_toml, json=self.to_json)
        replace_file(target, text.encode("utf-8"))
        return target

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, env_id: str | None = None) -> RunSpec:
        """Read a spec written by :meth:`to_file` (or by hand) from ``.toml`` or ``.json``.

        ``env_id`` moves the file's run to another env: the settings the file leaves out
        take that env's tuned values (its ``stop_at`` too), as a file naming it would.
        """
        source = Path(path)
        data = read_spec_file(source)
        if env_id is not None:
            data = {**data, "env_id": env_id}
        try:
            return cls._from_data(data, f"{source}: ")
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{source}: {exc}") from exc


def _changed(spec: RunSpec, changes: Mapping[str, Any]) -> RunSpec:
    """``dataclasses.replace(spec, **changes)``, its ignored settings left to the caller."""
    with keeping_ignored():
        return dataclasses.replace(spec, **changes)


def _offpolicy_names() -> str:
    """The registered off-policy algorithms, quoted, for a message."""
    return ", ".join(repr(name) for name, entry in ALGORITHMS.items() if entry.kind == "offpolicy")
