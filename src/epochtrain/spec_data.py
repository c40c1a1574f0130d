"""A :class:`~epochtrain.spec.RunSpec` as plain data: reading spec files and dicts (a
setting left out, ``"none"`` for None, settings in the wrong table or of another algorithm)
and writing TOML values. :mod:`epochtrain.spec` holds the spec itself."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochtrain.config import Config, check_field_names
from epochtrain.registry import ALGORITHMS

if TYPE_CHECKING:
    from epochtrain.spec import RunSpec

__all__ = [
    "SECTIONS",
    "by_suffix",
    "check_section_names",
    "check_top_names",
    "collect_by_episodes",
    "left_out_nones",
    "nullable",
    "read_nones",
    "replace_section",
    "section_of",
    "text_or_none",
    "toml_value",
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
    classes: dict[str, type[Config]] = {}
    if section in ("config", "trainer"):
        classes = {
            name: entry.config_cls if section == "config" else entry.params_cls
            for name, entry in sorted(ALGORITHMS.items())
        }
    for key in raw:
        other = [
            name for name, c in classes.items() if key in {f.name for f in dataclasses.fields(c)}
        ]
        if key not in own and other:
            raise TypeError(
                f"{cls.__name__} has no field {key!r}: it is a setting of "
                f"{', '.join(map(repr, other))}, not of {algo!r}; drop it from [{section}]"
            )
    check_field_names(cls, raw)


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


def toml_value(value: Any) -> str:
    if value is None:
        return '"none"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} to TOML")


def by_suffix(path: Path, *, toml: Any, json: Any) -> Any:
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return toml()
    if suffix == ".json":
        return json()
    raise ValueError(f"spec file {os.fspath(path)!r} must end in .toml or .json")
