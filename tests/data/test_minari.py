"""Minari round trip in a temporary MINARI_DATASETS_PATH: write_minari, then
ReplayBuffer.from_minari / load_minari_buffer; transitions, episode ends and returns."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

pytest.importorskip("minari", reason="the minari extra is not installed")
pytest.importorskip("h5py", reason="minari's HDF5 storage needs h5py (minari[hdf5])")

import minari

from epochtrain.data import Collector, ReplayBuffer
from epochtrain.data.minari import load_minari_buffer, write_minari
from epochtrain.extras import MissingExtraError
from tests.fakes import SHIFTED_ACTIONS
from tests.trainer.tiny import TinyPolicy, build

pytestmark = pytest.mark.usefixtures("datasets_path")  # tests/data/conftest.py


def recorded(mode: AutoresetMode, steps: int = 300, num_envs: int = 2) -> ReplayBuffer:
    """Random CartPole transitions; ``max_episode_steps=20`` so some episodes truncate."""
    envs = gym.make_vec(
        "CartPole-v1",
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode},
        max_episode_steps=20,
    )
    envs.action_space.seed(0)
    buffer = ReplayBuffer(steps, num_envs)
    collector = Collector(TinyPolicy(envs), envs, buffer)
    collector.reset(seed=0)
    collector.collect(n_step=steps - num_envs * 2, random=True)
    return buffer


def episodes_of(buffer: ReplayBuffer) -> list[dict[str, Any]]:
    """Complete episodes, env by env, by walking the buffer's rows by hand."""
    rollout = buffer.rollout()
    out = []
    for env in range(buffer.num_envs):
        rows: list[int] = []
        for t in range(len(rollout.rew)):
            if rollout.valid is not None and not rollout.valid[t, env]:
                rows = []
                continue
            rows.append(t)
            if rollout.terminated[t, env] or rollout.truncated[t, env]:
                out.append(
                    {
                        "obs": rollout.obs[rows, env],
                        "obs_next": rollout.obs_next[rows, env],
                        "rew": rollout.rew[rows, env],
                        "truncated": bool(rollout.truncated[rows[-1], env]),
                    }
                )
                rows = []
    return out


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_a_buffer_round_trips_through_minari(tmp_path: Path, mode: AutoresetMode) -> None:
    buffer = recorded(mode)
    episodes = episodes_of(buffer)
    assert any(ep["truncated"] for ep in episodes) and not all(ep["truncated"] for ep in episodes)
    path = write_minari(buffer, "cartpole/random-v0", "CartPole-v1", algorithm_name="random")
    assert path == tmp_path / "datasets" / "cartpole" / "random-v0"
    loaded = ReplayBuffer.from_minari("cartpole/random-v0")
    assert len(loaded) == loaded.n_valid == sum(len(ep["rew"]) for ep in episodes)
    batch = loaded.rollout()
    assert torch.equal(batch.obs[:, 0], torch.cat([ep["obs"] for ep in episodes]))
    # obs_next keeps each episode's true final observation (truncation bootstraps from it)
    assert torch.equal(batch.obs_next[:, 0], torch.cat([ep["obs_next"] for ep in episodes]))
    assert torch.equal(batch.rew[:, 0], torch.cat([ep["rew"] for ep in episodes]))
    ends = np.cumsum([len(ep["rew"]) for ep in episodes]) - 1
    done = (batch.terminated | batch.truncated)[:, 0].nonzero().flatten().numpy()
    assert np.array_equal(done, ends)
    assert batch.truncated[ends, 0].tolist() == [ep["truncated"] for ep in episodes]
    dataset = minari.load_dataset("cartpole/random-v0")
    returns = [float(ep["rew"].sum()) for ep in episodes]
    meta = dataset.storage.metadata
    assert meta["recording_episodes"] == len(episodes)
    assert meta["recording_returns_mean"] == pytest.approx(np.mean(returns))
    assert meta["recording_returns_max"] == max(returns)
    assert dataset.spec.env_spec is not None and dataset.spec.env_spec.id == "CartPole-v1"


def test_a_saved_buffer_file_is_written_and_trains_an_offline_trainer(tmp_path: Path) -> None:
    buffer = recorded(AutoresetMode.SAME_STEP)
    buffer.save(tmp_path / "data.pt")
    write_minari(tmp_path / "data.pt", "cartpole-random-v0", "CartPole-v1")
    loaded = load_minari_buffer(minari.load_dataset("cartpole-random-v0"))
    stats = build("offline", buffer=loaded, max_epoch=1).run()
    assert stats.gradient_step == 40


def test_a_missing_dataset_names_minari_download() -> None:
    with pytest.raises(FileNotFoundError, match="minari download cartpole/expert-v0"):
        ReplayBuffer.from_minari("cartpole/expert-v0")


def test_writing_over_an_existing_dataset_or_without_episodes_raises() -> None:
    buffer = recorded(AutoresetMode.SAME_STEP)
    write_minari(buffer, "cartpole/random-v0", "CartPole-v1")
    with pytest.raises(FileExistsError, match="already exists"):
        write_minari(buffer, "cartpole/random-v0", "CartPole-v1")
    short = recorded(AutoresetMode.SAME_STEP, steps=8)
    with pytest.raises(ValueError, match="no complete episode"):
        write_minari(short, "cartpole/short-v0", "CartPole-v1")
    with pytest.raises(ValueError, match="dataset_id must be"):
        write_minari(buffer, "", "CartPole-v1")


def test_without_minari_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "minari", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'epochtrain\[minari\]'"):
        ReplayBuffer.from_minari("cartpole/random-v0")


def test_an_env_id_of_the_module_form_is_written_under_its_registered_id() -> None:
    # "module:Env-vN" is what gymnasium.make takes; Minari's gym.spec does not import module
    buffer = recorded(AutoresetMode.SAME_STEP)
    write_minari(buffer, "cartpole/module-v0", "gymnasium.envs.classic_control:CartPole-v1")
    spec = minari.load_dataset("cartpole/module-v0").spec.env_spec
    assert spec is not None and spec.id == "CartPole-v1"


def test_a_failed_write_leaves_no_partial_dataset_so_a_rerun_works(
    datasets_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffer = recorded(AutoresetMode.SAME_STEP)
    create = minari.create_dataset_from_buffers

    def fail_midway(dataset_id: str, *args: Any, **kwargs: Any) -> Any:
        (datasets_path / dataset_id / "data").mkdir(parents=True)  # as Minari does first
        raise OSError("No space left on device")

    monkeypatch.setattr(minari, "create_dataset_from_buffers", fail_midway)
    with pytest.raises(OSError, match="No space left"):
        write_minari(buffer, "cartpole/random-v0", "CartPole-v1")
    assert not (datasets_path / "cartpole").exists()  # nor the namespace the write made
    monkeypatch.setattr(minari, "create_dataset_from_buffers", create)
    write_minari(buffer, "cartpole/random-v0", "CartPole-v1")
    assert minari.load_dataset("cartpole/random-v0").total_episodes > 0


def test_a_dataset_holds_the_envs_actions_and_is_read_back_as_the_policys_indices() -> None:
    envs = gym.make_vec(SHIFTED_ACTIONS, num_envs=2, vectorization_mode="sync")
    envs.action_space.seed(0)
    buffer = ReplayBuffer(40, 2)
    collector = Collector(TinyPolicy(envs), envs, buffer)
    collector.reset(seed=0)
    collector.collect(n_step=32, random=True)
    indices = buffer.rollout().act
    assert set(indices.unique().tolist()) == {0, 1, 2}  # the buffer holds the indices

    write_minari(buffer, "shifted/random-v0", SHIFTED_ACTIONS)
    dataset = minari.load_dataset("shifted/random-v0")
    for episode in dataset.iterate_episodes():
        assert np.array_equal(episode.actions, episode.rewards)  # what the env received
        assert set(episode.actions.tolist()) <= {5, 6, 7}
    loaded = load_minari_buffer("shifted/random-v0").rollout()
    assert torch.equal(loaded.act.flatten() + 5, loaded.rew.flatten().long())
    assert set(loaded.act.unique().tolist()) == {0, 1, 2}
