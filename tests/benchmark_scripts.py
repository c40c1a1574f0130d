"""Loading a script of ``benchmarks/`` as a module, for the tests of the scripts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_script(name: str, module_name: str | None = None) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (registered in ``sys.modules``, so its
    dataclasses resolve); the folder goes on ``sys.path`` for the scripts' own imports."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(module_name or name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
