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

__all__ = ["parse_value", "read_spec_file", "spec_toml"]


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
    """The data of the spec file ``source`` (``.toml`` or ``.json``), parsed; for
    :meth:`~epochtrain.spec.RunSpec.from_file`. ``FileNotFoundError`` for a missing file,
    ``ValueError`` naming it for one that does not parse."""
    if not source.is_file():
        raise FileNotFoundError(f"spec file {os.fspath(source)!r} does not exist")
    text = source.read_text()

    def read_toml() -> Mapping[str, Any]:
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{source} is not valid TOML: {exc}") from exc

    def read_json() -> Mapping[str, Any]:
        try:
            data: Mapping[str, Any] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source} is not valid JSON: {exc}") from exc
        return data

    data: Mapping[str, Any] = by_suffix(source, toml=read_toml, json=read_json)
    return data


def parse_value(text: str) -> Any:
    """A ``--set`` value: a TOML literal (``3e-4``, ``true``, ``[64, 64]``, ``"x"``),
    ``none``/``None`` for None, else the text as a string."""
    if text in ("none", "None", "null"):
        return None
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except Exception:  # not a TOML literal: a bare string such as a path or a name
        return text
