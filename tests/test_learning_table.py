"""The learning-bar table of ``benchmarks/learning.py``: what docs/benchmarks.md shows."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "learning.py"


@pytest.fixture(scope="module")
def learning() -> ModuleType:
    spec = importlib.util.spec_from_file_location("learning_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def row(case: str, seed: int, final: float, *, target: float | None = 475.0) -> dict[str, Any]:
    return {
        "case": case,
        "env": "CartPole-v1",
        "seed": seed,
        "budget": 50_000,
        "offline": False,
        "target": target,
        "final_return": final,
        "reached": target is not None and final >= target,
        "seconds": 10.0 * (seed + 1),
        "env_steps_per_s": 5000.0,
        "overrides": {},
    }


def test_newest_run_per_seed_counts_and_reached_is_counted(learning: ModuleType) -> None:
    rows = [row("dqn-cartpole", 0, 100.0), row("dqn-cartpole", 0, 500.0)]
    rows += [row("dqn-cartpole", 1, 480.0), row("dqn-cartpole", 2, 300.0)]
    table = learning.summary_table(rows)
    line = next(ln for ln in table.splitlines() if "dqn-cartpole" in ln)
    assert "**427 ± 89.9** (500, 480, 300)" in line  # seed 0's rerun replaced its first run
    assert "| 2/3 |" in line and "| 20 s |" in line
    assert "--seeds 0 1 2`" in line


def test_a_single_seed_shows_no_made_up_spread(learning: ModuleType) -> None:
    table = learning.summary_table([row("td3-halfcheetah", 0, 4384.4, target=None)])
    line = next(ln for ln in table.splitlines() if "td3-halfcheetah" in ln)
    assert "**4384** (4384)" in line and "±" not in line
    assert "| – | **4384**" in line  # no target
