"""benchmarks/sample_path.py: both ways of drawing an n-step minibatch are timed in turn."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def sample_path() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("sample_path", BENCHMARKS / "sample_path.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_both_paths_are_timed_on_every_draw_and_compared(
    sample_path: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    us = sample_path.measure("td3", draws=6, seed=0)
    assert set(us) == {"two-pass", "one-pass"} and all(v > 0 for v in us.values())
    sample_path.main(["--algos", "dqn", "--draws", "4"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| dqn |")]
    assert len(rows) == 1
    two, one, ratio = (float(x) for x in rows[0].strip("|").split("|")[1:])
    assert ratio == pytest.approx(one / two, abs=0.01)
