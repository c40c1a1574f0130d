"""The resume contract, for every algorithm in ``ALGORITHMS``.

Run 2N epochs uninterrupted; separately run N epochs, save a checkpoint, load it in a
fresh process and run N more: every ``EpochStats`` field (wall-clock timings aside) and
every tensor of the policy's state (weights, target networks, optimizer moments) is
bitwise identical. CPU, seeded, ``SyncVectorEnv`` of classic-control envs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from epochtrain.registry import ALGORITHMS
from tests.resume_cases import N_EPOCHS, build, env_for, make_dataset, snapshot

ROOT = Path(__file__).resolve().parents[1]


def assert_same_state(left: Any, right: Any, where: str = "policy") -> None:
    """Nested state dicts hold the same keys and bitwise-equal tensors."""
    if isinstance(left, torch.Tensor):
        assert isinstance(right, torch.Tensor) and left.dtype == right.dtype, where
        assert torch.equal(left, right), f"{where} differs"
    elif isinstance(left, dict):
        assert isinstance(right, dict) and set(left) == set(right), where
        for key in left:
            assert_same_state(left[key], right[key], f"{where}.{key}")
    elif isinstance(left, list | tuple):
        assert isinstance(right, list | tuple) and len(left) == len(right), where
        for i, (a, b) in enumerate(zip(left, right, strict=True)):
            assert_same_state(a, b, f"{where}[{i}]")
    else:
        assert left == right, f"{where}: {left!r} != {right!r}"


@pytest.fixture(scope="module")
def contract_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """For each algorithm: the uninterrupted run, and N epochs + a resume in a fresh process."""
    out = tmp_path_factory.mktemp("resume")
    for env_id in {env_for(algo) for algo in ALGORITHMS}:
        make_dataset(env_id, out / f"{env_id}.buffer")
    runs: dict[str, dict[str, Any]] = {}
    for algo in ALGORITHMS:
        full = build(algo, out)
        uninterrupted = snapshot(full, list(full))
        first = build(algo, out)
        first_stats = [next(first) for _ in range(N_EPOCHS)]
        first.save_checkpoint(out / algo / "ckpt")
        runs[algo] = {"uninterrupted": uninterrupted, "first": snapshot(first, first_stats)}
    env = {**os.environ, "EPOCHTRAIN_TEST_THREADS": str(torch.get_num_threads())}
    result = subprocess.run(
        [sys.executable, "-m", "tests.resume_cases", str(out), *ALGORITHMS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for algo in ALGORITHMS:
        runs[algo]["resumed"] = torch.load(out / algo / "resumed.pt", weights_only=False)
    return runs


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_resumed_run_equals_uninterrupted_run(
    algo: str, contract_runs: dict[str, dict[str, Any]]
) -> None:
    run = contract_runs[algo]
    full, first, resumed = run["uninterrupted"], run["first"], run["resumed"]
    assert len(full["stats"]) == 2 * N_EPOCHS
    assert first["stats"] == full["stats"][:N_EPOCHS]
    assert [s["epoch"] for s in resumed["stats"]] == list(range(N_EPOCHS + 1, 2 * N_EPOCHS + 1))
    for resumed_epoch, full_epoch in zip(resumed["stats"], full["stats"][N_EPOCHS:], strict=True):
        assert resumed_epoch == full_epoch
    assert_same_state(resumed["policy"], full["policy"])
