"""The spaces of the envs are seeded from the run's seed (epochtrain.envs.seed_spaces): two
runs of one seed write byte-equal env snapshots, and an env wrapper that samples its own
spaces gives the same run, uninterrupted or resumed."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control import CartPoleEnv
from gymnasium.vector import AutoresetMode

from epochtrain import make_trainer
from epochtrain.envs import seed_spaces
from tests.faults.envs import dqn_trainer


class NoisyObservation(gym.ObservationWrapper[Any, Any, Any]):
    """Adds noise drawn from its own observation space to each observation and draws an
    action of the env below it (unused), as a domain-randomising wrapper might; keeps every
    draw in ``draws``."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
        self.draws: list[float] = []

    def observation(self, observation: Any) -> Any:
        noise = self.observation_space.sample()
        self.draws += [float(noise[0]), float(self.env.action_space.sample())]
        return (observation + 0.01 * noise).astype(np.float32)


def noisy_cartpole() -> gym.Env[Any, Any]:
    """The sampling wrapper below a time limit: a wrapper level with a space of its own."""
    return gym.wrappers.TimeLimit(NoisyObservation(CartPoleEnv()), max_episode_steps=50)


def noisy_vec(n: int) -> gym.vector.SyncVectorEnv:
    fns = [noisy_cartpole for _ in range(n)]
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)


def draws(envs: gym.vector.VectorEnv[Any, Any, Any]) -> list[list[float]]:
    """Each sub-env's draws."""
    return [list(sub_env.env.draws) for sub_env in envs.envs]


def noisy_run(**params: Any) -> Any:
    return dqn_trainer(noisy_vec(2), test_envs=noisy_vec(2), max_epoch=2, **params)


SHORT: dict[str, dict[str, Any]] = {
    "ppo": {"step_per_epoch": 256},
    "dqn": {"step_per_epoch": 64, "step_per_collect": 64, "warmup_steps": 64, "buffer_size": 1000},
}


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_two_runs_of_one_seed_write_byte_equal_env_snapshots(algo: str) -> None:
    """Reproduced: the env snapshots of two runs of seed 0 differed in the RNG of sub-env
    0's observation and action spaces (gymnasium's batch_space starts it unseeded)."""
    snapshots = []
    for _ in range(2):
        trainer = make_trainer(algo, "CartPole-v1", seed=0, max_epoch=1, episode_per_test=2,
                               show_progress=False, verbose=False, **SHORT[algo])  # fmt: skip
        trainer.run()
        snapshots.append(trainer.state_dict()["train_collector"]["env"])
        trainer.close()
    assert isinstance(snapshots[0], bytes)
    assert snapshots[0] == snapshots[1]


def test_a_wrapper_sampling_its_spaces_gives_the_same_run_for_the_same_seed() -> None:
    runs = []
    for _ in range(2):
        trainer = noisy_run()
        trainer.run()
        runs.append(trainer)
    first, second = runs
    train, test = draws(first.train_collector.env), draws(first.test_collector.env)
    assert all(train) and all(test)
    assert train == draws(second.train_collector.env)
    assert test == draws(second.test_collector.env)
    weights = [run.policy.state_dict() for run in runs]
    tensors = [k for k, v in weights[0].items() if isinstance(v, torch.Tensor)]
    assert tensors and all(torch.equal(weights[0][k], weights[1][k]) for k in tensors)
    # every sub-env draws from a stream of its own, the test envs from others than training
    streams = [tuple(d[:6]) for d in (*train, *test)]
    assert len(set(streams)) == len(streams)
    for run in runs:
        run.close()


def test_a_resumed_run_draws_from_the_spaces_as_the_uninterrupted_one(tmp_path: Path) -> None:
    whole = noisy_run()
    whole.run()
    half = noisy_run()
    next(half)
    half.save_checkpoint(tmp_path / "ckpt")
    half.close()
    resumed = noisy_run()
    resumed.load_checkpoint(tmp_path / "ckpt")
    next(resumed)
    # the training envs come back from the checkpoint with their spaces' streams
    assert draws(resumed.train_collector.env) == draws(whole.train_collector.env)
    # the test envs are built anew: the epoch-2 test step draws what the whole run's did
    test_whole, test_resumed = draws(whole.test_collector.env), draws(resumed.test_collector.env)
    assert all(test_resumed)
    assert [d[-len(r) :] for d, r in zip(test_whole, test_resumed, strict=True)] == test_resumed
    whole.close()
    resumed.close()


def samples(envs: gym.vector.VectorEnv[Any, Any, Any]) -> list[Any]:
    spaces = [envs.observation_space, envs.action_space]
    spaces += [e.observation_space for e in getattr(envs, "envs", [])]
    return [np.asarray(s.sample()).tolist() for s in spaces]


def test_seed_spaces_depends_on_seed_and_stream_only_and_reaches_async_envs_own_spaces() -> None:
    def sync() -> gym.vector.VectorEnv[Any, Any, Any]:
        return gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")

    seeded = []
    for seed, stream in ((1, (0,)), (1, (0,)), (2, (0,)), (1, (1,))):
        envs = sync()
        seed_spaces(envs, seed, stream=stream)
        seeded.append(samples(envs))
        envs.close()
    assert seeded[0] == seeded[1]
    assert seeded[2] != seeded[0] and seeded[3] != seeded[0]
    sub_envs = seeded[0][2:]
    assert len({str(s) for s in sub_envs}) == 3  # one stream per sub-env
    # AsyncVectorEnv: its sub-envs are in worker processes; its own spaces are seeded
    make = functools.partial(gym.make, "CartPole-v1")
    runs = []
    for _ in range(2):
        envs = gym.vector.AsyncVectorEnv([make, make])
        seed_spaces(envs, 1, stream=(0,))
        runs.append(samples(envs))
        envs.close()
    assert runs[0] == runs[1]


def test_an_offline_runs_test_envs_spaces_are_seeded_from_the_run_too() -> None:
    from tests.trainer.tiny import build

    runs = []
    for _ in range(2):
        trainer = build("offline", max_epoch=2)
        trainer.test_collector.env = noisy_vec(2)
        trainer.run()
        runs.append(draws(trainer.test_collector.env))
        trainer.close()
    assert all(runs[0]) and runs[0] == runs[1]
