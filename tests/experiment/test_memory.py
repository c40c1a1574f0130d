"""The lockstep backend refuses, before any run opens, a sweep whose runs (buffers, offline
datasets, networks) would not fit in memory together, and names the processes backend as
the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from epochtrain.data import buffer_storage
from epochtrain.data.buffer_storage import size_text
from epochtrain.dataset import record_dataset
from epochtrain.envs import make_envs
from epochtrain.experiment import grid, run_experiment, runner
from epochtrain.experiment.memory import (
    buffer_bytes,
    check_lockstep_memory,
    network_bytes,
    run_memory,
)
from epochtrain.experiment.prepare import prepare_runs
from epochtrain.spec import RunSpec

BUFFER = 100_000
CARTPOLE_TRANSITION = 2 * 4 * 4 + 8 + 4 + 3  # obs, obs_next (4 float32), act (int64), rew, flags
"""Bytes of one CartPole transition in a replay buffer."""


def never_opened(run_dir: Path) -> Any:
    raise AssertionError(f"{run_dir.name} was opened before the memory check refused the sweep")


def test_a_dqn_runs_buffer_counts_every_transition_of_buffer_size() -> None:
    (spec,) = grid(["dqn"], ["CartPole-v1"], [0], buffer_size=BUFFER)
    envs = make_envs("CartPole-v1", 1)
    try:
        spaces = (envs.single_observation_space, envs.single_action_space)
    finally:
        envs.close()
    assert buffer_bytes(spec, *spaces) == BUFFER * CARTPOLE_TRANSITION


def test_lockstep_refuses_runs_whose_buffers_together_exceed_the_memory_before_opening_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each run alone fits (4.9 MB of 8 MB), the three together (14.6 MB) do not
    monkeypatch.setattr(buffer_storage, "available_memory", lambda: 10_000_000)
    monkeypatch.setattr(runner, "open_trainer", never_opened)
    specs = grid(["dqn"], ["CartPole-v1"], [0, 1, 2], buffer_size=BUFFER)
    with pytest.raises(ValueError, match="lockstep backend holds all 3 pending runs") as error:
        run_experiment(specs, tmp_path, show_progress=False)
    message = str(error.value)
    assert "would take 14.6 MB (buffers 14.1 MB, networks with gradients" in message
    assert "80% of the 10.0 MB" in message
    assert "--backend processes --workers 1" in message and "lower buffer_size" in message
    assert not list(tmp_path.glob("*/checkpoints/*")) and not list(tmp_path.glob("*/log.jsonl"))


def test_runs_whose_buffers_fit_together_pass_and_the_processes_backend_is_not_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = grid(["dqn"], ["CartPole-v1"], [0, 1, 2], buffer_size=BUFFER)
    monkeypatch.setattr(buffer_storage, "available_memory", lambda: 20_000_000)
    check_lockstep_memory(prepare_runs(specs, tmp_path / "fits"))
    monkeypatch.setattr(buffer_storage, "available_memory", lambda: 10_000_000)
    ran: list[int] = []
    monkeypatch.setattr(
        runner, "run_processes", lambda run_dirs, *_, **__: ran.append(len(run_dirs))
    )
    run_experiment(specs, tmp_path / "processes", backend="processes", show_progress=False)
    assert ran == [3]


def test_a_buffer_too_large_alone_is_told_to_lower_buffer_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(buffer_storage, "available_memory", lambda: 5_000_000)
    run_dirs = prepare_runs(grid(["dqn"], ["CartPole-v1"], [0, 1], buffer_size=BUFFER), tmp_path)
    with pytest.raises(
        ValueError,
        match=r"the largest run alone needs 4\.9 MB \(buffers 4\.7 MB, .*\): lower buffer_size",
    ):
        check_lockstep_memory(run_dirs)


def cartpole_spaces() -> tuple[Any, Any]:
    envs = make_envs("CartPole-v1", 1)
    try:
        return envs.single_observation_space, envs.single_action_space
    finally:
        envs.close()


DQN_NET = (64 * 4 + 64) + (64 * 64 + 64 + 64 + 1) + (64 * 64 + 64 + 2 * 64 + 2)
"""Parameters of DQN's dueling Q-network on CartPole (hidden 64, 64): trunk, value, advantage."""
A2C_NETS = (64 * 4 + 64 + 64 * 64 + 64 + 2 * 64 + 2) + (64 * 4 + 64 + 64 * 64 + 64 + 64 + 1)
"""Parameters of A2C's actor and critic on CartPole (hidden 64, 64); its log_std (2 values,
unused on Discrete actions) is no optimizer's."""


def test_a_runs_networks_count_parameters_targets_gradients_and_optimizer_state() -> None:
    spaces = cartpole_spaces()
    (dqn,) = grid(["dqn"], ["CartPole-v1"], [0])
    # Q-network and its target, the Q-network's gradient, Adam's two moments: float32
    assert network_bytes(dqn, *spaces) == 4 * (2 * DQN_NET + DQN_NET + 2 * DQN_NET)
    (a2c,) = grid(["a2c"], ["CartPole-v1"], [0])  # RMSprop: one value per parameter
    assert network_bytes(a2c, *spaces) == 4 * ((A2C_NETS + 2) + A2C_NETS + A2C_NETS)


def test_an_on_policy_run_counts_its_rollout_and_an_offline_run_its_dataset(
    tmp_path: Path,
) -> None:
    spaces = cartpole_spaces()
    (ppo,) = grid(["ppo"], ["CartPole-v1"], [0], step_per_collect=256, num_envs=8)
    assert run_memory(ppo, *spaces).buffer == 256 * CARTPOLE_TRANSITION  # 32 rows x 8 envs
    dataset = tmp_path / "random.buf"
    record_dataset(None, "CartPole-v1", 400, dataset, seed=0)
    bc = RunSpec.tuned("bc", "CartPole-v1").with_overrides({"dataset": str(dataset)})
    memory = run_memory(bc, *spaces)
    assert (memory.buffer, memory.dataset) == (0, dataset.stat().st_size)
    assert memory.total == memory.dataset + network_bytes(bc, *spaces) > memory.dataset


def test_lockstep_refuses_on_policy_runs_whose_networks_together_exceed_the_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PPO has no buffer_size: before, it counted nothing, however large its networks
    specs = grid(["ppo"], ["CartPole-v1"], [0, 1, 2], hidden=(512, 512))
    run_dirs = prepare_runs(specs, tmp_path)
    spaces = cartpole_spaces()
    per_run = run_memory(specs[0], *spaces)
    assert per_run.networks > 3 * per_run.buffer
    monkeypatch.setattr(buffer_storage, "available_memory", lambda: int(2 * per_run.total))
    with pytest.raises(ValueError, match="lockstep backend holds all 3 pending runs") as error:
        check_lockstep_memory(run_dirs)
    message = str(error.value)
    assert (
        f"networks with gradients and optimizer state {size_text(3 * per_run.networks)}" in message
    )
    assert "their envs not counted" in message and "at most 1 at once" in message
    monkeypatch.setattr(buffer_storage, "available_memory", lambda: per_run.total)
    with pytest.raises(ValueError, match=r"alone needs .*: use smaller networks"):
        check_lockstep_memory(run_dirs)
