"""``import epochtrain`` imports no submodule (nor torch); each public name comes from the
module that defines it on first use, in every spelling (epochtrain/__init__.py)."""

from __future__ import annotations

import ast
import importlib
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import epochtrain

INIT = Path(epochtrain.__file__)


def run_python(code: str) -> str:
    """Run ``code`` in a new interpreter (nothing of epochtrain imported yet); its stdout."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def type_checking_imports() -> dict[str, str]:
    """``{name: module}`` of the ``from M import X as X`` lines under ``if TYPE_CHECKING:``
    in epochtrain/__init__.py: what mypy and editors see."""
    tree = ast.parse(INIT.read_text())
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    seen: dict[str, str] = {}
    for stmt in block.body:
        assert isinstance(stmt, ast.ImportFrom) and stmt.module is not None
        for alias in stmt.names:
            assert alias.asname == alias.name, f"{alias.name} is not re-exported as itself"
            seen[alias.name] = stmt.module
    return seen


def test_importing_the_package_imports_neither_torch_nor_a_submodule() -> None:
    code = (
        "import sys, epochtrain, epochtrain.cli_interrupts\n"
        "print(sorted(m for m in sys.modules if m.startswith(('torch', 'epochtrain.'))))"
    )
    # cli_interrupts (and errors, which it imports): what `python -m epochtrain` needs to
    # end a Ctrl-C in its imports with one line
    assert run_python(code).split() == ["['epochtrain.cli_interrupts',", "'epochtrain.errors']"]


def test_the_names_mypy_sees_are_the_public_names_and_the_same_objects() -> None:
    seen = type_checking_imports()
    assert sorted([*seen, "__version__"]) == sorted(epochtrain.__all__)
    for name, module in seen.items():
        assert getattr(epochtrain, name) is getattr(importlib.import_module(module), name), name


def test_every_public_name_resolves_in_every_spelling_in_a_new_process() -> None:
    """Each name's first use is by one of three spellings in turn; each gives the object of
    the submodule that defines it, and ``dir()`` lists every name before any is used."""
    code = f"""
import importlib, json, sys
import epochtrain
import epochtrain as et
listed = set(dir(epochtrain))
wrong = []
for i, name in enumerate(epochtrain.__all__):
    if i % 3 == 0:
        namespace = {{}}
        exec(f"from epochtrain import {{name}} as value", namespace)
        value = namespace["value"]
    else:
        value = getattr(epochtrain if i % 3 == 1 else et, name)
    module = {type_checking_imports()!r}.get(name, "epochtrain")
    if value is not getattr(importlib.import_module(module), name) or name not in listed:
        wrong.append(name)
star = {{}}
exec("from epochtrain import *", star)
print(json.dumps({{"wrong": wrong, "star": sorted(set(epochtrain.__all__) - set(star))}}))
"""
    assert json.loads(run_python(code)) == {"wrong": [], "star": []}


def test_a_submodule_is_an_attribute_once_the_package_is_imported() -> None:
    """As when ``import epochtrain`` imported them all: ``epochtrain.trainer.HOOK_POINTS``."""
    from epochtrain.trainer import HOOK_POINTS

    out = run_python("import epochtrain\nprint(list(epochtrain.trainer.HOOK_POINTS))")
    assert out.strip() == str(list(HOOK_POINTS))


def test_a_name_it_does_not_have_is_an_attribute_error_naming_it() -> None:
    misspelt = "RunSpecc"
    with pytest.raises(AttributeError, match=r"^module 'epochtrain' has no attribute 'RunSpecc'$"):
        getattr(epochtrain, misspelt)
    assert not hasattr(epochtrain, "__wrapped__")  # dunders: never a submodule (__main__)


def test_a_process_importing_only_the_registry_sees_every_algorithm() -> None:
    """The registry imports and registers the algorithms itself: a processes-backend or
    Ray worker, or a script, that never imports the package's names still finds them."""
    from epochtrain.registry import ALGORITHMS

    code = (
        "import sys\nfrom epochtrain.registry import ALGORITHMS\n"
        "print(sorted(ALGORITHMS), 'epochtrain.factory' in sys.modules)"
    )
    assert run_python(code).strip() == f"{sorted(ALGORITHMS)} False"


def test_a_spec_unpickled_in_a_new_process_finds_its_algorithm() -> None:
    spec = epochtrain.RunSpec.default("td3bc", "Pendulum-v1")
    code = (
        f"import pickle\nspec = pickle.loads({pickle.dumps(spec)!r})\n"
        "print(spec.entry.policy_cls.__name__, spec.entry.kind)"
    )
    assert run_python(code).split() == ["TD3BC", "offline"]
