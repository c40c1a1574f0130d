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
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import itertools
import math
import os
import textwrap
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

__all__ = [
    "OTHER_LIBRARY_NAMES",
    "Config",
    "FieldInfo",
    "check_field_names",
    "close_matches",
    "describe",
    "field_docs",
    "fields_info",
    "param",
    "validate",
]

T = TypeVar("T")
TConfig = TypeVar("TConfig", bound="Config")

_RANGE = "epochtrain.range"


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
        parts = []
        if self.ge is not None:
            parts.append(f">= {self.ge:g}")
        if self.gt is not None:
            parts.append(f"> {self.gt:g}")
        if self.le is not None:
            parts.append(f"<= {self.le:g}")
        if self.lt is not None:
            parts.append(f"< {self.lt:g}")
        return " and ".join(parts)


def param(
    default: T,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    allow_inf: bool = False,
) -> T:
    """A field default with its allowed range (bounds apply to numbers, and to each element
    of a tuple of numbers; ``None`` is allowed when the type says ``| None``).

    A float must be finite unless ``allow_inf`` (for a value where ``inf`` means something,
    such as a clip that is off); NaN is always rejected."""
    rng = _Range(ge=ge, gt=gt, le=le, lt=lt, allow_inf=allow_inf)
    field: T = dataclasses.field(default=default, metadata={_RANGE: rng})
    return field


@dataclass(frozen=True)
class FieldInfo:
    """One config field as the CLI and the docs show it."""

    name: str
    type: Any
    default: Any
    help: str
    allowed: str


OTHER_LIBRARY_NAMES: Mapping[str, tuple[str, ...]] = types.MappingProxyType(
    {
        # Stable-Baselines3 (constructor and ``learn`` arguments)
        "learning_rate": ("lr",),
        # off-policy (SB3 >= 2.7): n-step returns; on-policy: env steps per env per rollout
        "n_steps": ("n_step", "step_per_collect"),
        "n_epochs": ("repeat_per_collect",),
        "n_envs": ("num_envs",),
        "learning_starts": ("warmup_steps",),
        "train_freq": ("step_per_collect",),
        "gradient_steps": ("update_per_step",),
        "target_update_interval": ("target_update_freq",),
        "exploration_fraction": ("epsilon_decay_steps",),
        "exploration_initial_eps": ("epsilon_start",),
        "exploration_final_eps": ("epsilon_end",),
        "ent_coef": ("alpha", "auto_alpha"),  # SAC's temperature; "auto" tunes it
        "target_policy_noise": ("policy_noise",),
        "target_noise_clip": ("noise_clip",),
        "action_noise": ("exploration_noise",),
        "net_arch": ("hidden",),
        "rms_prop_eps": ("rms_eps",),
        "total_timesteps": ("max_epoch", "step_per_epoch"),
        # Tianshou v2 trainer params and algorithm arguments (v1: estimation_step, eps_clip)
        "max_epochs": ("max_epoch",),
        "epoch_num_steps": ("step_per_epoch",),
        "collection_step_num_env_steps": ("step_per_collect",),
        "collection_step_num_episodes": ("episode_per_collect",),
        "update_step_num_repetitions": ("repeat_per_collect",),
        "update_step_num_gradient_steps_per_sample": ("update_per_step",),
        "test_step_num_episodes": ("episode_per_test",),
        "test_in_training": ("test_in_train",),
        "num_training_envs": ("num_envs",),
        "n_step_return_horizon": ("n_step",),
        "estimation_step": ("n_step",),
        "eps_clip": ("clip_range",),
        "hidden_sizes": ("hidden",),
    }
)
"""Setting names of Stable-Baselines3 and Tianshou -> the epochtrain settings that play their
part, for the "did you mean" of an unknown name (spelling alone misleads: SB3's ``n_epochs``
is ``repeat_per_collect``, not ``max_epoch``)."""


def close_matches(name: str, choices: typing.Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices``, or ``""``.

    A name from another library (:data:`OTHER_LIBRARY_NAMES`) suggests its counterparts
    among ``choices`` and nothing else; ``lr`` where only per-network rates exist suggests
    them (``actor_lr``, ``critic_lr``...); any other name, the closest spellings.
    """
    pool = sorted(set(choices))
    wanted = OTHER_LIBRARY_NAMES.get(name, (name,))
    found = [w for w in wanted if w in pool and w != name]
    if "lr" in wanted and "lr" not in pool:
        found += [c for c in pool if c.endswith("_lr")]
    if not found and name not in OTHER_LIBRARY_NAMES:
        found = difflib.get_close_matches(name, pool, n=3, cutoff=0.6)
    if not found:
        return ""
    return " (did you mean " + " or ".join(repr(f) for f in found) + "?)"


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
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        value = getattr(config, f.name)
        tp = hints[f.name]
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
        if coerced is not value:
            object.__setattr__(config, f.name, coerced)


@dataclass(frozen=True, kw_only=True)
class Config:
    """Base of the settings dataclasses: validated on construction, plain-data round trip."""

    def __post_init__(self) -> None:
        validate(self)
        self.check()

    def check(self) -> None:
        """Cross-field rules; subclasses extend it (call ``super().check()``)."""

    def replace(self: TConfig, **changes: object) -> TConfig:
        """A copy with ``changes``; an unknown name is a ``TypeError`` naming close matches."""
        check_field_names(type(self), changes)
        return dataclasses.replace(self, **changes)

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
