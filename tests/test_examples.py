"""The scripts in examples/ run to the end as a user would run them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"


def test_every_example_has_a_test() -> None:
    tests_dir = Path(__file__).resolve().parent
    texts = [p.read_text() for p in tests_dir.rglob("test_*.py") if p != Path(__file__)]
    texts.append(Path(__file__).read_text().split("def run_example", 1)[1])
    for example in EXAMPLES_DIR.glob("*.py"):
        assert any(example.name in text for text in texts), f"no test runs {example.name}"


def run_example(name: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``examples/<name>`` in ``cwd`` as a user would; it must exit 0."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLES_DIR / name)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1200,  # a hang guard: the slowest example takes 140 s on a quiet 2-core VM
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def test_demo_solves_cartpole_and_writes_tensorboard_logs(tmp_path: Path) -> None:
    result = run_example("demo_ppo_cartpole.py", tmp_path)
    epoch_lines = [ln for ln in result.stdout.splitlines() if ln.startswith("Epoch #")]
    assert epoch_lines, result.stdout
    assert "Done (stop_fn)" in result.stdout  # stopped because it solved the task
    mean = float(result.stdout.split("Mean test return: ")[1].split()[0])
    assert mean >= 475
    assert list((tmp_path / "runs").rglob("events.out.tfevents.*"))


@pytest.mark.slow
def test_offline_example_records_a_medium_dataset_and_td3bc_beats_it(tmp_path: Path) -> None:
    result = run_example("offline_pendulum.py", tmp_path)
    data = tmp_path / "offline_pendulum" / "pendulum_medium.buf"
    assert data.is_file()
    sidecar = json.loads(data.with_name(data.name + ".json").read_text())
    assert sidecar["policy"] == "ppo" and sidecar["n_steps"] == 20_000
    assert -700 <= sidecar["return_mean"] <= -250, sidecar  # a "medium" policy
    epochs = [ln for ln in result.stdout.splitlines() if ln.startswith("Epoch #")]
    assert len(epochs) == 5, result.stdout
    last = epochs[-1]  # "... td3bc R1, bc R2, dataset R3"
    td3bc = float(last.split("td3bc ")[1].split(",")[0])
    assert td3bc >= sidecar["return_mean"], last


@pytest.mark.slow
def test_custom_algorithm_registers_with_one_line_and_learns(tmp_path: Path) -> None:
    result = run_example("custom_algorithm.py", tmp_path)
    assert 'algo = "linear-pg"' in result.stdout  # a RunSpec like the built-in algorithms
    returns = [float(x) for x in re.findall(r"test return ([\d.]+)", result.stdout)]
    assert len(returns) == 8
    assert max(returns) > 150 > returns[0] / 2  # CartPole's random policy scores about 20
