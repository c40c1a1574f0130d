"""Settings a run ignores: how they are found, refused, warned about and kept.

A setting its algorithm would ignore under its other settings (``alpha_lr`` with
``auto_alpha`` off), or under the env's kind of actions, is an :class:`IgnoredSetting`
with its reason and fix. Given in code or by a flag it is refused
(:func:`refuse_ignored`); read from a saved spec it is kept for the caller to judge, within
:func:`keeping_ignored`; a change of a config or a spec is judged by
:func:`report_ignored_changes`. The configs that find them (:meth:`Config.ignored_settings
<epochtrain.config.Config.ignored_settings>`, ``ignored_for``) are in
:mod:`epochtrain.config`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import warnings
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from epochtrain.config import Config

__all__ = [
    "IgnoredSetting",
    "keeping_ignored",
    "keeps_ignored",
    "refuse_ignored",
    "report_ignored_changes",
    "toml_value",
]


@dataclass(frozen=True)
class IgnoredSetting:
    """A setting that cannot change its run, as :meth:`Config.ignored_settings` finds it:
    ``name`` (a field, or a dotted path in a spec: ``"buffer.buffer_size"``), its
    ``value``, ``why`` it does nothing and the ``fix``."""

    name: str
    value: Any
    why: str
    fix: str

    def refusal(self, owner: str = "") -> str:
        """The words of the ``ValueError`` for a setting given in code or by a flag;
        ``owner`` (``"SACConfig."``) opens its name."""
        return f"{owner}{self.name}={self.value!r} has no effect: {self.why}; {self.fix}"

    def in_file(self, where: str = "") -> str:
        """The words of the warning for a setting read from a spec file or dict."""
        section, _, field = self.name.rpartition(".")
        table = f" from [{section}]" if section else ""
        return (
            f"{where}{self.name} = {toml_value(self.value)} is ignored, the run is the same "
            f"without it: {self.why}; drop {field}{table} to silence this warning"
        )


def toml_value(value: Any) -> str:
    """``value`` as a TOML literal (None as ``"none"``: TOML has no null)."""
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


_KEEPING: ContextVar[bool] = ContextVar("epochtrain_keeping_ignored", default=False)


@contextlib.contextmanager
def keeping_ignored() -> Iterator[None]:
    """Within it, a :class:`Config` built keeps the settings it would ignore instead of
    refusing them: its caller judges them, as reading a saved spec does (a warning: the
    spec may have run before) and a change of a spec does (the changed ones refused)."""
    token = _KEEPING.set(True)
    try:
        yield
    finally:
        _KEEPING.reset(token)


def keeps_ignored() -> bool:
    """True within :func:`keeping_ignored`."""
    return _KEEPING.get()


def refuse_ignored(found: list[IgnoredSetting], owner: str = "") -> None:
    """``ValueError`` naming every setting of ``found`` and its fix, if any."""
    if found:
        raise ValueError("; also, ".join(setting.refusal(owner) for setting in found))


def _value_at(obj: object, name: str) -> Any:
    """The value of the setting ``name`` (a field, or a dotted path) of ``obj``."""
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _default_at(config: Config, name: str) -> Any:
    """The class default of the setting ``name`` (as :func:`_value_at` finds it)."""
    owner, _, field = name.rpartition(".")
    holder: Config = _value_at(config, owner) if owner else config
    return {f.name: f.default for f in dataclasses.fields(holder)}[field]


def report_ignored_changes(before: Config, after: Config, owner: str = "") -> None:
    """Judge a change of ``before`` into ``after`` (``replace``, ``with_overrides``): a
    setting it gave a value the run would ignore is refused (``ValueError``); one it made
    ignored by changing another setting (``auto_alpha`` or ``prioritized_replay`` turned
    off) is a ``UserWarning``; one ``before`` already held (read from a file) passes as it
    is. ``owner`` (``"SACConfig."``) opens the names in the words."""
    held = {s.name: s.value for s in before.ignored_settings()}
    refused, left_behind = [], []
    for setting in after.ignored_settings():
        if setting.name in held and held[setting.name] == setting.value:
            continue
        if _value_at(before, setting.name) != setting.value:
            refused.append(setting)
        else:
            left_behind.append(setting)
    refuse_ignored(refused, owner)
    for setting in left_behind:
        field = setting.name.rpartition(".")[2]
        default = _default_at(after, setting.name)
        warnings.warn(
            f"{owner}{setting.name}={setting.value!r} is ignored from now on: {setting.why}; "
            f"set {field} to its default {default!r} to silence this warning",
            UserWarning,
            stacklevel=3,
        )
