"""write_minari refuses a buffer that does not fit its env_id before writing anything;
load_minari_buffer ends an episode that carries no end flag, so episodes never run on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("minari", reason="the minari extra is not installed")
pytest.importorskip("h5py", reason="minari's HDF5 storage needs h5py (minari[hdf5])")

import gymnasium as gym
import minari
from minari.data_collector.episode_buffer import EpisodeBuffer

from epochtrain.data import ReplayBuffer
from epochtrain.data.minari import load_minari_buffer, write_minari

pytestmark = pytest.mark.usefixtures("datasets_path")  # tests/data/conftest.py


def one_episode(obs: np.ndarray, act: np.ndarray, steps: int = 4) -> ReplayBuffer:
    """A single-env buffer of one ``steps``-step episode: observation ``obs`` and action
    ``act`` at every step, truncated at the end."""
    buffer = ReplayBuffer(steps, 1)
    for t in range(steps):
        buffer.add(
            obs=obs[None],
            act=act[None],
            rew=np.ones(1, np.float32),
            terminated=np.zeros(1, bool),
            truncated=np.array([t == steps - 1]),
            obs_next=obs[None],
        )
    return buffer


PENDULUM_OBS = np.zeros(3, np.float32)
CARTPOLE_OBS = np.zeros(4, np.float32)


@pytest.mark.parametrize(
    ("obs", "act", "env_id", "words"),
    [
        (PENDULUM_OBS, np.zeros(1, np.float32), "CartPole-v1", r"observations .* shape \(3,\)"),
        (PENDULUM_OBS, np.zeros(1, np.float32), "MountainCarContinuous-v0", r"shape \(3,\)"),
        (CARTPOLE_OBS, np.float32(0.5), "CartPole-v1", r"actions .* float32 values"),
        (CARTPOLE_OBS, np.int64(2), "CartPole-v1", r"actions .* outside \[0, 2\) \(e\.g\. 2\)"),
        (np.zeros(3, np.float32), np.int64(0), "Pendulum-v1", r"actions .* shape \(\)"),
        (np.int64(16), np.int64(0), "FrozenLake-v1", r"observations .* outside \[0, 16\)"),
    ],
    ids=["pendulum-as-cartpole", "pendulum-as-mountaincar", "float-discrete", "index-2",
         "index-for-box", "frozenlake-obs-16"],
)  # fmt: skip
def test_a_buffer_that_does_not_fit_env_ids_spaces_is_refused_and_nothing_is_written(
    datasets_path: Path, obs: np.ndarray, act: np.ndarray, env_id: str, words: str
) -> None:
    buffer = one_episode(np.asarray(obs), np.asarray(act))
    with pytest.raises(ValueError, match=rf"{words}.*pass the env_id the buffer was recorded on"):
        write_minari(buffer, "wrong/env-v0", env_id)
    assert minari.list_local_datasets() == {}
    assert not (datasets_path / "wrong").exists()


def test_a_buffer_file_whose_sidecar_names_another_env_is_refused(tmp_path: Path) -> None:
    # CartPole-v0 has CartPole-v1's spaces: only the sidecar can tell them apart
    path = tmp_path / "data.buf"
    one_episode(CARTPOLE_OBS, np.int64(1)).save(path)
    path.with_name("data.buf.json").write_text(json.dumps({"env_id": "CartPole-v1"}))
    with pytest.raises(ValueError, match=r"recorded on 'CartPole-v1': pass env_id='CartPole-v1'"):
        write_minari(path, "cartpole/v0-v0", "CartPole-v0")
    assert minari.list_local_datasets() == {}
    write_minari(path, "cartpole/v1-v0", "gymnasium.envs.classic_control:CartPole-v1")
    assert "cartpole/v1-v0" in minari.list_local_datasets()


def test_box_actions_past_the_bounds_are_clipped_with_a_warning_not_silently() -> None:
    buffer = one_episode(PENDULUM_OBS, np.array([3.0], np.float32))
    with pytest.warns(UserWarning, match=r"4 of 4 actions .* range over \[3, 3\].*clipped"):
        write_minari(buffer, "pendulum/clipped-v0", "Pendulum-v1")
    episode = next(minari.load_dataset("pendulum/clipped-v0").iterate_episodes())
    assert np.all(episode.actions == 2.0)  # what Pendulum applied


def episode(i: int, steps: int, *, terminated: bool) -> EpisodeBuffer:
    """CartPole-shaped: observations 100*i + 0, 1, ...; its last step terminated or
    carrying neither flag."""
    obs = np.arange((steps + 1) * 4, dtype=np.float32).reshape(steps + 1, 4) + 100 * i
    ends = np.zeros(steps, bool)
    ends[-1] = terminated
    return EpisodeBuffer(
        id=i,
        observations=obs,
        actions=np.zeros(steps, np.int64),
        rewards=np.ones(steps),
        terminations=ends,
        truncations=np.zeros(steps, bool),
        infos={},
    )


def test_an_episode_without_an_end_flag_is_read_as_truncated_and_runs_into_no_other() -> None:
    minari.create_dataset_from_buffers(
        "cartpole/noflag-v0",
        [episode(0, 5, terminated=False), episode(1, 5, terminated=True)],
        env=gym.spec("CartPole-v1"),
        algorithm_name="random",
    )
    buffer = load_minari_buffer("cartpole/noflag-v0")
    rollout = buffer.rollout()
    assert rollout.truncated[:, 0].tolist() == [False] * 4 + [True] + [False] * 5
    assert rollout.terminated[:, 0].tolist() == [False] * 9 + [True]
    three = buffer.get(torch.arange(10), n_step=3, gamma=1.0)
    assert three.rew.tolist() == [3.0, 3.0, 3.0, 2.0, 1.0, 3.0, 3.0, 3.0, 2.0, 1.0]
    assert three.obs_next[4].tolist() == [20.0, 21.0, 22.0, 23.0]  # episode 0's last

    write_minari(buffer, "cartpole/noflag-again-v0", "CartPole-v1")
    again = minari.load_dataset("cartpole/noflag-again-v0").iterate_episodes()
    assert [len(e.rewards) for e in again] == [5, 5]
