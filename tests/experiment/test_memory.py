"""The lockstep backend refuses, before any run opens, a sweep whose replay buffers would
not fit in memory together, and names the processes backend as the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from epochtrain.data import buffer_storage
from epochtrain.envs import make_envs
from epochtrain.experiment import grid, run_experiment, runner
from epochtrain.experiment.memory import check_lockstep_memory, replay_buffer_bytes
from epochtrain.experiment.prepare import prepare_runs

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
    assert replay_buffer_bytes(spec, *spaces) == BUFFER * CARTPOLE_TRANSITION
    (ppo,) = grid(["ppo"], ["CartPole-v1"], [0])  # one rollout, no buffer_size
    assert replay_buffer_bytes(ppo, *spaces) == 0


def test_lockstep_refuses_runs_whose_buffers_together_exceed_the_memory_before_opening_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each buffer alone fits (4.7 MB of 8 MB), the three together (14.1 MB) do not
    monkeypatch.setattr(buffer_storage, "available_memory", lambda: 10_000_000)
    monkeypatch.setattr(runner, "open_trainer", never_opened)
    specs = grid(["dqn"], ["CartPole-v1"], [0, 1, 2], buffer_size=BUFFER)
    with pytest.raises(ValueError, match="lockstep backend holds all 3 pending runs") as error:
        run_experiment(specs, tmp_path, show_progress=False)
    message = str(error.value)
    assert "14.1 MB" in message and "80% of the 10.0 MB" in message
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
        ValueError, match=r"lower buffer_size: the largest buffer alone needs 4\.7 MB"
    ):
        check_lockstep_memory(run_dirs)
