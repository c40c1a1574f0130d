"""benchmarks/sample_path.py: both ways of drawing an n-step minibatch are timed in turn."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.benchmark_scripts import load_script


@pytest.fixture(scope="module")
def sample_path() -> ModuleType:
    return load_script("sample_path")


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
