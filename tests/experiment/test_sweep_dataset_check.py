"""A sweep checks each offline run's dataset against its env before any run starts
(epochtrain.experiment.runner): a dataset recorded on another env is refused naming the
run and the mismatch, not found by that run after the others have trained."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochtrain.cli import main
from epochtrain.experiment import grid, run_experiment

SETTINGS = {"max_epoch": 1, "step_per_epoch": 5, "episode_per_test": 1, "num_test_envs": 1}


@pytest.fixture(scope="module")
def cartpole_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "cartpole.buf"
    argv = ["collect", "--env", "CartPole-v1", "--random", "--steps", "100", "--out", str(path)]
    assert main(argv) == 0
    return path


def test_a_dataset_of_another_env_is_refused_before_any_run_naming_run_and_mismatch(
    cartpole_data: Path, tmp_path: Path
) -> None:
    """The CartPole run trained, then the Pendulum run failed on its first epoch."""
    specs = grid(
        ["bc"], ["CartPole-v1", "Pendulum-v1"], [0], dataset=str(cartpole_data), **SETTINGS
    )
    out = tmp_path / "exp"
    with pytest.raises(
        ValueError,
        match=r"^run bc-Pendulum-v1-s0: the observations of the dataset '.*cartpole\.buf' have "
        r"shape \(4,\), the policy's observation space is Box\(.*\(3,\), float32\)",
    ):
        run_experiment(specs, out, show_progress=False)
    assert not out.exists()
    # the runs whose datasets fit their envs pass the check and train
    fitting = grid(["bc", "cql"], ["CartPole-v1"], [0], dataset=str(cartpole_data), **SETTINGS)
    experiment = run_experiment(fitting, out, show_progress=False)
    assert [(run.run_id, run.status) for run in experiment.runs] == [
        ("bc-CartPole-v1-s0", "finished"),
        ("cql-CartPole-v1-s0", "finished"),
    ]


def test_the_sweep_command_exits_2_with_one_line_before_any_run(
    cartpole_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "exp"
    argv = ["sweep", "--algo", "bc", "cql", "--env", "CartPole-v1", "Pendulum-v1"]
    argv += ["--seeds", "0-1", "--dataset", str(cartpole_data), "--out", str(out)]
    argv += ["--max-epoch", "1", "--step-per-epoch", "5", "--episode-per-test", "1"]
    assert main([*argv, "--no-progress"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "run bc-Pendulum-v1-s0: " in lines[0] and "shape (4,)" in lines[0]
    assert not out.exists() and "finished" not in captured.out
