"""docs/experiments.md: its python blocks run as written, and it covers the public API."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import epochtrain.experiment as experiment

PAGE = Path(__file__).resolve().parents[2] / "docs" / "experiments.md"


def test_doc_python_blocks_run(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    assert blocks
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), namespace)
    out = capsys.readouterr().out
    assert "P(ppo > a2c) = " in out and "optimality gap" in out


def test_doc_names_every_public_function() -> None:
    text = PAGE.read_text()
    functions = [name for name in experiment.__all__ if name[0].islower()]
    missing = [name for name in functions if f"`{name}" not in text]
    assert not missing, f"docs/experiments.md does not mention {missing}"
