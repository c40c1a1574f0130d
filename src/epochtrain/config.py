"""Config: frozen, keyword-only dataclasses of settings, validated by one validator.

Every algorithm config (``PPOConfig``), every trainer parameter set (``OnpolicyParams``) and
the pieces of a :class:`~epochtrain.spec.RunSpec` derive from :class:`Config`. A field
declares its allowed range next to it with :func:`param`, and its docstring (the string
literal under the field) is its help text in the CLI and the docs::

    @dataclass(frozen=True, kw_only=True)
    class PGConfig(Config):
        lr: float = param(1e-3, gt=0)
        \"\"\"Adam learning rate.\"\"\"

Construction checks each field against its type and range (:func:`validate`) and then the
cross-field rules of :meth:`Config.check`: a bad value is a ``ValueError`` (``TypeError``
for a wrong type) naming the class, the field, the value, what is allowed and the fix.
A float must be finite (NaN is never allowed); ``param(..., allow_inf=True)`` admits
``inf`` where it has a meaning, such as "no clipping".

A setting its algorithm would ignore (``alpha_lr`` with ``auto_alpha`` off: a config's
:meth:`Config.ignored_settings`) is refused too, naming the setting that turns it off; a
setting of one kind of actions only is declared so (``param(..., actions="box")``) and
judged where the action space is known (:meth:`Config.ignored_for`, a
:class:`~epochtrain.spec.RunSpec`). Within :func:`keeping_ignored` (reading a saved spec)
such settings are kept, for the caller to judge. How such settings are refused, warned
about and kept (:class:`~epochtrain.config_ignored.IgnoredSetting`, ``keeping_ignored``)
is in :mod:`epochtrain.config_ignored`.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import math
import os
import textwrap
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from epochtrain.config_ignored import (
    IgnoredSetting,
    _default_at,
    keeping_ignored,
    keeps_ignored,
    refuse_ignored,
    report_ignored_changes,
)
from epochtrain.suggestions import close_matches

if TYPE_CHECKING:
    import gymnasium as gym

__all__ = [
    "ActionKind",
    "Config",
    "FieldInfo",
    "action_settings",
    "check_field_names",
    "check_value",
    "describe",
    "field_docs",
    "fields_info",
    "keeping_ignored",
    "param",
    "validate",
]

T = TypeVar("T")
TConfig = TypeVar("TConfig", bound="Config")

_RANGE = "epochtrain.range"
_ACTIONS = "epochtrain.actions"

ActionKind = Literal["box", "discrete"]
"""The actions a setting applies to alone: ``"box"`` (Gaussian, continuous) or
``"discrete"``."""


@dataclass(frozen=True)
class _Range:
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    allow_inf: bool = False

    def holds(self, value: float) -> bool:
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
            and (self.lt is None or value < self.lt)
        )

    def text(self) -> str:
        bounds = ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt))
        return " and ".join(f"{op} {_number(b)}" for op, b in bounds if b is not None)


def _number(bound: float) -> str:
    """A bound as it reads best: an int in full (``4294967295``), a float in ``g`` form."""
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def param(
    default: T,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    allow_inf: bool = False,
    actions: ActionKind | None = None,
) -> T:
    """A field default with its allowed range (bounds apply to numbers, and to each element
    of a tuple of numbers; ``None`` is allowed when the type says ``| None``).

    A float must be finite unless ``allow_inf`` (for a value where ``inf`` means something,
    such as a clip that is off); NaN is always rejected. ``actions`` declares a setting
    that only applies to Box (``"box"``) or Discrete (``"discrete"``) actions: under the
    other kind it is ignored (:meth:`Config.ignored_for`)."""
    rng = _Range(ge=ge, gt=gt, le=le, lt=lt, allow_inf=allow_inf)
    metadata: dict[str, Any] = {_RANGE: rng}
    if actions is not None:
        metadata[_ACTIONS] = actions
    field: T = dataclasses.field(default=default, metadata=metadata)
    return field


@dataclass(frozen=True)
class FieldInfo:
    """One config field as the CLI and the docs show it."""

    name: str
    type: Any
    default: Any
    help: str
    allowed: str


_DOCS: dict[type, dict[str, str]] = {}
_HINTS: dict[type, dict[str, Any]] = {}


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass ``cls`` and of its bases, read from source."""
    if cls in _DOCS:
        return _DOCS[cls]
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        if not isinstance(body, ast.ClassDef):
            continue
        statements = body.body
        for stmt, nxt in itertools.pairwise(statements):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[stmt.target.id] = " ".join(inspect.cleandoc(nxt.value.value).split())
    _DOCS[cls] = docs
    return docs


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def describe(tp: Any) -> str:
    """A type as users read it: ``float``, ``int or None``, ``one of 'raise', 'stop'``."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in typing.get_args(tp))
    if origin is tuple:
        return f"a list of {describe(typing.get_args(tp)[0])}"
    if tp is type(None):
        return "None"
    return str(getattr(tp, "__name__", tp))


def _allowed(tp: Any, rng: _Range | None) -> str:
    text = describe(tp)
    if rng is not None and rng.text():
        text += f" ({rng.text()}{', inf allowed' if rng.allow_inf else ''})"
    return text


def fields_info(cls: type[Config]) -> list[FieldInfo]:
    """Every field of ``cls``: name, type, default, help text and allowed values."""
    docs = field_docs(cls)
    hints = _hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else None
        rng = f.metadata.get(_RANGE)
        out.append(
            FieldInfo(
                f.name, hints[f.name], default, docs.get(f.name, ""), _allowed(hints[f.name], rng)
            )
        )
    return out


def check_field_names(cls: type, names: typing.Iterable[str]) -> None:
    """``TypeError`` for the first of ``names`` that is not a field of dataclass ``cls``,
    naming its close matches and every field."""
    fields = {f.name for f in dataclasses.fields(cls)}
    for key in names:
        if key not in fields:
            raise TypeError(
                f"{cls.__name__} has no field {key!r}{close_matches(key, fields)}; "
                f"fields: {', '.join(sorted(fields))}"
            )


class _Mismatch(Exception):
    pass


def _coerce(tp: Any, value: Any) -> Any:
    """``value`` as type ``tp`` (int -> float, list -> tuple); raise _Mismatch if it is not."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value)
            except _Mismatch:
                continue
        raise _Mismatch
    if origin is Literal:
        if value in typing.get_args(tp) and not isinstance(value, bool):
            return value
        raise _Mismatch
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise _Mismatch
        (elem,) = typing.get_args(tp)[:1]
        return tuple(_coerce(elem, v) for v in value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Mismatch
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise _Mismatch
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, os.PathLike):  # paths are kept as str: plain data in files
            return os.fspath(value)
        raise _Mismatch
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise _Mismatch


def _in_range(value: Any, rng: _Range) -> bool:
    if isinstance(value, tuple):
        return all(_in_range(v, rng) for v in value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return rng.holds(value)
    return True


def _finite(value: Any, allow_inf: bool) -> bool:
    """No NaN in ``value`` (a float or a tuple of them), and no inf unless ``allow_inf``."""
    if isinstance(value, tuple):
        return all(_finite(v, allow_inf) for v in value)
    if isinstance(value, float):
        return not math.isnan(value) and (allow_inf or not math.isinf(value))
    return True


def validate(config: Config) -> None:
    """Check every field of ``config`` against its type and range; coerce int -> float and
    list -> tuple in place. Raise ``TypeError``/``ValueError`` naming the field."""
    cls = type(config)
    for f in dataclasses.fields(cls):
        value = getattr(config, f.name)
        coerced = _checked(cls, f, value)
        if coerced is not value:
            object.__setattr__(config, f.name, coerced)


def check_value(cls: type[Config], name: str, value: Any) -> Any:
    """``value`` as field ``name`` of ``cls`` would hold it (int -> float, list -> tuple),
    or the ``TypeError``/``ValueError`` that :func:`validate` raises for it there; the
    other fields and the cross-field rules of :meth:`Config.check` are not looked at."""
    (f,) = (f for f in dataclasses.fields(cls) if f.name == name)
    return _checked(cls, f, value)


def _checked(cls: type[Config], f: dataclasses.Field[Any], value: Any) -> Any:
    """``value`` coerced to the type of field ``f`` of ``cls``, after its range check."""
    tp = _hints(cls)[f.name]
    rng: _Range | None = f.metadata.get(_RANGE)
    try:
        coerced = _coerce(tp, value)
    except _Mismatch:
        raise TypeError(
            f"{cls.__name__}.{f.name} must be {_allowed(tp, rng)}, got {value!r}: "
            f"set {f.name} to {describe(tp)}"
        ) from None
    allow_inf = rng is not None and rng.allow_inf
    if not _finite(coerced, allow_inf):
        must, fix = ("a number, not NaN", "") if allow_inf else ("finite", "a finite ")
        raise ValueError(
            f"{cls.__name__}.{f.name} must be {must}, got {value!r}: "
            f"set {f.name} to {fix}{_allowed(tp, rng)}"
        )
    if rng is not None and not _in_range(coerced, rng):
        raise ValueError(
            f"{cls.__name__}.{f.name} must be {_allowed(tp, rng)}, got {value!r}: "
            f"set {f.name} within {rng.text()}"
        )
    return coerced


@dataclass(frozen=True, kw_only=True)
class Config:
    """Base of the settings dataclasses: validated on construction, plain-data round trip."""

    def __post_init__(self) -> None:
        validate(self)
        self.check()

    def check(self) -> None:
        """Cross-field rules; subclasses extend it (call ``super().check()``). Here: a
        setting of :meth:`ignored_settings` is refused, unless within
        :func:`keeping_ignored`."""
        if not keeps_ignored():
            refuse_ignored(self.ignored_settings(), f"{type(self).__name__}.")

    def ignored_settings(self) -> list[IgnoredSetting]:
        """The settings this config's algorithm would ignore under its other settings
        (``alpha_lr`` with ``auto_alpha`` off), whatever the env; a setting at its class
        default never counts. Subclasses extend it (:meth:`ignored_if_set`)."""
        return []

    def ignored_if_set(self, name: str, why: str, fix: str) -> list[IgnoredSetting]:
        """``[IgnoredSetting(name, value, why, fix)]`` when setting ``name`` is away from
        its class default, else ``[]``: the building block of :meth:`ignored_settings`."""
        value = getattr(self, name)
        if value == _default_at(self, name):
            return []
        return [IgnoredSetting(name, value, why, fix)]

    def ignored_for(
        self, action_space: gym.Space[Any], *, env_id: str | None = None
    ) -> list[IgnoredSetting]:
        """The settings declared for one kind of actions (``param(..., actions="box")``),
        away from their defaults, that ``action_space`` (of the env ``env_id``, for the
        words) is not of; those :meth:`ignored_settings` lists already are left out."""
        import gymnasium as gym

        if isinstance(action_space, gym.spaces.Discrete):
            actual: ActionKind = "discrete"
        elif isinstance(action_space, gym.spaces.Box):
            actual = "box"
        else:  # no built-in policy acts on it: building the policy says so
            return []
        named = {s.name for s in self.ignored_settings()}
        found = []
        for name, kind in action_settings(self).items():
            if kind == actual or name in named:
                continue
            words = "Box (continuous)" if kind == "box" else "Discrete"
            whose = "the actions" if env_id is None else f"the actions of {env_id}"
            why = f"it applies to {words} actions only, and {whose} are {action_space}"
            found += self.ignored_if_set(name, why, f"drop {name}")
        return found

    def replace(self: TConfig, **changes: object) -> TConfig:
        """A copy with ``changes``; an unknown name is a ``TypeError`` naming close matches.

        A changed setting the run would ignore is refused; one left ignored by the change
        of another (``auto_alpha`` off, ``alpha_lr`` kept) is a ``UserWarning``; one this
        config held already (read from a file) passes (:func:`report_ignored_changes`)."""
        check_field_names(type(self), changes)
        with keeping_ignored():
            changed = dataclasses.replace(self, **changes)
        if not keeps_ignored():  # else the caller judges the whole (a spec's change)
            report_ignored_changes(self, changed, f"{type(self).__name__}.")
        return changed

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data (nested configs as dicts, tuples as lists)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Config):
                value = value.to_dict()
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls: type[TConfig], data: Mapping[str, Any]) -> TConfig:
        """Build from :meth:`to_dict`'s output; missing fields take their defaults."""
        if not isinstance(data, Mapping):
            raise TypeError(f"{cls.__name__}.from_dict needs a mapping, got {data!r}")
        check_field_names(cls, data)
        return cls(**data)


def action_settings(config: Config) -> dict[str, ActionKind]:
    """``{name: kind}`` of the settings of ``config`` declared for one kind of actions
    (``param(..., actions=...)``) and away from their defaults: those
    :meth:`Config.ignored_for` needs the action space to judge."""
    return {
        f.name: f.metadata[_ACTIONS]
        for f in dataclasses.fields(config)
        if _ACTIONS in f.metadata and getattr(config, f.name) != f.default
    }
