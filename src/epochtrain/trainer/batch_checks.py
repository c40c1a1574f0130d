"""What a data hook op returns is checked against the batch it received: the same fields,
of the same shapes after the first dimension and dtypes of the same kinds, and one number
of rows (:func:`check_fields`, called by :class:`~epochtrain.trainer.hooks.HookTable`).
Reads shapes and dtypes only: no copy, no device sync."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

import torch
from torch import Tensor

from epochtrain.data.batch import Batch

__all__ = ["check_fields", "value_kind"]

_FIELDS: Final = tuple(field.name for field in dataclasses.fields(Batch))
_OBS_FIELDS: Final = ("obs", "obs_next")


def check_fields(op: str, point: str, received: Batch, out: Batch) -> None:
    """Refuse ``out`` (what ``op`` returned for ``received``) unless its fields fit: each
    field ``received`` had is still there, with the dimensions it had after the first and
    a dtype of the same kind (an observation may become floating: normalised pixels); and
    every field has the same number of rows (an op may drop or pick rows: ``batch[index]``).
    Reads shapes and dtypes only: no copy, no device sync."""
    shapes: list[tuple[str, tuple[int, ...], tuple[int, ...] | None]] = []
    for name in _FIELDS:
        before, after = getattr(received, name), getattr(out, name)
        if after is None:
            if before is not None:
                raise ValueError(
                    f"hook op {op} at {point!r} returned a Batch whose field "
                    f"{name!r} is None, but the batch it received holds it (shape "
                    f"{tuple(_first(before).shape)}): return every field, e.g. "
                    f"dataclasses.replace(batch, {name}=...) or batch[index]"
                )
            continue
        if isinstance(after, Tensor) and (before is None or isinstance(before, Tensor)):
            _check_kind(op, point, name, before, after)
            shapes.append((name, after.shape, None if before is None else before.shape))
        else:
            for path, new, old in _obs_pairs(op, point, name, before, after):
                _check_kind(op, point, path, old, new)
                shapes.append((path, new.shape, None if old is None else old.shape))
    rows = {shape[0] if shape else None for _, shape, _ in shapes}
    if len(rows) == 1 and all(old is None or new[1:] == old[1:] for _, new, old in shapes):
        return
    _refuse_shapes(op, point, received, shapes)


def _first(value: Any) -> Tensor:
    while not isinstance(value, Tensor):
        value = next(iter(value.values()))
    return value


def _obs_pairs(
    op: str, point: str, path: str, before: Any, after: Any
) -> list[tuple[str, Tensor, Tensor | None]]:
    """The leaves of a nested observation, as ``(path, returned, received)``; a structure
    other than the received one (other keys, a dict where a tensor was) is refused."""
    if isinstance(after, Tensor) and (before is None or isinstance(before, Tensor)):
        return [(path, after, before)]
    if isinstance(after, Mapping) and isinstance(before, Mapping) and set(after) == set(before):
        return [
            pair
            for key in after
            for pair in _obs_pairs(op, point, f"{path}[{key!r}]", before[key], after[key])
        ]

    def shown(v: Any) -> str:
        return f"a dict with keys {sorted(v)}" if isinstance(v, Mapping) else value_kind(v)

    raise TypeError(
        f"hook op {op} at {point!r} returned a Batch whose {path} is "
        f"{shown(after)}, but it received {shown(before)}: return the observation in the "
        "structure it received (a tensor for a tensor, a dict with the same keys)"
    )


def _dtype_kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_floating_point:
        return "floating"
    return "complex" if dtype.is_complex else "integer"


def _check_kind(op: str, point: str, name: str, before: Tensor | None, after: Tensor) -> None:
    if before is None or after.dtype == before.dtype:
        return
    was, now = _dtype_kind(before.dtype), _dtype_kind(after.dtype)
    if was == now or (now == "floating" and name.startswith(_OBS_FIELDS)):
        return
    raise TypeError(
        f"hook op {op} at {point!r} returned a Batch whose field {name!r} has "
        f"dtype {after.dtype} ({now}); it received {before.dtype} ({was}): keep the field "
        f"{was} (e.g. .to({before.dtype}))"
    )


def _refuse_shapes(
    op: str,
    point: str,
    received: Batch,
    shapes: list[tuple[str, tuple[int, ...], tuple[int, ...] | None]],
) -> None:
    """Raise naming the first field whose shape does not fit (error path only)."""
    counts = Counter(new[0] if new else None for _, new, _ in shapes)
    given = received.shape[0]
    # the batch's rows: the most common among the fields (the received ones on a tie)
    rows = max(counts, key=lambda r: (counts[r], r == given))
    for name, new, old in shapes:
        expected = (rows, *(new[1:] if old is None else old[1:]))
        if tuple(new) != expected:
            raise ValueError(
                f"hook op {op} at {point!r} returned a Batch whose field {name!r} "
                f"has shape {tuple(new)}, expected {expected} (the {rows} rows of the "
                f"batch's other fields; received: {'none' if old is None else tuple(old)}): a "
                "field of another shape would be broadcast over the batch or fail later. "
                "Change every field alike: select rows with batch[index], or "
                f"dataclasses.replace(batch, {name}=<a tensor of shape {expected}>)"
            )


def value_kind(value: object) -> str:
    """``value`` in words for an error message: ``"None"``, or its type and a short repr."""
    return "None" if value is None else f"a {type(value).__qualname__} ({value!r:.80})"
