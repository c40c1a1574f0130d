"""Tanh-squashed actions (SAC, DDPG, TD3) stay inside their Box, even saturated in float32."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor

from epochtrain.algorithms import DDPG, SAC, TD3
from epochtrain.data import Collector, ReplayBuffer

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
SATURATED = torch.tensor([[1.0], [-1.0]])  # tanh(u) for u beyond about 9, in float32


def sac_scale(space: gym.spaces.Box) -> Callable[[Tensor], Tensor]:
    return SAC(OBS_SPACE, space, hidden=(4,)).scale


def td3_to_env(space: gym.spaces.Box) -> Callable[[Tensor], Tensor]:
    return TD3(OBS_SPACE, space, hidden=(4,)).to_env_action


def random_boxes(n: int, dtype: Any = np.float32) -> list[gym.spaces.Box]:
    rng = np.random.default_rng(0)
    boxes = []
    for _ in range(n):
        low, high = np.sort(rng.uniform(-3, 3, 2))
        boxes.append(gym.spaces.Box(low, high, (1,), dtype))
    return boxes


@pytest.mark.parametrize("scaling", [sac_scale, td3_to_env], ids=["sac", "td3"])
def test_saturated_actions_stay_in_asymmetric_float32_boxes(
    scaling: Callable[[gym.spaces.Box], Callable[[Tensor], Tensor]],
) -> None:
    outside = []
    for space in random_boxes(100):  # about one in six fell one ulp outside before the clamp
        act = scaling(space)(SATURATED).numpy()
        outside += [(space, a) for a in act if not space.contains(a)]
    assert outside == []


@pytest.mark.parametrize("scaling", [sac_scale, td3_to_env], ids=["sac", "td3"])
def test_saturated_actions_stay_in_float64_boxes_not_exact_in_float32(
    scaling: Callable[[gym.spaces.Box], Callable[[Tensor], Tensor]],
) -> None:
    space = gym.spaces.Box(-0.1, 0.1, (1,), np.float64)  # float32(0.1) > 0.1
    act = scaling(space)(SATURATED).numpy()
    assert all(space.contains(a.astype(np.float64)) for a in act)
    assert float(act[0, 0]) == pytest.approx(0.1, rel=1e-6)  # the bound, rounded inwards


@pytest.mark.parametrize("cls", [SAC, DDPG, TD3])
def test_symmetric_boxes_map_exactly_without_a_clamp(cls: type[SAC | DDPG | TD3]) -> None:
    space = gym.spaces.Box(np.float32(-2.7), np.float32(2.7), (1,), np.float32)
    policy = cls(OBS_SPACE, space, hidden=(4,))
    assert policy.clamp_actions is False  # nothing to pay per act
    scale = policy.scale if isinstance(policy, SAC) else policy.to_env_action
    assert scale(SATURATED).flatten().tolist() == [space.high[0], space.low[0]]


class StrictEnv(gym.Env[np.ndarray, np.ndarray]):
    """Rewards 1 for an action inside its asymmetric Box, 0 for one outside (its high
    bound is one that ``center + half_range * 1`` passes in float32)."""

    observation_space = OBS_SPACE
    action_space = gym.spaces.Box(
        np.float32(-1.381279706954956), np.float32(0.8217701315879822), (1,), np.float32
    )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        return np.zeros(2, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        inside = self.action_space.contains(np.asarray(action, np.float32))
        return np.zeros(2, np.float32), float(inside), False, True, {}


@pytest.mark.parametrize("cls", [SAC, DDPG, TD3])
def test_a_saturated_actor_reaches_the_env_inside_its_box(cls: type[SAC | DDPG | TD3]) -> None:
    env = gym.vector.SyncVectorEnv([StrictEnv], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    policy = cls(env.single_observation_space, env.single_action_space, hidden=(4,))
    last = policy.actor.net[-1]
    assert isinstance(last, torch.nn.Linear)
    with torch.no_grad():
        last.bias.fill_(20.0)  # the tanh saturates: exactly 1 in float32, past high
    buf = ReplayBuffer(10, 1)
    Collector(policy, env, buf, exploration=False).collect(n_step=1)
    assert buf.get(torch.tensor([0])).rew.tolist() == [1.0]
