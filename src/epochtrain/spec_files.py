"""A :class:`~epochtrain.spec.RunSpec` as text: the TOML :meth:`~epochtrain.spec.RunSpec.to_toml`
writes (:func:`spec_toml`), a spec file's TOML or JSON parsed (:func:`read_spec_file`) and a
``--set`` value (:func:`parse_value`). :mod:`epochtrain.spec` holds the spec itself;
:mod:`epochtrain.spec_data` turns the parsed data into one."""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochtrain.config import Config
from epochtrain.spec_data import SECTIONS, by_suffix, text_or_none, toml_value

if TYPE_CHECKING:
    from epochtrain.spec import RunSpec

__all__ = ["parse_value", "read_spec_file", "spec_toml", "value_kinds"]


def spec_toml(spec: RunSpec) -> str:
    """``spec`` as TOML, every setting written (:meth:`~epochtrain.spec.RunSpec.to_toml`)."""

    def lines_of(obj: Config, skip: tuple[str, ...] = ()) -> list[str]:
        lines = []
        names = text_or_none(type(obj))
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.name in skip or (value is None and f.name in names):
                continue
            if isinstance(value, tuple):
                value = list(value)
            lines.append(f"{f.name} = {toml_value(value)}")
        return lines

    lines = lines_of(spec, skip=SECTIONS)
    for section in SECTIONS:
        lines += ["", f"[{section}]", *lines_of(getattr(spec, section))]
    return "\n".join(lines) + "\n"


def read_spec_file(source: Path) -> Mapping[str, Any]:
    """The data of the spec file ``source`` (``.toml`` or ``.json``, UTF-8 text, a byte
    order mark allowed), parsed; for :meth:`~epochtrain.spec.RunSpec.from_file`.
    ``FileNotFoundError`` for a missing file, ``ValueError`` naming it for a directory, a
    file that cannot be read (its ``OSError`` as the cause), one that is not UTF-8, one
    that does not parse and a JSON file naming a key twice (TOML refuses that itself)."""
    name = os.fspath(source)
    if source.is_dir():
        raise ValueError(
            f"spec file {name!r} is a directory, not a spec file: give the .toml or .json "
            "file itself"
        )
    if not source.is_file():
        raise FileNotFoundError(f"spec file {name!r} does not exist")
    try:
        raw = source.read_bytes()
    except OSError as exc:
        raise ValueError(f"spec file {name!r} cannot be read: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8-sig")  # TOML is UTF-8; Notepad starts it with a BOM
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ValueError(
            f"{source} is not UTF-8 text (byte {exc.start}, line {line}): save it as UTF-8"
        ) from exc

    def read_toml() -> Mapping[str, Any]:
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{source} is not valid TOML: {exc}") from exc

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        table: dict[str, Any] = {}
        for key, value in pairs:
            if key in table:
                raise ValueError(
                    f"{source} names {key!r} twice in one object (JSON would keep the "
                    f"last, {value!r}, silently): keep one"
                )
            table[key] = value
        return table

    def read_json() -> Mapping[str, Any]:
        try:
            data: Mapping[str, Any] = json.loads(text, object_pairs_hook=unique_keys)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source} is not valid JSON: {exc}") from exc
        return data

    data: Mapping[str, Any] = by_suffix(source, toml=read_toml, json=read_json)
    return data


_NONE_WORDS = ("none", "None", "null")
_BOOL_WORDS = {"True": True, "False": False}
_NOT_TOML = object()


def parse_value(text: str, tp: Any = None) -> Any:
    """A ``--set`` value: a TOML literal (``3e-4``, ``true``, ``[64, 64]``, ``"x"``),
    ``none``/``None``/``null`` for None, else the text as a string.

    ``tp`` is the type of the setting it is for (``float``, ``str | None``...; None:
    unknown): a float setting also takes Python's number forms that TOML lacks (``.001``,
    ``3.``), a text setting keeps the text as written where TOML reads something else
    (``2024-01-01``, ``123``, ``true``), a bool setting takes Python's ``True``/``False``.
    """
    if text in _NONE_WORDS:
        return None
    try:
        value: Any = tomllib.loads(f"v = {text}")["v"]
    except Exception:  # not a TOML literal: a bare string such as a path or a name
        value = _NOT_TOML
    if tp is None:
        return text if value is _NOT_TOML else value
    kinds = value_kinds(tp)
    if kinds == {str} and not isinstance(value, str):
        return text
    if bool in kinds and text in _BOOL_WORDS:
        return _BOOL_WORDS[text]
    if value is _NOT_TOML and float in kinds:
        try:
            return float(text)
        except ValueError:
            pass
    return text if value is _NOT_TOML else value


def value_kinds(tp: Any) -> set[type]:
    """The kinds of value a setting of type ``tp`` holds besides None: ``{float}`` for
    ``float | None``, ``{str}`` for a ``Literal`` of names, ``{tuple}`` for a list."""
    import types
    import typing

    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return {k for arg in typing.get_args(tp) if arg is not type(None) for k in value_kinds(arg)}
    if origin is typing.Literal:
        return {type(arg) for arg in typing.get_args(tp)}
    if origin is tuple:
        return {tuple}
    return {tp} if isinstance(tp, type) else {object}
