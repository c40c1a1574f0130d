"""Envs and wrappers users bring: unpicklable wrappers, normalising wrappers in the test
envs, ClipAction, action spaces no algorithm takes, file paths as env ids, float64 spaces."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import ClipAction, NormalizeObservation, NormalizeReward, TransformReward

from epochtrain import make_trainer
from epochtrain.data.env_snapshots import env_snapshot
from epochtrain.data.spaces import unsupported_action_space_note
from epochtrain.envs import env_spec, make_envs
from epochtrain.nets import box_bounds

TINY_PPO: dict[str, Any] = {
    "seed": 0,
    "step_per_epoch": 40,
    "step_per_collect": 20,
    "batch_size": 10,
    "show_progress": False,
    "episode_per_test": 1,
    "num_envs": 2,
    "stop_at": None,
}


class F64Env(gym.Env[np.ndarray, np.ndarray]):
    """float64 observations, rewards and action Box; records the actions it receives."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float64)
        self.action_space = gym.spaces.Box(-2.0, 2.0, (2,), np.float64)
        self.actions: list[np.ndarray] = []

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.full(2, 0.1, np.float64), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.actions.append(action)
        return np.full(2, 0.1, np.float64), float(np.float64(0.1)), False, False, {}


def _norm_cartpole() -> gym.Env[Any, Any]:
    return NormalizeObservation(gym.make("CartPole-v1"))


def _rew_norm_cartpole() -> gym.Env[Any, Any]:
    return NormalizeReward(gym.make("CartPole-v1"))


@pytest.fixture
def registered() -> Iterator[list[str]]:
    """Env ids a test registers, removed from gymnasium's registry afterwards."""
    ids: list[str] = []
    yield ids
    for env_id in ids:
        gym.registry.pop(env_id, None)


def _register(ids: list[str], env_id: str, entry_point: Any) -> str:
    gym.register(env_id, entry_point=entry_point, max_episode_steps=20)
    ids.append(env_id)
    return env_id


def _pickle_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "cannot be pickled" in str(w.message)]


# --------------------------------------------------------------- 1. unpicklable envs
def test_an_unpicklable_sync_env_is_warned_about_once_naming_the_error_and_the_fix() -> None:
    envs = gym.vector.SyncVectorEnv(
        [lambda: TransformReward(gym.make("CartPole-v1"), lambda r: 2 * float(r))] * 2
    )
    envs.reset(seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert env_snapshot(envs) is None
        assert env_snapshot(envs) is None  # an epoch start's snapshot, then a checkpoint's
    found = _pickle_warnings(caught)
    assert len(found) == 1, found
    message = found[0]
    assert "Can't pickle local object" in message  # the pickling error
    for lost in ("in-flight episodes", "NormalizeObservation"):
        assert lost in message
    for fix in ("module-level entry point", "lambdas", "ObservationNormalizer"):
        assert fix in message
    envs.close()


def test_picklable_and_async_envs_are_not_warned_about() -> None:
    sync, async_ = make_envs("CartPole-v1", 1), make_envs("CartPole-v1", 1, backend="async")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert env_snapshot(sync) is not None
            assert env_snapshot(async_) is None  # documented as not saved
        assert _pickle_warnings(caught) == []
    finally:
        sync.close()
        async_.close()


def test_a_run_with_a_closure_entry_point_warns_once_over_its_epochs_and_checkpoints(
    tmp_path: Path, registered: list[str], one_torch_thread: None
) -> None:
    def make_env() -> gym.Env[Any, Any]:  # a closure: the envs' spec holds it
        return NormalizeObservation(gym.make("CartPole-v1"))

    env_id = _register(registered, "WildClosureNorm-v0", make_env)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = make_trainer(
            "ppo", env_id, max_epoch=3, checkpoint_dir=str(tmp_path / "ck"), **TINY_PPO
        )
        trainer.run()
        trainer.close()
    assert trainer.state.epoch == 3
    found = _pickle_warnings(caught)
    assert len(found) == 1, found
    assert "make_env" in found[0]


# ------------------------------------------------- 2. normalising wrappers in test envs
@pytest.mark.parametrize(
    ("entry", "wrapper", "harm"),
    [
        (_rew_norm_cartpole, "NormalizeReward", "normalised rewards"),
        (_norm_cartpole, "NormalizeObservation", "statistics of their own"),
    ],
)
def test_a_normalising_wrapper_in_the_test_envs_is_warned_about_before_any_work(
    registered: list[str], entry: Any, wrapper: str, harm: str
) -> None:
    env_id = _register(registered, f"Wild{wrapper}-v0", entry)
    with pytest.warns(UserWarning, match=r"test envs are wrapped") as caught:
        trainer = make_trainer("ppo", env_id, max_epoch=1, **TINY_PPO)
    message = next(str(w.message) for w in caught if "test envs are wrapped" in str(w.message))
    assert wrapper in message and harm in message
    assert "RewardNormalizer" in message and "ObservationNormalizer" in message
    assert trainer.state.env_step == 0  # before any work
    trainer.close()


def test_test_envs_without_normalising_wrappers_are_not_warned_about() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = make_trainer("ppo", "CartPole-v1", max_epoch=1, **TINY_PPO)
    assert not [w for w in caught if "test envs are wrapped" in str(w.message)]
    trainer.close()


# ---------------------------------------------------------------- 3. ClipAction, SAC/TD3
def test_clip_actions_infinite_box_is_refused_saying_remove_clip_action() -> None:
    space = ClipAction(gym.make("Pendulum-v1")).action_space
    assert isinstance(space, gym.spaces.Box)
    with pytest.raises(ValueError, match=r"ClipAction, remove it") as refused:
        box_bounds(space, "SAC")
    assert "RescaleAction(env" not in str(refused.value)  # gymnasium refuses it here:
    with pytest.raises(ValueError, match="infinity bounds"):
        gym.wrappers.RescaleAction(
            ClipAction(gym.make("Pendulum-v1")), np.float32(-1), np.float32(1)
        )


def test_a_finite_box_too_wide_for_float32_still_suggests_rescale_action_which_works() -> None:
    space = gym.spaces.Box(-3e38, 3e38, (1,), np.float32)
    with pytest.raises(ValueError, match=re.escape("RescaleAction(env, -1.0, 1.0)")):
        box_bounds(space, "TD3")
    env = gym.make("Pendulum-v1")
    env.action_space = space  # the advice works on such a Box
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium: float64 bounds cast to float32
        rescaled = gym.wrappers.RescaleAction(env, np.float32(-1), np.float32(1)).action_space
    assert isinstance(rescaled, gym.spaces.Box)
    box_bounds(rescaled, "TD3")


# --------------------------------------------------------- 4. unsupported action spaces
@pytest.mark.parametrize(
    ("space", "words"),
    [
        (gym.spaces.MultiDiscrete([2, 3]), ["MultiDiscrete", "not supported", "Discrete(6)"]),
        (gym.spaces.MultiBinary(3), ["MultiBinary", "not supported", "Discrete(8)", "Box"]),
        (
            gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3))),
            ["Tuple", "not supported", "one Discrete", "ActionWrapper"],
        ),
        (gym.spaces.Dict({"x": gym.spaces.Discrete(2)}), ["Dict", "not supported", "Box"]),
        (gym.spaces.Discrete(2), []),
        (gym.spaces.Box(-1, 1, (2,)), []),
    ],
)
def test_action_spaces_no_algorithm_takes_get_a_way_to_fit_them(
    space: gym.Space[Any], words: list[str]
) -> None:
    note = unsupported_action_space_note(space)
    assert (note == "") is (not words)
    for word in words:
        assert word in note


# ---------------------------------------------------------- 5. a file path as an env id
@pytest.mark.parametrize(
    ("env_id", "advice"),
    [
        ("/tmp/x/myenvs.py:Toy-v0", "use 'myenvs:Toy-v0' with '/tmp/x' on PYTHONPATH"),
        ("myenvs_nowhere.py:Toy-v0", "use 'myenvs_nowhere:Toy-v0' with its folder on PYTHONPATH"),
    ],
)
def test_a_file_path_as_env_id_module_asks_for_a_module_name(env_id: str, advice: str) -> None:
    with pytest.raises(ValueError, match="must be a module name") as refused:
        env_spec(env_id)
    assert advice in str(refused.value)
    with pytest.raises(ValueError, match="install it or put it on PYTHONPATH"):
        env_spec("no_such_module_anywhere:Toy-v0")  # a module name: the usual message


# --------------------------------------------------------------- 6. float64 spaces
def test_float64_spaces_are_stored_float32_and_sac_acts_in_float32_as_documented(
    registered: list[str], one_torch_thread: None
) -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "specs.md").read_text()
    observations = page.split("## Observations", 1)[1]
    assert "float64 observations and rewards are stored" in " ".join(observations.split())
    env_id = _register(registered, "WildF64-v0", F64Env)
    trainer = make_trainer(
        "sac",
        env_id,
        seed=0,
        max_epoch=1,
        step_per_epoch=30,
        step_per_collect=10,
        warmup_steps=10,
        batch_size=8,
        buffer_size=100,
        num_envs=1,
        episode_per_test=1,
        show_progress=False,
        stop_at=None,
    )
    next(iter(trainer))
    buffer = trainer.train_collector.buffer
    assert buffer is not None
    storage = buffer.state_dict()["storage"]
    assert str(storage["obs"].dtype) == str(storage["rew"].dtype) == "torch.float32"
    vector_env = trainer.train_collector.env.unwrapped
    assert isinstance(vector_env, gym.vector.SyncVectorEnv)
    sub_env = vector_env.envs[0].unwrapped
    assert isinstance(sub_env, F64Env)
    assert {a.dtype for a in sub_env.actions[10:]} == {np.dtype(np.float32)}  # after warm-up
    trainer.close()


@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn", "sac", "td3", "ddpg", "bc"])
def test_every_algorithm_refusing_a_multi_discrete_action_space_says_how_to_flatten_it(
    algo: str,
) -> None:
    from epochtrain.registry import ALGORITHMS

    cls = ALGORITHMS[algo].policy_cls
    with pytest.raises(ValueError, match=r"MultiDiscrete action spaces are not supported"):
        cls(gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.MultiDiscrete([2, 3]))
