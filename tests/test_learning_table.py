"""The learning-bar table of ``benchmarks/learning.py``: what docs/benchmarks.md shows."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_scripts import load_script


@pytest.fixture(scope="module")
def learning() -> ModuleType:
    return load_script("learning", "learning_bench")


def write_run(root: Path, learning: ModuleType, name: str, seed: int, finals: list[float]) -> None:
    """A finished run of case ``name`` as run_experiment writes it (spec, result, index)."""
    spec = learning.case_spec(learning.CASES[name], seed)
    run_dir = root / spec.run_id
    run_dir.mkdir(parents=True)
    spec.to_file(run_dir / "spec.toml")
    steps = [2048.0 * (i + 1) for i in range(len(finals))]
    result = {
        "format": "epochtrain-experiment",
        "version": 1,
        "run_id": spec.run_id,
        "algo": spec.algo,
        "env_id": spec.env_id,
        "seed": seed,
        "step_unit": "env_step",
        "status": "finished",
        "stop_reason": "max_epoch",
        "epochs": len(finals),
        "steps": steps,
        "test_returns": finals,
        "error": None,
        "wall_time": 10.0 * (seed + 1),
    }
    (run_dir / "result.json").write_text(json.dumps(result))
    index = root / "experiment.json"
    runs = json.loads(index.read_text())["runs"] if index.is_file() else []
    index.write_text(
        json.dumps({"format": "epochtrain-experiment", "version": 1, "runs": [*runs, spec.run_id]})
    )


def test_each_case_gets_the_tuned_preset_its_budget_and_no_early_stop(
    learning: ModuleType,
) -> None:
    dqn = learning.case_spec(learning.CASES["dqn-cartpole"], 3)
    assert (dqn.seed, dqn.stop_at) == (3, None)
    assert dqn.trainer.max_epoch == (50_000 - 1000) // 1024  # whole epochs after the warm-up
    ppo = learning.case_spec(learning.CASES["ppo-cartpole"], 0)
    assert ppo.trainer.max_epoch == 100_000 // 512 and ppo.num_envs == 8


def test_table_scores_the_last_test_and_counts_seeds_at_the_target(
    learning: ModuleType, tmp_path: Path
) -> None:
    root = tmp_path / "CartPole-v1"
    # the best test (500) comes before the last one: only the last one counts
    for seed, last in enumerate([100.0, 200.0, 480.0, 500.0]):
        write_run(root, learning, "dqn-cartpole", seed, [500.0, last])
    results = learning.read_results(tmp_path)
    assert [r.name for r in results] == ["dqn-cartpole"]
    assert results[0].finals == [100.0, 200.0, 480.0, 500.0]
    table = learning.summary_table(results)
    line = next(ln for ln in table.splitlines() if "dqn-cartpole" in ln)
    # IQM of 4 runs: the mean of the middle two (200, 480); mean 320, median 340
    assert "| **340.0** [" in line and "| 320.0 | 340.0 |" in line
    assert "| 100, 200, 480, 500 | 2/4 | 25 s |" in line
    assert "--seeds 0-3`" in line


def test_a_run_over_its_budget_does_not_count_as_reached(learning: ModuleType) -> None:
    case = learning.CASES["ppo-cartpole"]
    over = learning.CaseResult(
        name="ppo-cartpole",
        case=case,
        seeds=[0, 1],
        finals=[500.0, 500.0],
        used=[100_000.0, 100_001.0],
        seconds=[1.0, 1.0],
        target=475.0,
    )
    line = learning.summary_table([over]).splitlines()[-1]
    assert "| 1/2 |" in line and "--seeds 0 1`" in line


def test_a_case_without_target_shows_no_reached_count(learning: ModuleType) -> None:
    case = learning.CASES["td3-halfcheetah"]
    res = learning.CaseResult(
        name="td3-halfcheetah",
        case=case,
        seeds=[0],
        finals=[4384.4],
        used=[100_000.0],
        seconds=[1181.0],
        target=None,
    )
    line = learning.summary_table([res]).splitlines()[-1]
    assert "| – | **4384.4** [4384.4, 4384.4] | 4384.4 | 4384.4 | 4384 | – | 1181 s |" in line
