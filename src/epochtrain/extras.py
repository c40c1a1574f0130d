"""Optional extras: import a package that only some features need, or fail in one line.

``require("wandb", extra="wandb")`` returns the imported module, or raises
:class:`MissingExtraError` saying which ``pip install`` brings it. The core
(``import epochtrain``) never imports an optional package; the module that needs one calls
:func:`require` where it is used.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXTRAS", "MissingExtraError", "require"]

EXTRAS = ("plot", "wandb", "mlflow", "video", "minari", "ray", "envpool", "peers")
"""The optional extras of ``pyproject.toml`` (``pip install epochtrain[all]`` takes all but
``peers``, which pins other RL libraries for ``benchmarks/peers.py``)."""


class MissingExtraError(ImportError):
    """An optional package is not installed; the message names the extra that brings it."""


def require(module: str, *, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming ``epochtrain[extra]``."""
    if extra not in EXTRAS:
        raise ValueError(f"extra must be one of {EXTRAS}, got {extra!r}")
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module} is not installed: pip install 'epochtrain[{extra}]' ({exc})"
        ) from exc
