"""An offline dataset holding NaN or inf is refused when the trainer is built, naming the
file, the field and the first such transition (not later as a NaN loss); a field the
algorithm does not read (BC: rewards) is warned about. A dataset's JSON sidecar passed as
the dataset is named as such, with the buffer file to pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochtrain import ReplayBuffer, make_trainer
from epochtrain.errors import CheckpointError

TINY: dict[str, Any] = dict(
    max_epoch=1, step_per_epoch=2, num_test_envs=1, episode_per_test=1, show_progress=False
)


def pendulum_dataset(rows: int = 20, num_envs: int = 1, *, dict_obs: bool = False) -> ReplayBuffer:
    """``rows`` vector steps of finite Pendulum-shaped transitions over ``num_envs`` envs."""
    buffer = ReplayBuffer(rows * num_envs, num_envs)
    rng = np.random.default_rng(0)
    flags = np.zeros(num_envs, bool)
    for _ in range(rows):
        obs: Any = rng.standard_normal((num_envs, 3)).astype(np.float32)
        if dict_obs:
            obs = {"pos": obs}
        act = rng.uniform(-2, 2, (num_envs, 1)).astype(np.float32)
        buffer.add(obs, act, rng.standard_normal(num_envs), flags, flags, obs)
    return buffer


def spoilt(buffer: ReplayBuffer, field: str, row: int, env: int = 0) -> ReplayBuffer:
    """``buffer`` with NaN in ``field`` at storage row ``row`` of env ``env``."""
    state = buffer.state_dict()
    state["storage"][field][row, env] = float("nan")
    buffer.load_state_dict(state)
    return buffer


@pytest.mark.parametrize("algo", ["bc", "cql", "td3bc"])
def test_nan_observations_in_a_dataset_file_are_refused_naming_file_field_and_row(
    tmp_path: Path, algo: str
) -> None:
    path = tmp_path / "pendulum.buf"
    spoilt(pendulum_dataset(), "obs", 13).save(path)
    with pytest.raises(ValueError) as info:
        make_trainer(algo, "Pendulum-v1", seed=0, dataset=str(path), **TINY)
    message = str(info.value)
    assert f"{str(path)!r}" in message
    assert "NaN or inf in 'obs' (first at transition 13)" in message
    assert "Replace or drop those transitions" in message


def test_inf_reward_is_refused_for_an_algorithm_that_reads_rewards() -> None:
    buffer = pendulum_dataset()
    state = buffer.state_dict()
    state["storage"]["rew"][4, 0] = float("inf")
    buffer.load_state_dict(state)
    with pytest.raises(ValueError, match=r"the dataset \(buffer=\) holds NaN or inf in 'rew'"):
        make_trainer("cql", "Pendulum-v1", seed=0, buffer=buffer, **TINY)


def test_nan_reward_with_bc_is_a_warning_as_bc_does_not_read_rewards() -> None:
    buffer = spoilt(pendulum_dataset(), "rew", 7)
    with pytest.warns(UserWarning, match=r"'rew' \(first at transition 7\): BC does not read"):
        trainer = make_trainer("bc", "Pendulum-v1", seed=0, buffer=buffer, **TINY)
    trainer.close()


def test_nan_action_with_bc_is_refused() -> None:
    buffer = spoilt(pendulum_dataset(), "act", 2)
    with pytest.raises(ValueError, match=r"'act' \(first at transition 2\): BC reads 'act'"):
        make_trainer("bc", "Pendulum-v1", seed=0, buffer=buffer, **TINY)


def test_nonfinite_fields_gives_flat_indices_over_envs_and_dict_keys() -> None:
    buffer = pendulum_dataset(rows=6, num_envs=2, dict_obs=True)
    assert buffer.nonfinite_fields() == {}
    state = buffer.state_dict()
    state["storage"]["obs"]["pos"][3, 1, 2] = float("-inf")
    state["storage"]["obs_next"]["pos"][5, 0, 0] = float("nan")
    state["storage"]["rew"][1, 1] = float("nan")
    state["storage"]["valid"][1, 1] = False  # never sampled: its reward does not matter
    buffer.load_state_dict(state)
    assert buffer.nonfinite_fields() == {"obs.pos": 3 * 2 + 1, "obs_next.pos": 5 * 2}


def test_a_datasets_json_sidecar_is_named_with_the_buffer_file_to_pass(tmp_path: Path) -> None:
    path = tmp_path / "pendulum.buf"
    pendulum_dataset().save(path)
    sidecar = tmp_path / "pendulum.buf.json"
    sidecar.write_text(json.dumps({"path": str(path), "env_id": "Pendulum-v1"}))
    with pytest.raises(CheckpointError) as info:
        ReplayBuffer.load(sidecar)
    message = str(info.value)
    assert "JSON sidecar" in message and f"pass {str(path)!r}" in message
    assert "may run code" not in message
