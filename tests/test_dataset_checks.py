"""An offline trainer checks its dataset's values against the policy's spaces once, when
it is built: Discrete actions out of range or fractional are refused, Box actions outside
the bounds warned about, dict observations for an array policy refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochtrain import ReplayBuffer, make_trainer

TINY: dict[str, Any] = dict(
    max_epoch=1, step_per_epoch=2, num_test_envs=1, episode_per_test=1, show_progress=False
)


def dataset(act: np.ndarray, obs_dim: int = 4, *, dict_obs: bool = False) -> ReplayBuffer:
    """One transition per action of ``act`` (a leading row axis), single env."""
    buffer = ReplayBuffer(len(act), 1)
    for a in act:
        obs: Any = np.zeros((1, obs_dim), np.float32)
        if dict_obs:
            obs = {"pos": obs}
        flags = np.zeros(1, bool)
        buffer.add(obs, np.asarray(a)[None], np.zeros(1), flags, flags, obs)
    return buffer


@pytest.mark.parametrize("bad", [4, -1])
def test_discrete_actions_out_of_range_are_refused_naming_the_file_and_count(
    tmp_path: Path, bad: int
) -> None:
    path = tmp_path / "cartpole.buf"
    dataset(np.array([0, 1, bad, bad, 1])).save(path)
    with pytest.raises(
        ValueError,
        match=rf"cartpole\.buf' holds 2 of 5 actions that are not integers in \[0, 2\) "
        rf"\(e\.g\. {bad}\).*Discrete\(2\)",
    ):
        make_trainer("bc", "CartPole-v1", seed=0, buffer=ReplayBuffer.load(path), **TINY)


def test_fractional_actions_for_a_discrete_space_are_refused_not_truncated() -> None:
    with pytest.raises(ValueError, match=r"1 of 3 actions .* \(e\.g\. 0\.5\)"):
        make_trainer(
            "cql", "CartPole-v1", seed=0, buffer=dataset(np.array([0.0, 1.0, 0.5])), **TINY
        )


def test_invalid_rows_are_not_checked() -> None:
    buffer = dataset(np.array([0, 1, 0]))
    state = buffer.state_dict()
    state["storage"]["act"][1] = 7
    state["storage"]["valid"][1] = False  # never sampled: its action does not matter
    buffer.load_state_dict(state)
    make_trainer("bc", "CartPole-v1", seed=0, buffer=buffer, **TINY)


def test_box_actions_outside_the_bounds_are_warned_about_with_count_and_range() -> None:
    act = np.array([[0.5], [-3.0], [2.0], [5.0]], np.float32)  # Pendulum: [-2, 2]
    with pytest.warns(UserWarning, match=r"2 of 4 actions outside .* \[-3, 5\]") as record:
        make_trainer("bc", "Pendulum-v1", seed=0, buffer=dataset(act, 3), **TINY)
    assert len([w for w in record if "outside" in str(w.message)]) == 1


def test_box_actions_within_the_bounds_give_no_warning(recwarn: pytest.WarningsRecorder) -> None:
    act = np.array([[0.5], [-2.0], [2.0]], np.float32)
    make_trainer("bc", "Pendulum-v1", seed=0, buffer=dataset(act, 3), **TINY)
    assert not [w for w in recwarn if "outside" in str(w.message)]


def test_dict_observations_for_an_array_policy_are_refused() -> None:
    buffer = dataset(np.array([[0.5]], np.float32), 3, dict_obs=True)
    with pytest.raises(ValueError, match=r"holds a dict observation.*Box"):
        make_trainer("bc", "Pendulum-v1", seed=0, buffer=buffer, **TINY)


def test_td3bc_on_discrete_actions_names_the_algorithms_that_fit() -> None:
    with pytest.raises(ValueError, match=r"td3bc is for continuous actions.*use bc or cql"):
        make_trainer("td3bc", "CartPole-v1", seed=0, buffer=dataset(np.array([0, 1])), **TINY)


def test_a_discrete_space_with_a_start_takes_the_policys_indices() -> None:
    """Buffers hold the policy's index 0..n-1 (data.actions shifts it to start+i for the
    env), so a Discrete(3, start=1) dataset holds 0, 1, 2."""
    from types import SimpleNamespace

    import gymnasium as gym

    from epochtrain.trainer.offline import check_dataset_spaces

    box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    policy: Any = SimpleNamespace(
        observation_space=box, action_space=gym.spaces.Discrete(3, start=1)
    )
    check_dataset_spaces(policy, dataset(np.array([0, 1, 2])))
    with pytest.raises(ValueError, match=r"not integers in \[0, 3\) \(e\.g\. 3\)"):
        check_dataset_spaces(policy, dataset(np.array([1, 2, 3])))
