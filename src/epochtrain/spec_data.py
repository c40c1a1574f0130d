"""A :class:`~epochtrain.spec.RunSpec` as plain data: reading spec files and dicts (a
setting left out, ``"none"`` for None, settings in the wrong table or of another algorithm,
settings the run would ignore) and writing TOML values. :mod:`epochtrain.spec` holds the
spec itself."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import torch
from gymnasium.envs.registration import EnvSpec

from epochtrain.config import Config, action_settings, check_field_names
from epochtrain.config_ignored import (
    IgnoredSetting,
    keeping_ignored,
    refuse_ignored,
    report_ignored_changes,
    toml_value,
)
from epochtrain.envs import env_spec
from epochtrain.registry import ALGORITHMS

if TYPE_CHECKING:
    from epochtrain.spec import RunSpec

__all__ = [
    "SECTIONS",
    "IgnoredSetting",
    "by_suffix",
    "check_section_names",
    "check_top_names",
    "collect_by_episodes",
    "env_action_space",
    "ignored_settings",
    "left_out_nones",
    "nullable",
    "read_nones",
    "refuse_ignored",
    "replace_section",
    "report_ignored_changes",
    "section_of",
    "text_or_none",
    "toml_value",
    "warn_ignored",
    "written_by_to_toml",
]

SECTIONS = ("config", "trainer", "buffer", "logging")
"""The tables of a spec: its nested settings."""


def written_by_to_toml(spec_cls: type[Config], data: Mapping[str, Any]) -> bool:
    """True for a spec that ``RunSpec.to_toml`` wrote, earlier versions included: it has
    every table and every top-level setting that cannot be None. The earlier ones left out
    each None whose field default was None (``stop_at`` too, before it was written
    ``"none"``): a sweep's ``spec.toml`` of then must reload as it ran."""
    nullable_names = {name for name, _ in nullable(spec_cls)}
    top = {f.name for f in dataclasses.fields(spec_cls)} - nullable_names - {*SECTIONS}
    return top <= set(data) and all(isinstance(data.get(s), Mapping) for s in SECTIONS)


def nullable(cls: type[Config]) -> list[tuple[str, bool]]:
    """``(name, allows text)`` of each field of ``cls`` that may be None."""
    return [
        (f.name, "str" in str(f.type)) for f in dataclasses.fields(cls) if "None" in str(f.type)
    ]


def text_or_none(cls: type[Config]) -> set[str]:
    """Fields of ``cls`` that are text or None: their ``"none"`` is text, not None."""
    return {name for name, text in nullable(cls) if text}


def left_out_nones(cls: type[Config], data: Mapping[str, Any]) -> dict[str, None]:
    """``{name: None}`` for each nullable field of ``cls`` missing from ``data``."""
    return {name: None for name, _ in nullable(cls) if name not in data}


def check_top_names(base: RunSpec, data: Mapping[str, Any]) -> None:
    """``TypeError`` for a top-level key that is no field of :class:`RunSpec`; a setting of
    a table (``lr`` beside ``algo``) names the table it belongs in."""
    fields = {f.name for f in dataclasses.fields(base)}
    for key in data:
        if key in fields:
            continue
        try:
            section, name = base.resolve_name(str(key))
        except ValueError:
            break  # unknown or ambiguous: check_field_names names the close matches
        raise TypeError(
            f"RunSpec has no field {key!r}: {name!r} is a {section} setting: write it under "
            f"[{section}] (the {section!r} table)"
        )
    check_field_names(type(base), data)


def section_of(base: RunSpec, section: str, raw: Any, written: bool) -> Config:
    """Table ``section`` of a spec's data applied over ``base``'s (a config object as is)."""
    if isinstance(raw, Config):
        return raw
    if not isinstance(raw, Mapping):
        raise TypeError(f"RunSpec.{section} must be a table of settings, got {raw!r}")
    current: Config = getattr(base, section)
    check_section_names(base.algo, section, type(current), raw)
    changes = read_nones(type(current), raw)
    if written:
        changes = {**left_out_nones(type(current), raw), **changes}
    if section == "trainer":
        collect_by_episodes(changes)
    return replace_section(current, changes)


def check_section_names(algo: str, section: str, cls: type[Config], raw: Mapping[str, Any]) -> None:
    """``TypeError`` for a key of table ``section`` that is no field of ``cls``; a setting
    of other algorithms (``warmup_steps`` for ``ppo``) names them."""
    own = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        other = algorithms_with(section, str(key))
        if key not in own and other:
            raise TypeError(
                f"{cls.__name__} has no field {key!r}: it is a setting of "
                f"{', '.join(map(repr, other))}, not of {algo!r}; drop it from [{section}]"
            )
    check_field_names(cls, raw)


def algorithms_with(section: str, name: str) -> list[str]:
    """The registered algorithms (sorted) whose ``section`` (``"config"`` or ``"trainer"``)
    has a setting ``name``: what an error names for a setting of other algorithms."""
    if section not in ("config", "trainer"):
        return []
    return [
        algo
        for algo, entry in sorted(ALGORITHMS.items())
        if name
        in {
            f.name
            for f in dataclasses.fields(
                entry.config_cls if section == "config" else entry.params_cls
            )
        }
    ]


def collect_by_episodes(trainer_changes: dict[str, Any]) -> None:
    """``episode_per_collect`` given without ``step_per_collect`` collects by episodes: the
    step count (the base's) is dropped, as ``--episode-per-collect`` does."""
    if "step_per_collect" not in trainer_changes and trainer_changes.get("episode_per_collect"):
        trainer_changes["step_per_collect"] = None


def replace_section(section: Config, changes: Mapping[str, Any]) -> Config:
    try:
        return section.replace(**changes)
    except (TypeError, ValueError) as exc:
        raise type(exc)(str(exc)) from None


def read_nones(cls: type[Config], raw: Mapping[str, Any]) -> dict[str, Any]:
    """TOML has no null: the string ``"none"`` stands for None in a field that allows it."""
    allows_none = {name for name, text in nullable(cls) if not text}
    return {k: None if k in allows_none and v == "none" else v for k, v in raw.items()}


def by_suffix(path: Path, *, toml: Any, json: Any) -> Any:
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return toml()
    if suffix == ".json":
        return json()
    raise ValueError(f"spec file {os.fspath(path)!r} must end in .toml or .json")


# ---------------------------------------------------------------- settings a run ignores
# ---------------------------------------------------------------- settings a run ignores
_KIND_WORDS = {"onpolicy": "an on-policy", "offpolicy": "an off-policy", "offline": "an offline"}


def ignored_settings(spec: RunSpec) -> list[IgnoredSetting]:
    """The settings of ``spec`` that its run would ignore; a setting at its class default
    never counts (``to_toml`` writes every setting; the defaults are always there).

    - an offline algorithm learns from its dataset: ``buffer.buffer_size`` and
      ``trainer.test_in_train`` (it runs no training episodes) do nothing, nor does
      ``config.exploration_noise`` (its test episodes act deterministically);
    - without ``buffer.prioritized_replay`` the ``buffer.priority_*`` settings do nothing;
    - the algorithm config's own (:meth:`~epochtrain.config.Config.ignored_settings`:
      ``alpha_lr`` with ``auto_alpha`` off...) and those of another kind of actions than
      the env's (:meth:`~epochtrain.config.Config.ignored_for`: ``log_std_init`` for
      Discrete actions), as ``config.<name>``.
    """
    kind = ALGORITHMS[spec.algo].kind
    algo = f"{spec.algo!r} is {_KIND_WORDS[kind]} algorithm, which"
    found: list[IgnoredSetting] = []
    if kind == "offline" and spec.buffer.buffer_size is not None:
        why = f"{algo} learns from its dataset, not from a buffer it fills"
        size = spec.buffer.buffer_size
        found.append(IgnoredSetting("buffer.buffer_size", size, why, "drop buffer_size"))
    if kind == "offline" and spec.trainer.test_in_train:
        why = f"{algo} runs no training episodes whose returns could call for a test"
        found.append(IgnoredSetting("trainer.test_in_train", True, why, "drop test_in_train"))
    if not spec.buffer.prioritized_replay:
        found += _priority_settings(spec, kind, algo)
    config = spec.config
    own = config.ignored_settings()
    if kind == "offline" and "exploration_noise" in {f.name for f in dataclasses.fields(config)}:
        why = f"{algo} never explores: its test episodes act deterministically, without noise"
        own += config.ignored_if_set("exploration_noise", why, "drop exploration_noise")
    if action_settings(config):  # only then is the env's action space needed
        space = env_action_space(spec.env_id)
        own += [] if space is None else config.ignored_for(space, env_id=spec.env_id)
    return found + [dataclasses.replace(s, name=f"config.{s.name}") for s in own]


def _priority_settings(spec: RunSpec, kind: str, algo: str) -> list[IgnoredSetting]:
    """The ``buffer.priority_*`` settings of ``spec`` away from their defaults (its
    ``prioritized_replay`` is off)."""
    if kind == "offpolicy":
        why = f"buffer.prioritized_replay is off, so {spec.algo!r} samples its replay uniformly"
    elif kind == "onpolicy":
        why = f"{algo} learns from each fresh rollout, with no replay to prioritize"
    else:
        why = f"{algo} samples its dataset uniformly, with no priorities"
    found = []
    for f in dataclasses.fields(spec.buffer):
        value = getattr(spec.buffer, f.name)
        if f.name.startswith("priority_") and value != f.default:
            use = "turn prioritized_replay on to use it, or " if kind == "offpolicy" else ""
            found.append(IgnoredSetting(f"buffer.{f.name}", value, why, f"{use}drop {f.name}"))
    return found


_SPACES: dict[int, tuple[EnvSpec, tuple[gym.Space[Any], gym.Space[Any]] | None]] = {}
""":func:`env_spaces` by the ``id`` of the registered ``EnvSpec`` (kept beside it, so the id
is not reused): an env registered again under the same id is looked up again."""


def env_spaces(env_id: str) -> tuple[gym.Space[Any], gym.Space[Any]] | None:
    """The observation and action spaces of ``env_id``, read from one env built and closed
    (0.1 ms for CartPole, 2 ms for Pendulum, 8 ms for FrozenLake; once per registered env
    and process), or None when the env cannot be built here (a missing dependency:
    ``make_trainer`` names it)."""
    registered = env_spec(env_id)
    key = id(registered)
    if key not in _SPACES:
        spaces: tuple[gym.Space[Any], gym.Space[Any]] | None = None
        with warnings.catch_warnings():  # the env's own (deprecations...) are not the spec's
            warnings.simplefilter("ignore")
            try:
                env = gym.make(env_id)
            except Exception:  # any failure to build: make_trainer raises it, with the fix
                env = None
            if env is not None:
                spaces = (env.observation_space, env.action_space)
                env.close()
        _SPACES[key] = (registered, spaces)
    return _SPACES[key][1]


def env_action_space(env_id: str) -> gym.Space[Any] | None:
    """The action space of ``env_id`` (:func:`env_spaces`), or None when the env cannot be
    built here.

    :func:`ignored_settings` asks for it only when the config holds a setting of one kind
    of actions away from its default, so building a spec builds no env otherwise."""
    spaces = env_spaces(env_id)
    return None if spaces is None else spaces[1]


def check_acts_on_env(spec: RunSpec) -> None:
    """Raise what :func:`~epochtrain.make_trainer` raises for a policy that cannot act on
    the env's spaces (DQN on Box actions, TD3 on Discrete ones): the policy is built on
    them, on the CPU (the spec's device is judged where the run is built). An env that
    cannot be built here passes: ``make_trainer`` names what it lacks."""
    spaces = env_spaces(spec.env_id)
    key = (spec.algo, id(env_spec(spec.env_id)), repr(spec.config))
    if spaces is None or key in _ACTS_ON_ENV:
        return
    with torch.random.fork_rng(), keeping_ignored():  # the spec judges those
        spec.entry.policy_cls(spaces[0], spaces[1], spec.config, device="cpu")
    _ACTS_ON_ENV.add(key)


_ACTS_ON_ENV: set[tuple[str, int, str]] = set()
"""The (algo, ``id`` of the registered ``EnvSpec``, config) that :func:`check_acts_on_env`
passed: building the policy takes 2-100 ms, and :meth:`RunSpec.tuned` checks each spec."""


def warn_ignored(spec: RunSpec, where: str = "") -> None:
    """A ``UserWarning`` for each setting ``spec`` (read from a file or dict) would ignore:
    a spec that ran before still loads, and runs as it did."""
    for setting in ignored_settings(spec):
        warnings.warn(setting.in_file(where), UserWarning, stacklevel=4)
