"""Safe reading of epochtrain's files (checkpoints, buffers, datasets).

Reading never runs code from the file: :func:`safe_torch_load` uses
``torch.load(weights_only=True)`` with only epochtrain's own stats types and numpy arrays
allow-listed, and :func:`safe_unpickle` (the pickled env snapshots inside a checkpoint)
resolves only classes from gymnasium, numpy, epochtrain and the modules the caller's live
env is built from. A file that needs anything else is refused with a
:class:`~epochtrain.errors.CheckpointError` saying so. Writing is
:mod:`epochtrain.data.writes`.
"""

from __future__ import annotations

import builtins
import io
import os
import pickle
import zipfile
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from epochtrain.errors import CheckpointError

__all__ = [
    "safe_globals",
    "safe_torch_load",
    "safe_unpickle",
]


def safe_globals() -> list[Any]:
    """The non-tensor types epochtrain's files may hold, allow-listed for ``weights_only``."""
    from epochtrain import stats

    numpy_types: list[Any] = [np.ndarray, np.dtype]
    numpy_types += [type(np.dtype(t)) for t in np.sctypeDict.values()]
    core = getattr(np, "_core", None) or np.core
    numpy_types += [core.multiarray._reconstruct, core.multiarray.scalar]
    stats_types = [
        getattr(stats, name)
        for name in dir(stats)
        if isinstance(getattr(stats, name), type)
        and getattr(stats, name).__module__ == stats.__name__
    ]
    return numpy_types + stats_types


def safe_torch_load(path: str | os.PathLike[str], what: str) -> Any:
    """``torch.load(path, weights_only=True)`` with epochtrain's own types allow-listed.

    ``what`` names the file's role in messages (``"checkpoint file"``, ``"buffer file"``).
    Raises :class:`CheckpointError` naming the file when it is unreadable, not a torch
    file (judged from its first bytes before ``torch.load`` reads it: an HDF5 file, a
    plain pickle, JSON, an ``.npz``), or a torch file that would need arbitrary code (a
    global outside the allow-list) to load.
    """
    file = os.fspath(path)
    foreign = _foreign_format(file)  # before torch.load: its pickle fallback would misjudge it
    if foreign is not None:
        raise CheckpointError(f"{what} {file!r} cannot be read: {foreign}")
    try:
        with torch.serialization.safe_globals(safe_globals()):
            return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()
        detail = next((line for line in first if "GLOBAL" in line or "Unsupported" in line), "")
        raise CheckpointError(
            f"{what} {file!r} is refused: loading it would need more than tensors, numpy "
            f"arrays and epochtrain's own types ({detail.strip() or exc}); it may run code. "
            "Load only files written by epochtrain; if you trust this one, read it with "
            "torch.load(..., weights_only=False) yourself"
        ) from exc
    except FileNotFoundError as exc:
        raise CheckpointError(f"{what} {file!r} does not exist") from exc
    except Exception as exc:
        raise CheckpointError(f"{what} {file!r} cannot be read: {_unreadable(file, exc)}") from exc


_TORCH_ZIP = b"PK\x03\x04"
"""How every file torch.save writes starts: it is a zip archive (since torch 1.6)."""
_HDF5 = b"\x89HDF\r\n\x1a\n"


def _foreign_format(file: str) -> str | None:
    """Why ``file`` is not a file torch.save wrote, from its first bytes (and, for a zip
    archive, its member names), in words; None when it may be one (or cannot be opened:
    ``torch.load`` then says why)."""
    try:
        with open(file, "rb") as f:
            head = f.read(8)
    except OSError:
        return None
    not_torch = "it is not a file torch.save wrote"
    if head.startswith(_TORCH_ZIP):
        try:
            with zipfile.ZipFile(file) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError):
            return None  # torn: torch.load's error says so
        if any(name.endswith("data.pkl") for name in names):
            return None
        return f"{not_torch} (a zip archive without torch's data.pkl, such as numpy's .npz)"
    if head.startswith(_HDF5):
        return (
            f"{not_torch} (an HDF5 file, such as a Minari dataset's main_data.hdf5): read a "
            "Minari dataset by its id, --dataset minari:<dataset id> "
            "(ReplayBuffer.from_minari(<dataset id>) in Python)"
        )
    if head.startswith(b"\x80"):
        return f"{not_torch} (a plain pickle); epochtrain reads only files it wrote"
    if head.lstrip()[:1] in (b"{", b"["):
        return f"{not_torch} (JSON text); epochtrain reads only files it wrote"
    return f"{not_torch} (empty, torn at the start, or another format)"


def _unreadable(file: str, exc: Exception) -> str:
    """Why ``torch.load`` failed on ``file``, in words (torch says ``KeyError: 174812789``
    for a text file, ``EOFError`` for an empty one)."""
    try:
        with open(file, "rb") as f:
            head = f.read(4)
    except OSError as err:
        return err.strerror or str(err)
    if head != _TORCH_ZIP:
        return "it is not a file torch.save wrote (empty, torn at the start, or another format)"
    first = str(exc).split(". ")[0]
    return f"it is torn or corrupt ({type(exc).__name__}: {first})"


_SAFE_BUILTINS = frozenset(
    {
        "bool", "bytearray", "bytes", "complex", "dict", "float", "frozenset", "int",
        "list", "object", "range", "set", "slice", "str", "tuple", "type",
    }
)  # fmt: skip
_SAFE_CALLABLES = frozenset(
    {
        ("copyreg", "_reconstructor"),
        ("collections", "OrderedDict"),
        ("collections", "defaultdict"),
        ("collections", "deque"),
        ("_codecs", "encode"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.random._pickle", "__bit_generator_ctor"),
        ("numpy.random._pickle", "__generator_ctor"),
        ("numpy.random._pickle", "__randomstate_ctor"),
    }
)
_CLASS_PACKAGES = ("gymnasium", "numpy", "epochtrain")


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, modules: frozenset[str]) -> None:
        super().__init__(io.BytesIO(data))
        self.modules = modules

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _SAFE_BUILTINS:
            return getattr(builtins, name)
        if (module, name) in _SAFE_CALLABLES:
            return super().find_class(module, name)
        if module.startswith("numpy.random") and name.startswith("__pyx_unpickle_"):
            return super().find_class(module, name)  # Cython's rebuild of its own class
        package = module.split(".")[0]
        if package in _CLASS_PACKAGES or module in self.modules:
            found = super().find_class(module, name)
            if isinstance(found, type):  # classes only: no function of any module is called
                return found
        raise pickle.UnpicklingError(f"the global {module}.{name} is not allowed")


def safe_unpickle(data: bytes, *, allowed_modules: Iterable[str], what: str) -> Any:
    """Unpickle ``data`` resolving only safe globals; ``what`` names it in messages.

    Allowed: harmless builtins, numpy arrays and random generators, and *classes* (never
    functions) from gymnasium, numpy, epochtrain and ``allowed_modules`` (the modules of
    the caller's own env classes). Anything else raises :class:`CheckpointError`.
    """
    try:
        return _RestrictedUnpickler(data, frozenset(allowed_modules)).load()
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{what} is refused: {exc}; unpickling it could run code. Load only "
            "checkpoints written by epochtrain for envs built from the same classes"
        ) from exc
    except Exception as exc:
        raise CheckpointError(f"{what} cannot be read: {exc}") from exc
