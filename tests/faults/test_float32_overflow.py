"""Env data that is finite in float64 but beyond float32's range (a reward of 1e39) is
non-finite env data: the replay buffer stores it as float32, where it is inf, so it is
refused at the env check (``on_nonfinite`` applies) instead of ending the run later as an
"inf loss"."""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from epochtrain import DQN, Collector, ReplayBuffer
from epochtrain.data.batch import ActResult, Obs
from epochtrain.data.env_faults import F32_MAX, check_finite
from epochtrain.errors import NonFiniteError
from epochtrain.trainer import OffpolicyTrainer
from epochtrain.trainer.params import OffpolicyParams

HUGE = 1e39
"""Finite in float64, inf in float32."""


class Overflowing(gym.Wrapper[np.ndarray, Any, np.ndarray, Any]):
    """CartPole with float64 observations; from its ``at``-th step on, ``value`` goes into
    the reward (``field="reward"``) or into the observation at ``columns``."""

    def __init__(
        self, field: str, at: int | None, value: float = HUGE, columns: tuple[int, ...] = (2,)
    ) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float64)
        self.field, self.at, self.value, self.columns = field, at, value, columns
        self.steps = 0

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        obs = obs.astype(np.float64)
        if self.field == "reset":
            obs[list(self.columns)] = self.value
        return obs, info

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs = obs.astype(np.float64)
        self.steps += 1
        if self.at is not None and self.steps >= self.at:
            if self.field == "reward":
                reward = self.value
            if self.field == "observation":
                for column, sign in zip(self.columns, (1.0, -1.0, 1.0, -1.0), strict=False):
                    obs[column] = sign * self.value
        return obs, reward, terminated, truncated, info


def overflowing_vec(field: str, at: int | None, **kwargs: Any) -> gym.vector.SyncVectorEnv:
    """Two envs; sub-env 1 overflows at its ``at``-th step."""
    return gym.vector.SyncVectorEnv(
        [lambda: Overflowing(field, None), lambda: Overflowing(field, at, **kwargs)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )


def collector(envs: gym.vector.VectorEnv[Any, Any, Any]) -> Collector:
    policy = DQN(envs.single_observation_space, envs.single_action_space, hidden=(8,))
    return Collector(policy, envs, ReplayBuffer(200, envs.num_envs))


def stored_finite(c: Collector) -> bool:
    assert c.buffer is not None
    rows = c.buffer.rollout()
    fields = (rows.obs, rows.rew, rows.obs_next)
    return all(isinstance(t, torch.Tensor) and bool(torch.isfinite(t).all()) for t in fields)


@pytest.mark.parametrize(
    ("field", "fix"),
    [("reward", "TransformReward"), ("observation", "TransformObservation")],
)
def test_a_value_beyond_float32_is_refused_at_the_env_check_naming_the_overflow_and_fix(
    field: str, fix: str
) -> None:
    c = collector(overflowing_vec(field, at=6))
    with pytest.raises(NonFiniteError) as info:
        c.collect(n_step=40)
    message = str(info.value)
    assert f"the {field} of sub-env 1 of 'CartPole-v1' is" in message
    assert "e+39" in message  # the value (an observation's whole row)
    assert "overflows the replay buffer's float32 storage" in message
    assert f"gymnasium.wrappers.{fix}" in message
    assert info.value.where == f"{field} of sub-env 1 of 'CartPole-v1'"
    assert info.value.env_step == 10  # 5 rows of 2 envs before sub-env 1's 6th step
    assert stored_finite(c)  # the transition is not stored


def test_opposite_huge_values_that_cancel_in_a_sum_are_found() -> None:
    # +1e39 and -1e39 in one row: their sum is 0, a per-step sum check would pass them
    c = collector(overflowing_vec("observation", at=3, columns=(1, 2)))
    with pytest.raises(NonFiniteError, match="overflows the replay buffer's float32 storage"):
        c.collect(n_step=40)
    assert stored_finite(c)


def test_an_observation_beyond_float32_at_reset_is_refused() -> None:
    c = collector(overflowing_vec("reset", at=None))
    with pytest.raises(NonFiniteError, match=r"observation of sub-env 0 .* overflows"):
        c.reset(seed=0)


def test_float64_values_float32_keeps_finite_pass_and_are_stored() -> None:
    # F32_MAX itself, and a float64 just above it that float32 rounds down to it
    for value in (F32_MAX, F32_MAX * (1 + 2**-26), -1e38):
        c = collector(overflowing_vec("reward", at=2, value=value))
        c.collect(n_step=20)
        assert stored_finite(c)


class HugeBoxEnv(gym.Env[np.ndarray, np.ndarray]):
    """Float32 observations and a float64 Box action space with bounds beyond float32's."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-HUGE, HUGE, (1,), np.float64)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.zeros(2, np.float32), 0.0, False, False, {}


class Float64Actor:
    """Acts with float64 actions of ``value`` (as a user's policy, or a random one, may)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        assert isinstance(obs, torch.Tensor)
        return torch.full((obs.shape[0], 1), self.value, dtype=torch.float64), {}

    def to_tensor(self, obs: Obs) -> Obs:
        return obs


def huge_box_vec() -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([HugeBoxEnv] * 2, autoreset_mode=AutoresetMode.SAME_STEP)


def test_float64_actions_beyond_float32_random_or_the_policys_are_refused() -> None:
    envs = huge_box_vec()
    envs.action_space.seed(0)
    c = Collector(Float64Actor(0.0), envs, ReplayBuffer(100, 2))
    with pytest.raises(NonFiniteError, match=r"action of sub-env \d .*RescaleAction"):
        c.collect(n_step=20, random=True)  # uniform in +-1e39: beyond float32 at once
    c = Collector(Float64Actor(-HUGE), huge_box_vec(), ReplayBuffer(100, 2))
    with pytest.raises(NonFiniteError, match=r"action of sub-env 0 .* overflows"):
        c.collect(n_step=20)
    c = Collector(Float64Actor(1e30), huge_box_vec(), ReplayBuffer(100, 2))
    c.collect(n_step=20)  # within float32's range: stored
    assert c.buffer is not None and bool(torch.isfinite(c.buffer.rollout().act).all())


def test_check_finite_names_a_nan_before_an_overflow_of_a_later_sub_env() -> None:
    obs = np.zeros((3, 4))
    obs[2, 0] = HUGE
    rew = np.array([0.0, np.nan, 0.0])
    with pytest.raises(NonFiniteError, match=r"reward of sub-env 1 .* is not finite"):
        check_finite(gym.make_vec("CartPole-v1", 3), obs, rew, steps=0)
    with pytest.raises(NonFiniteError, match=r"observation of sub-env 2 .* overflows"):
        check_finite(gym.make_vec("CartPole-v1", 3), obs, np.zeros(3), steps=0)


class DictObsEnv(gym.Env[dict[str, Any], np.int64]):
    """Dict observations (a float64 leaf in a nested dict); from its 3rd step on, the
    leaf holds ``value``."""

    observation_space = gym.spaces.Dict(
        {"pos": gym.spaces.Dict({"x": gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)})}
    )
    action_space = gym.spaces.Discrete(2)

    def __init__(self, value: float) -> None:
        self.value, self.t = value, 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return {"pos": {"x": np.zeros(2)}}, {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        self.t += 1
        x = np.array([0.0, self.value if self.t >= 3 else 0.0])
        return {"pos": {"x": x}}, 0.0, False, self.t >= 10, {}


@pytest.mark.parametrize(("value", "says"), [(np.nan, "is not finite"), (HUGE, "overflows")])
def test_a_dict_observations_leaf_is_checked_at_every_step(value: float, says: str) -> None:
    envs = gym.vector.SyncVectorEnv(
        [lambda: DictObsEnv(value)] * 2, autoreset_mode=AutoresetMode.SAME_STEP
    )
    c = Collector(Float64Actor(0.0), envs, ReplayBuffer(100, 2))
    with pytest.raises(NonFiniteError, match=rf"observation of sub-env 0 .* {says}") as info:
        c.collect(n_step=20, random=True)
    assert "{'pos': {'x': array([" in str(info.value)  # sub-env 0's row of each leaf
    assert "array([[" not in str(info.value)  # not every sub-env's
    assert c.buffer is not None
    stored = c.buffer.rollout().obs_next
    assert isinstance(stored, dict) and isinstance(stored["pos"], dict)
    x = stored["pos"]["x"]
    assert isinstance(x, torch.Tensor) and bool(torch.isfinite(x).all())  # never stored


def dqn_on(
    envs: gym.vector.VectorEnv[Any, Any, Any], on_nonfinite: Literal["raise", "stop"]
) -> OffpolicyTrainer[Any]:
    torch.manual_seed(0)
    policy = DQN(envs.single_observation_space, envs.single_action_space, hidden=(16,))
    params = OffpolicyParams(
        max_epoch=3, step_per_epoch=40, step_per_collect=10, update_per_step=0.5,
        batch_size=16, show_progress=False, seed=3, on_nonfinite=on_nonfinite,
    )  # fmt: skip
    return OffpolicyTrainer(
        policy=policy, params=params, train_collector=Collector(policy, envs, ReplayBuffer(1000, 2))
    )


def test_a_huge_reward_raises_at_its_env_step_not_later_as_an_inf_loss() -> None:
    trainer = dqn_on(overflowing_vec("reward", at=30), "raise")
    next(trainer)  # 40 env steps: 20 per sub-env
    with pytest.raises(NonFiniteError) as info:
        next(trainer)
    message = str(info.value)
    assert "the reward of sub-env 1 of 'CartPole-v1' is np.float64(1e+39)" in message
    assert "overflows the replay buffer's float32 storage" in message
    assert "at env step 58 (epoch 2)" in message  # 40 + 9 rows * 2 envs
    assert "loss" not in message.split("overflows")[0]


def test_a_huge_reward_under_stop_ends_the_run_at_the_env_check_with_a_finite_buffer() -> None:
    trainer = dqn_on(overflowing_vec("reward", at=30), "stop")
    stats = list(trainer)
    assert [s.epoch for s in stats] == [1, 2] and trainer.stop_reason == "nonfinite"
    assert "the reward of sub-env 1" in (trainer.nonfinite_message or "")
    assert "overflows the replay buffer's float32 storage" in (trainer.nonfinite_message or "")
    assert stats[-1].info_stat.env_step == 58
    assert stored_finite(trainer.train_collector)


class LargeFloat32(gym.ObservationWrapper[np.ndarray, Any, np.ndarray]):
    """CartPole with float32 observations scaled by ``scale``: finite, but their squares
    overflow float32 when ``scale`` is beyond about 1.8e19."""

    def __init__(self, scale: float) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.scale = np.float32(scale)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return (observation * self.scale).astype(np.float32)


@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("scale", [1e20, 1e37])
def test_large_finite_float32_observations_pass_and_are_stored(num_envs: int, scale: float) -> None:
    envs = gym.vector.SyncVectorEnv(
        [lambda: LargeFloat32(scale)] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP
    )
    c = collector(envs)
    c.collect(n_step=30)
    assert stored_finite(c)
    assert c.buffer is not None
    assert float(c.buffer.rollout().obs.abs().max()) > scale / 1e3


@pytest.mark.parametrize("value", [float("nan"), float("inf"), HUGE])
def test_one_envs_bad_reward_is_refused(value: float) -> None:
    envs = gym.vector.SyncVectorEnv(
        [lambda: Overflowing("reward", at=3, value=value)], autoreset_mode=AutoresetMode.SAME_STEP
    )
    with pytest.raises(NonFiniteError, match="reward of sub-env 0"):
        collector(envs).collect(n_step=20)
