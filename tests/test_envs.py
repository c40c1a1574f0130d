"""make_envs backends: EnvPool gives the collector the same transitions as gymnasium's
sync envs (episode ends, truncation with the true final observation, step counts)."""

from __future__ import annotations

import os
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from epochtrain.data import Collector, ReplayBuffer
from epochtrain.envs import EnvPoolVectorEnv, make_envs
from epochtrain.errors import EnvError
from epochtrain.extras import MissingExtraError
from tests.trainer.tiny import TinyPolicy


def test_sync_and_async_backends_autoreset_on_the_same_step() -> None:
    for backend in ("sync", "async"):
        envs = make_envs("CartPole-v1", 2, backend=backend)
        assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        envs.close()
    with pytest.raises(ValueError, match="backend must be one of"):
        make_envs("CartPole-v1", 2, backend="ray")


def collect(envs: gym.vector.VectorEnv[Any, Any, Any], n_step: int) -> tuple[Any, ReplayBuffer]:
    envs.action_space.seed(0)
    buffer = ReplayBuffer(4 * n_step, envs.num_envs)
    collector = Collector(TinyPolicy(envs), envs, buffer)
    collector.reset(seed=0)
    return collector.collect(n_step=n_step, random=True), buffer


def check_episodes(stats: Any, buffer: ReplayBuffer, limit: int) -> None:
    """Per env: valid rows chain (obs_next = next obs) within episodes, episodes end
    where the stats say, truncated ones after exactly ``limit`` steps."""
    batch = buffer.rollout()
    valid = torch.ones_like(batch.terminated) if batch.valid is None else batch.valid
    lens = []
    for env in range(buffer.num_envs):
        rows = valid[:, env].nonzero().flatten().tolist()
        length = 0
        for a, b in zip(rows, [*rows[1:], None], strict=True):
            length += 1
            ended = bool(batch.terminated[a, env] or batch.truncated[a, env])
            if ended:
                if batch.truncated[a, env] and not batch.terminated[a, env]:
                    assert length == limit
                    assert abs(float(batch.obs_next[a, env, 0])) < 4.8  # a real final obs
                lens.append(length)
                length = 0
            elif b is not None:
                assert torch.equal(batch.obs_next[a, env], batch.obs[b, env])
    assert sorted(lens) == sorted(stats.lens.tolist())
    assert stats.n_collected_steps == int(valid.sum())
    assert np.array_equal(np.sort(stats.returns), np.sort(stats.lens.astype(float)))


@pytest.mark.parametrize("num_envs", [1, 3])
def test_envpool_gives_the_same_collect_semantics_as_sync_envs(num_envs: int) -> None:
    pytest.importorskip("envpool", reason="the envpool extra is not installed")
    limit = 20
    sync = gym.make_vec(
        "CartPole-v1",
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        max_episode_steps=limit,
    )
    pool = EnvPoolVectorEnv("CartPole-v1", num_envs, max_episode_steps=limit)
    assert pool.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert pool.single_observation_space.shape == sync.single_observation_space.shape
    assert pool.single_action_space == sync.single_action_space
    for envs in (sync, pool):
        stats, buffer = collect(envs, 300)
        assert stats.n_collected_steps >= 300 and stats.n_collected_episodes > 5
        assert (stats.lens == limit).any() and (stats.lens < limit).any()
        check_episodes(stats, buffer, limit)
        envs.close()


def test_envpool_seeded_resets_repeat_and_unknown_tasks_name_the_fix() -> None:
    pytest.importorskip("envpool", reason="the envpool extra is not installed")
    envs = make_envs("CartPole-v1", 2, backend="envpool")
    first, _ = envs.reset(seed=3)
    envs.step(np.array([0, 1]))
    again, _ = envs.reset(seed=3)
    assert np.array_equal(first, again)
    envs.close()
    with pytest.raises(ValueError, match="backend='sync'"):
        make_envs("NoSuchTask-v9", 2, backend="envpool")


def test_without_envpool_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "envpool", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'epochtrain\[envpool\]'"):
        make_envs("CartPole-v1", 2, backend="envpool")


REGISTERING_MODULE = """
import gymnasium as gym
gym.register("ShortCartPole-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv",
             max_episode_steps=30, reward_threshold=12.5)
"""


def test_module_colon_id_imports_the_module_that_registers_the_env(tmp_path: Any) -> None:
    """``"package.module:EnvId"`` (gymnasium.make's form) is what makes a user's env work
    in every process of a run; it was refused as not registered."""
    import subprocess

    (tmp_path / "my_envs_pkg.py").write_text(REGISTERING_MODULE)
    argv = ["train", "--algo", "ppo", "--env", "my_envs_pkg:ShortCartPole-v0"]
    argv += ["--env-backend", "async", "--num-envs", "2", "--num-test-envs", "1"]
    argv += ["--episode-per-test", "2", "--max-epoch", "1", "--step-per-epoch", "64"]
    argv += ["--set", "step_per_collect=32", "--no-progress", "--logdir", ""]
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}

    def epochtrain(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "epochtrain", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)

    run = epochtrain(*argv)  # async envs: each env process imports the module itself
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert "Finished (max_epoch)" in run.stdout
    config = epochtrain("config", "--algo", "ppo", "--env", "my_envs_pkg:ShortCartPole-v0")
    assert "stop_at = 12.5" in config.stdout  # the registered env's own reward_threshold


def test_a_module_colon_id_whose_module_is_missing_names_it() -> None:
    from epochtrain.spec import RunSpec

    with pytest.raises(ValueError, match="the module 'no_such_pkg' that registers it cannot be"):
        RunSpec.tuned("ppo", "no_such_pkg:Env-v0")
    with pytest.raises(ValueError, match=r"or 'your_package.envs:YourEnv-v0'"):
        RunSpec.tuned("ppo", "NoSuchEnv-v0")


def test_a_namespaced_or_module_env_id_names_one_flat_directory(tmp_path: Any) -> None:
    """``"myns/Env-v0"`` made run directories nested under ``myns/`` that were never
    created (`epochtrain train --logdir` and every sweep failed with ENOENT)."""
    from epochtrain.cli import main
    from epochtrain.envs import env_name
    from epochtrain.experiment import grid, load_experiment, run_experiment
    from tests.experiment.settings import FAST

    assert env_name("CartPole-v1") == "CartPole-v1"
    assert env_name("ALE/Pong-ram-v5") == "ALE_Pong-ram-v5"
    assert env_name("my_pkg.envs:myns/Short-v0") == "myns_Short-v0"
    if "epochtrain-test/Short-v0" not in gym.registry:
        gym.register(
            "epochtrain-test/Short-v0",
            entry_point="gymnasium.envs.classic_control:CartPoleEnv",
            max_episode_steps=20,
        )
    argv = ["train", "--algo", "ppo", "--env", "epochtrain-test/Short-v0", "--max-epoch", "1"]
    argv += ["--step-per-epoch", "64", "--set", "step_per_collect=64", "--no-progress"]
    assert main([*argv, "--quiet", "--logdir", str(tmp_path / "runs")]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("epochtrain-test_Short-v0_ppo_seed0_")
    assert (run_dir / "spec.toml").is_file() and list((run_dir / "checkpoints").iterdir())
    specs = grid(["ppo"], ["epochtrain-test/Short-v0"], [0, 1], **FAST)
    experiment = run_experiment(specs, tmp_path / "exp", show_progress=False)
    assert sorted(p.name for p in (tmp_path / "exp").iterdir() if p.is_dir()) == [
        "ppo-epochtrain-test_Short-v0-s0",
        "ppo-epochtrain-test_Short-v0-s1",
    ]
    assert [r.status for r in load_experiment(tmp_path / "exp").runs] == ["finished"] * 2
    assert experiment.envs == ["epochtrain-test/Short-v0"]


@pytest.mark.parametrize("algo", ["ppo", "a2c", "pg"])
def test_on_policy_algorithms_train_on_envpool(algo: str) -> None:
    """EnvPool autoresets on the next step: the factory's rollout buffer has room for the
    reset rows (before, the first update found the rollout overwritten and raised)."""
    pytest.importorskip("envpool", reason="the envpool extra is not installed")
    from epochtrain import make_trainer

    settings = dict(step_per_epoch=256, step_per_collect=256, show_progress=False)
    with make_trainer(algo, "CartPole-v1", env_backend="envpool", max_epoch=2, **settings) as t:
        info = t.run()
    assert info.env_step >= 512 and info.gradient_step > 0


def test_envpool_builds_and_resets_without_warnings() -> None:
    """EnvPool's float64 Box bounds made gymnasium warn at every build and seeded reset."""
    pytest.importorskip("envpool", reason="the envpool extra is not installed")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        envs = make_envs("CartPole-v1", 2, backend="envpool")
        envs.reset(seed=3)
        envs.step(np.zeros(2, dtype=np.int64))
        envs.close()


def test_closed_async_envs_kept_referenced_hold_few_file_descriptors() -> None:
    """A sweep keeps its closed trainers (their results): each closed env set held the
    descriptors of its ended processes until it was garbage-collected."""

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    kept = []
    before = open_fds()
    for _ in range(5):
        envs = make_envs("CartPole-v1", 2, backend="async")
        envs.reset(seed=0)
        envs.close()
        kept.append(envs)
    assert (open_fds() - before) / len(kept) <= 3  # the error queue's pipe, at most
    collector = Collector(TinyPolicy(kept[0]), kept[0])
    with pytest.raises(EnvError):  # closed envs: an error naming them, not a closed Process's
        collector.collect(n_step=2)
