"""Policy.obs_input: Discrete observations one-hot encoded, uint8 pixels scaled to [0, 1],
float Boxes as they are, for every algorithm, acting and learning (as Stable-Baselines3's
``preprocess_obs``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from epochtrain.algorithms.base import Policy
from epochtrain.algorithms.dqn import DQN
from epochtrain.data import ReplayBuffer
from epochtrain.factory import make_trainer
from epochtrain.registry import ALGORITHMS
from tests.algorithms.checks import assert_same_state, two_updates

DISCRETE_ACT = gym.spaces.Discrete(2)
BOX_ACT = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
PIXELS = gym.spaces.Box(0, 255, (2, 3, 1), np.uint8)
UNIT_PIXELS = gym.spaces.Box(0.0, 1.0, (2, 3, 1), np.float32)
"""The float Box a pixel policy must behave as: ``PIXELS`` divided by 255."""


def algo_action_spaces() -> list[tuple[str, gym.Space[Any]]]:
    """Every algorithm with every kind of action space it takes (SAC, CQL, BC, PG, A2C and
    PPO both: discrete SAC included)."""
    discrete_only, box_only = {"dqn"}, {"ddpg", "td3", "td3bc"}
    pairs: list[tuple[str, gym.Space[Any]]] = []
    for algo in ALGORITHMS:
        if algo not in box_only:
            pairs.append((algo, DISCRETE_ACT))
        if algo not in discrete_only:
            pairs.append((algo, BOX_ACT))
    return pairs


ALGO_ACTS = algo_action_spaces()
ALGO_IDS = [f"{algo}-{type(space).__name__}" for algo, space in ALGO_ACTS]


def build(algo: str, obs_space: gym.Space[Any], act_space: gym.Space[Any]) -> Policy[Any]:
    entry = ALGORITHMS[algo]
    # TD3BC's per-feature state statistics are shaped as the observation space (() for a
    # Discrete), not as its one-hot input: compared without them
    overrides: dict[str, Any] = {"normalize_obs": False} if algo == "td3bc" else {}
    torch.manual_seed(0)
    return entry.policy_cls(obs_space, act_space, entry.config_cls(**overrides))


def actions(act_space: gym.Space[Any], steps: int) -> list[np.ndarray]:
    if isinstance(act_space, gym.spaces.Discrete):
        return [np.array([t % 2], np.int64) for t in range(steps)]
    return [np.array([[np.sin(t)]], np.float32) for t in range(steps)]


def buffer_of(obs: list[np.ndarray], act_space: gym.Space[Any]) -> ReplayBuffer:
    """One env's transitions ``obs[t] -> obs[t + 1]``, rewards varying, one termination."""
    steps = len(obs) - 1
    buffer = ReplayBuffer(steps, 1)
    for t, act in enumerate(actions(act_space, steps)):
        buffer.add(
            obs[t][None],
            act,
            np.array([0.1 * t], np.float32),
            np.array([t == 5]),
            np.array([False]),
            obs[t + 1][None],
        )
    return buffer


# ------------------------------------------------------------------ Discrete: one-hot
@pytest.mark.parametrize("start", [0, 3, -2])
def test_a_discrete_observation_is_its_one_hot_row_whatever_its_start(start: int) -> None:
    policy = DQN(gym.spaces.Discrete(5, start=start), DISCRETE_ACT)
    assert policy.obs_encoding == "one_hot"
    obs = torch.tensor([start + 4, start, start + 2])
    out = policy.obs_input(obs)
    assert out.dtype == torch.float32 and out.device == policy.device
    assert out.tolist() == [[0, 0, 0, 0, 1], [1, 0, 0, 0, 0], [0, 0, 1, 0, 0]]
    rollout = torch.tensor([[start, start + 1], [start + 3, start + 4]])  # [time, env]
    assert torch.equal(policy.obs_input(rollout), F.one_hot(rollout - start, 5).float())
    assert policy.q_net.net[0].in_features == 5


@pytest.mark.parametrize("bad", [5, -1])
def test_a_discrete_observation_outside_the_space_is_refused_naming_it(bad: int) -> None:
    policy = DQN(gym.spaces.Discrete(5, start=10), DISCRETE_ACT)
    with pytest.raises(ValueError, match=rf"observations \[{10 + bad}\] lie outside.*Discrete"):
        policy.act(torch.tensor([12, 10 + bad]))


@pytest.mark.parametrize(("algo", "act_space"), ALGO_ACTS, ids=ALGO_IDS)
def test_every_algorithm_acts_and_learns_on_a_discrete_as_on_its_one_hot_box(
    algo: str, act_space: gym.Space[Any]
) -> None:
    """A Discrete(5, start=10) policy acts and learns bit for bit as a Box(5) policy given
    the one-hot rows: the same weights, actions, and weights after two gradient steps."""
    discrete = build(algo, gym.spaces.Discrete(5, start=10), act_space)
    one_hot = build(algo, gym.spaces.Box(0.0, 1.0, (5,), np.float32), act_space)
    for name in ("obs_mean", "obs_std") if algo == "td3bc" else ():  # unused here
        one_hot.register_buffer(name, discrete.get_buffer(name).clone())
    assert_same_state(discrete, one_hot, stepped=False)
    index = torch.arange(10, 15)
    assert torch.equal(
        discrete.act(index, deterministic=True)[0],
        one_hot.act(F.one_hot(index - 10, 5).float(), deterministic=True)[0],
    )
    assert discrete.act(index)[0].shape[0] == 5  # exploring acts too
    visits = [t % 5 for t in range(13)]
    two_updates(discrete, buffer_of([np.array(10 + i, np.int64) for i in visits], act_space))
    rows = np.eye(5, dtype=np.float32)
    two_updates(one_hot, buffer_of([rows[i] for i in visits], act_space))
    assert_same_state(discrete, one_hot)


def test_loading_weights_of_a_discrete_fed_as_one_number_names_the_one_hot_change() -> None:
    policy = DQN(gym.spaces.Discrete(16), gym.spaces.Discrete(4))
    old = policy.state_dict()
    old["q_net.net.0.weight"] = torch.zeros(64, 1)  # what an older epochtrain saved
    with pytest.raises(
        RuntimeError,
        match=r"'q_net\.net\.0\.weight': saved by an older epochtrain, which fed the "
        r"Discrete\(16\) observation to the networks as one number: a Discrete observation "
        r"is now one-hot encoded \(16 inputs\)",
    ):
        policy.load_state_dict(old)
    assert policy.state_mismatch_note(torch.Size([64, 16]), torch.Size([64, 2])) is None


# ------------------------------------------------------------------ uint8 pixels
def test_uint8_pixels_are_scaled_to_the_unit_range_and_float_ones_pass_as_they_are() -> None:
    policy = DQN(PIXELS, DISCRETE_ACT)
    assert policy.obs_encoding == "pixels"
    obs = torch.tensor([[[[0], [51], [255]], [[1], [128], [254]]]], dtype=torch.uint8)
    out = policy.obs_input(obs)
    assert out.dtype == torch.float32 and out.shape == obs.shape
    assert torch.equal(out, obs.float() / 255) and out.max().item() == 1.0
    # an ObservationNormalizer's float32 output is normalised already: not divided again
    normalised = torch.randn(1, 2, 3, 1)
    assert policy.obs_input(normalised) is normalised


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Box(0, 10, (4,), np.uint8),  # codes, not intensities
        gym.spaces.Box(0.0, 255.0, (4,), np.float32),
        gym.spaces.Box(-1.0, 1.0, (4,), np.float32),
    ],
)
def test_other_boxes_reach_the_networks_as_they_are(space: gym.spaces.Box) -> None:
    policy = DQN(space, DISCRETE_ACT)
    obs = torch.as_tensor(np.stack([space.sample() for _ in range(3)]))
    assert policy.obs_encoding == "as_is" and policy.obs_input(obs) is obs


@pytest.mark.parametrize(("algo", "act_space"), ALGO_ACTS, ids=ALGO_IDS)
def test_every_algorithm_acts_and_learns_on_uint8_pixels_as_on_them_divided_by_255(
    algo: str, act_space: gym.Space[Any]
) -> None:
    pixels, unit = build(algo, PIXELS, act_space), build(algo, UNIT_PIXELS, act_space)
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, PIXELS.shape, dtype=np.uint8) for _ in range(13)]
    scaled = [f.astype(np.float32) / np.float32(255) for f in frames]
    obs = torch.as_tensor(np.stack(frames))
    assert torch.equal(
        pixels.act(obs, deterministic=True)[0],
        unit.act(torch.as_tensor(np.stack(scaled)), deterministic=True)[0],
    )
    two_updates(pixels, buffer_of(frames, act_space))
    two_updates(unit, buffer_of(scaled, act_space))
    assert_same_state(pixels, unit)


# ------------------------------------------------------------------ learning
FROZEN_LAKE = "epochtrain_tests/FrozenLakeNotSlippery-v1"
if FROZEN_LAKE not in gym.registry:
    gym.register(
        FROZEN_LAKE,
        entry_point="gymnasium.envs.toy_text.frozen_lake:FrozenLakeEnv",
        kwargs={"is_slippery": False},
        max_episode_steps=100,
    )


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_ppo_with_its_general_settings_learns_the_deterministic_frozen_lake() -> None:
    """FrozenLake 4x4 without slipping: Discrete(16) states, return 1 at the goal. Fed as
    an index, PPO's general settings reached the goal in no test of 30k steps on 3 seeds;
    one-hot, every seed did within 10k (here: 4 passes per rollout, to stay fast)."""
    trainer = make_trainer(
        "ppo",
        FROZEN_LAKE,
        seed=0,
        max_epoch=4,
        step_per_epoch=2048,
        repeat_per_collect=4,
        stop_at=1.0,
        show_progress=False,
    )
    best = max(stats.test_collect_stat.returns_stat.mean for stats in trainer)
    assert best == 1.0
