"""Policy actions reach the env clipped to a bounded Box and shifted to a Discrete's start;
the buffer keeps the policy's own actions."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from epochtrain import make_trainer
from epochtrain.data import Collector, ReplayBuffer
from epochtrain.data import collector as collector_module
from epochtrain.data.actions import env_action_map, policy_action_map
from epochtrain.registry import ALGORITHMS


class Recorder(gym.Env[np.ndarray, Any]):
    """20-step episodes; remembers every action it is given and checks none."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, action_space: gym.Space[Any]) -> None:
        self.action_space = action_space
        self.seen: list[Any] = []
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> Any:
        self.seen.append(np.array(action))
        self.t += 1
        reward = float(np.asarray(action).flat[0] == 3)  # Discrete(3, start=1): 3 pays
        return np.full(2, self.t / 20, np.float32), reward, self.t >= 20, False, {}


class Fixed:
    """A policy that always returns ``value`` (one row per env)."""

    def __init__(self, value: Any) -> None:
        self.value = torch.as_tensor(value)

    def act(self, obs: Any, deterministic: bool = False) -> Any:
        return self.value.expand(len(obs), *self.value.shape).clone(), {}

    def to_tensor(self, obs: Any) -> Any:
        return obs


def vec(space: gym.Space[Any], n: int = 2) -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([lambda: Recorder(space) for _ in range(n)])


def seen(env: gym.vector.SyncVectorEnv) -> np.ndarray:
    return np.stack([a for sub in env.envs for a in sub.unwrapped.seen])


def test_a_bounded_box_gets_clipped_actions_and_the_buffer_keeps_the_policys() -> None:
    space = gym.spaces.Box(np.array([0.0, 10.0], np.float32), np.array([1.0, 20.0], np.float32))
    env = vec(space)
    buffer = ReplayBuffer(100, 2)
    Collector(Fixed([-3.0, 25.0]), env, buffer).collect(n_step=10)
    assert (seen(env) == [0.0, 20.0]).all()
    assert (buffer.sample(8).act.numpy() == [-3.0, 25.0]).all()


def test_a_discrete_with_a_start_gets_shifted_actions_and_the_buffer_keeps_indices() -> None:
    env = vec(gym.spaces.Discrete(3, start=1))
    buffer = ReplayBuffer(100, 2)
    collector = Collector(Fixed(2), env, buffer)
    collector.collect(n_step=10)
    assert set(seen(env).tolist()) == {3}
    collector.collect(n_step=40, random=True)  # warm-up: the env's samples, 1..3
    assert set(seen(env).tolist()) == {1, 2, 3}
    assert set(buffer.sample(64).act.tolist()) <= {0, 1, 2}


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_algorithms_learn_the_paying_action_of_a_discrete_with_a_start(algo: str) -> None:
    gym.register(
        "tests/StartRecorder-v0", entry_point=lambda: Recorder(gym.spaces.Discrete(3, start=1))
    )
    try:
        trainer = make_trainer(
            algo,
            "tests/StartRecorder-v0",
            max_epoch=4,
            step_per_epoch=400,
            num_envs=1,
            num_test_envs=1,
            episode_per_test=1,
            stop_at=20.0,
            show_progress=False,
            **({"warmup_steps": 100} if algo == "dqn" else {"step_per_collect": 200}),
        )
        info = trainer.run()
    finally:
        gym.registry.pop("tests/StartRecorder-v0")
    assert info.best_test_return == 20.0  # action 3 at every step


def test_maps_are_none_where_nothing_is_needed() -> None:
    assert env_action_map(gym.spaces.Discrete(4)) is None
    assert env_action_map(gym.spaces.Box(-np.inf, np.inf, (3,))) is None
    assert policy_action_map(gym.spaces.Box(-1.0, 1.0, (3,))) is None
    half = env_action_map(gym.spaces.Box(np.array([-np.inf, 0.0]), np.array([np.inf, 1.0])))
    assert half is not None and (half(np.array([[-9.0, 9.0]])) == [[-9.0, 1.0]]).all()


OBS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg", "ppo", "a2c", "pg"])
def test_an_integer_box_is_refused_by_algorithms_of_real_actions(algo: str) -> None:
    entry = ALGORITHMS[algo]
    with pytest.raises(ValueError, match=r"holds int64 actions; .* give the env a float Box"):
        entry.policy_cls(OBS, gym.spaces.Box(0, 10, (2,), np.int64), entry.config_cls())


@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg"])
def test_a_box_dimension_with_low_equal_to_high_is_refused_naming_it(algo: str) -> None:
    entry = ALGORITHMS[algo]
    space = gym.spaces.Box(
        np.array([-1.0, 0.5, 0.0], np.float32), np.array([1.0, 0.5, 1.0], np.float32)
    )
    with pytest.raises(ValueError, match=r"low >= high in dimension\(s\) \[1\]"):
        entry.policy_cls(OBS, space, entry.config_cls())


class Endless(Recorder):
    """Ends an episode only after 10,000 steps (as an env with no time limit would never)."""

    def step(self, action: Any) -> Any:
        self.t += 1
        return np.zeros(2, np.float32), 0.0, self.t >= 10_000, False, {}


def test_an_episode_that_runs_on_while_collect_waits_for_it_is_warned_about_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(collector_module, "LONG_EPISODE", 5_000)
    env = gym.vector.SyncVectorEnv([lambda: Endless(gym.spaces.Discrete(2))])
    collector = Collector(Fixed(0), env)
    with pytest.warns(UserWarning, match="has run 8,192 steps without ending .*TimeLimit"):
        collector.collect(n_episode=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        collector.collect(n_episode=1)  # once per collector
        Collector(Fixed(0), env).collect(n_step=9_000)  # a step budget ends by itself


@pytest.mark.parametrize(("algo", "clipped"), [("ppo", True), ("sac", False), ("td3", False)])
def test_only_policies_whose_actions_may_leave_the_box_are_clipped(
    algo: str, clipped: bool
) -> None:
    trainer = make_trainer(algo, "Pendulum-v1", num_envs=1, show_progress=False)
    with trainer:
        assert trainer.policy.bounded_actions is not clipped
        assert (trainer.train_collector._to_env is not None) is clipped
        if not clipped:  # what skipping the clip rests on: every action inside [-2, 2]
            trainer.train_collector.collect(n_step=300)
            acts = trainer.train_collector.buffer.sample(300).act
            assert bool(((acts >= -2.0) & (acts <= 2.0)).all())
