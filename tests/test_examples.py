"""The scripts in examples/ run to the end as a user would run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"


def test_every_example_has_a_test() -> None:
    assert sorted(p.name for p in EXAMPLES_DIR.glob("*.py")) == ["demo_ppo_cartpole.py"]


def test_demo_solves_cartpole_and_writes_tensorboard_logs(tmp_path: Path) -> None:
    demo = EXAMPLES_DIR / "demo_ppo_cartpole.py"
    result = subprocess.run(
        [sys.executable, str(demo)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    epoch_lines = [ln for ln in result.stdout.splitlines() if ln.startswith("Epoch #")]
    assert epoch_lines, result.stdout
    assert "Done (stop_fn)" in result.stdout  # stopped because it solved the task
    mean = float(result.stdout.split("Mean test return: ")[1].split()[0])
    assert mean >= 475
    assert list((tmp_path / "runs").rglob("events.out.tfevents.*"))
