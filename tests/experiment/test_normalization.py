"""Tests of epochtrain.experiment.normalization: reference and random scores."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from epochtrain.experiment import (
    NormalizedScores,
    aggregate_estimates,
    normalize_scores,
    random_score,
    reference_score,
)


def test_normalised_score_is_zero_at_random_and_one_at_the_reference() -> None:
    raw = {"a": np.array([[10.0, -50.0], [110.0, 0.0]])}
    norm = normalize_scores(
        raw,
        ["CartPole-v1", "Acrobot-v1"],
        reference_scores={"CartPole-v1": 110.0, "Acrobot-v1": 0.0},
        random_scores={"CartPole-v1": 10.0, "Acrobot-v1": -100.0},
    )
    np.testing.assert_allclose(norm["a"], [[0.0, 0.5], [1.0, 1.0]])
    assert isinstance(norm, NormalizedScores) and isinstance(norm, dict)
    assert norm.tasks == ("CartPole-v1", "Acrobot-v1")
    assert norm.random_scores == (10.0, -100.0) and norm.reference_scores == (110.0, 0.0)
    assert aggregate_estimates(norm, reps=20)["a"].n_tasks == 2  # accepted across tasks


def test_reference_defaults_to_the_envs_reward_threshold() -> None:
    assert reference_score("CartPole-v1") == gym.spec("CartPole-v1").reward_threshold
    norm = normalize_scores(
        {"a": np.array([[475.0], [247.5]])}, ["CartPole-v1"], random_scores={"CartPole-v1": 20.0}
    )
    threshold = float(gym.spec("CartPole-v1").reward_threshold)
    np.testing.assert_allclose(norm["a"][:, 0], [1.0, (247.5 - 20.0) / (threshold - 20.0)])


def test_an_env_without_reward_threshold_asks_for_a_reference() -> None:
    assert gym.spec("Pendulum-v1").reward_threshold is None
    with pytest.raises(ValueError, match=r"reference_scores=\{'Pendulum-v1'"):
        normalize_scores({"a": np.ones((2, 1))}, ["Pendulum-v1"], random_scores={"Pendulum-v1": 0})


def test_random_score_is_measured_with_a_seed() -> None:
    first = random_score("CartPole-v1", episodes=5, seed=1)
    assert random_score("CartPole-v1", episodes=5, seed=1) == first
    assert random_score("CartPole-v1", episodes=5, seed=2) != first
    assert 5.0 < first < 100.0  # random CartPole episodes last tens of steps, reward 1 each


def test_normalize_measures_the_random_score_when_not_given() -> None:
    raw = {"a": np.array([[100.0]])}
    norm = normalize_scores(raw, ["CartPole-v1"], random_episodes=5, seed=1)
    expected_random = random_score("CartPole-v1", episodes=5, seed=1)
    assert norm.random_scores == (expected_random,)
    assert norm["a"][0, 0] == pytest.approx((100.0 - expected_random) / (475.0 - expected_random))


def test_bad_normalisation_inputs_raise_value_errors_naming_them() -> None:
    raw = {"a": np.ones((2, 1))}
    with pytest.raises(ValueError, match="not a registered gymnasium env"):
        reference_score("NoSuchEnv-v9")
    with pytest.raises(ValueError, match="not a registered gymnasium env"):
        random_score("NoSuchEnv-v9")
    with pytest.raises(ValueError, match="tasks must name each of the 1"):
        normalize_scores(raw, ["CartPole-v1", "Acrobot-v1"])
    with pytest.raises(ValueError, match=r"reference_scores names tasks \['CartPol'\]"):
        normalize_scores(raw, ["CartPole-v1"], reference_scores={"CartPol": 1.0})
    with pytest.raises(ValueError, match="equal to its random score"):
        normalize_scores(
            raw,
            ["CartPole-v1"],
            reference_scores={"CartPole-v1": 5},
            random_scores={"CartPole-v1": 5},
        )
    with pytest.raises(ValueError, match=r"random_scores\['CartPole-v1'\] must be a finite"):
        normalize_scores(raw, ["CartPole-v1"], random_scores={"CartPole-v1": float("nan")})
