"""A :class:`~epochtrain.spec.RunSpec` as plain data: reading spec files and dicts (a
setting left out, ``"none"`` for None, settings in the wrong table or of another algorithm,
settings the run would ignore) and writing TOML values. :mod:`epochtrain.spec` holds the
spec itself."""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochtrain.config import Config, check_field_names
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


# ---------------------------------------------------------------- settings a run ignores
@dataclass(frozen=True)
class IgnoredSetting:
    """A setting of a spec that cannot change its run, as :func:`ignored_settings` finds
    it: ``name`` dotted (``"buffer.buffer_size"``), its ``value``, ``why`` it does nothing
    and the ``fix``."""

    name: str
    value: Any
    why: str
    fix: str

    def refusal(self) -> str:
        """The words of the ``ValueError`` for a setting given in code or by a flag."""
        return f"{self.name}={self.value!r} has no effect: {self.why}; {self.fix}"

    def in_file(self, where: str = "") -> str:
        """The words of the warning for a setting read from a spec file or dict."""
        section, _, field = self.name.partition(".")
        return (
            f"{where}{self.name} = {toml_value(self.value)} is ignored, the run is the same "
            f"without it: {self.why}; drop {field} from [{section}] to silence this warning"
        )


_KIND_WORDS = {"onpolicy": "an on-policy", "offpolicy": "an off-policy", "offline": "an offline"}


def ignored_settings(spec: RunSpec) -> list[IgnoredSetting]:
    """The settings of ``spec`` that its run would ignore; a setting at its class default
    never counts (``to_toml`` writes every setting; the defaults are always there).

    - an offline algorithm learns from its dataset: ``buffer.buffer_size`` and
      ``trainer.test_in_train`` (it runs no training episodes) do nothing;
    - without ``buffer.prioritized_replay`` the ``buffer.priority_*`` settings do nothing.
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
    if spec.buffer.prioritized_replay:
        return found
    if kind == "offpolicy":
        why = f"buffer.prioritized_replay is off, so {spec.algo!r} samples its replay uniformly"
    elif kind == "onpolicy":
        why = f"{algo} learns from each fresh rollout, with no replay to prioritize"
    else:
        why = f"{algo} samples its dataset uniformly, with no priorities"
    for f in dataclasses.fields(spec.buffer):
        value = getattr(spec.buffer, f.name)
        if f.name.startswith("priority_") and value != f.default:
            use = "turn prioritized_replay on to use it, or " if kind == "offpolicy" else ""
            found.append(IgnoredSetting(f"buffer.{f.name}", value, why, f"{use}drop {f.name}"))
    return found


def refuse_ignored(found: list[IgnoredSetting]) -> None:
    """``ValueError`` naming every setting of ``found`` and its fix, if any."""
    if found:
        raise ValueError("; also, ".join(setting.refusal() for setting in found))


def warn_ignored(spec: RunSpec, where: str = "") -> None:
    """A ``UserWarning`` for each setting ``spec`` (read from a file or dict) would ignore:
    a spec that ran before still loads, and runs as it did."""
    for setting in ignored_settings(spec):
        warnings.warn(setting.in_file(where), UserWarning, stacklevel=4)


def report_ignored_changes(before: RunSpec, after: RunSpec) -> None:
    """Check a change of ``before`` into ``after`` (``with_overrides``, ``replace``): a
    setting it gave a value the run would ignore is refused (``ValueError``); one it made
    ignored by changing another setting (``prioritized_replay`` turned off) is a
    ``UserWarning``; one ``before`` already held (read from a file) passes as it is."""
    held = {s.name: s.value for s in ignored_settings(before)}
    refused, left_behind = [], []
    for setting in ignored_settings(after):
        if setting.name in held and held[setting.name] == setting.value:
            continue
        if _setting_value(before, setting.name) != setting.value:
            refused.append(setting)
        else:
            left_behind.append(setting)
    refuse_ignored(refused)
    for setting in left_behind:
        section, _, field = setting.name.partition(".")
        default = {f.name: f.default for f in dataclasses.fields(getattr(after, section))}[field]
        warnings.warn(
            f"{setting.name}={setting.value!r} is ignored from now on: {setting.why}; set "
            f"{field} to its default {default!r} to silence this warning",
            UserWarning,
            stacklevel=3,
        )


def _setting_value(spec: RunSpec, name: str) -> Any:
    section, _, field = name.partition(".")
    return getattr(getattr(spec, section), field)
