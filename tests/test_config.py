"""Config dataclasses: one validator, ranges beside fields, docstrings as help, keywords."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import pytest

from epochtrain import ALGORITHMS, PPO, DQNConfig, PPOConfig, TD3Config
from epochtrain.config import field_docs, fields_info

CARTPOLE = gym.make("CartPole-v1")
BAD: dict[str, dict[str, Any]] = {
    "policy_delay": {"policy_delay": 1.5},
    "normalize_advantage": {"normalize_advantage": 1},
}


def test_every_field_of_every_registered_config_has_help_text() -> None:
    for entry in ALGORITHMS.values():
        missing = [f.name for f in fields_info(entry.config_cls) if not f.help]
        assert not missing, f"{entry.config_cls.__name__}: no docstring for {missing}"


def test_range_declared_beside_the_field_is_enforced_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"PPOConfig\.clip_range must be float \(> 0\), got 0"):
        PPOConfig(clip_range=0)
    with pytest.raises(ValueError, match=r"gamma must be float \(>= 0 and <= 1\), got 1.5"):
        DQNConfig(gamma=1.5)


def test_wrong_type_is_a_type_error_naming_the_field() -> None:
    with pytest.raises(TypeError, match=r"TD3Config\.policy_delay must be int"):
        TD3Config(**BAD["policy_delay"])
    with pytest.raises(TypeError, match="normalize_advantage must be bool"):
        PPOConfig(**BAD["normalize_advantage"])


def test_ints_become_floats_and_lists_tuples_so_files_round_trip() -> None:
    cfg = PPOConfig.from_dict({"lr": 1, "hidden": [32, 16]})
    assert isinstance(cfg.lr, float) and cfg.hidden == (32, 16)
    assert PPOConfig.from_dict(cfg.to_dict()) == cfg


def test_config_or_keywords_build_the_same_policy_and_a_typo_names_close_matches() -> None:
    a = PPO(CARTPOLE.observation_space, CARTPOLE.action_space, PPOConfig(lr=3e-4))
    b = PPO(CARTPOLE.observation_space, CARTPOLE.action_space, lr=3e-4)
    assert a.config == b.config
    with pytest.raises(TypeError, match=r"no field 'lrr' \(did you mean 'lr'\?\)"):
        PPO(CARTPOLE.observation_space, CARTPOLE.action_space, lrr=3e-4)
    with pytest.raises(TypeError, match="config must be a PPOConfig, got DQNConfig"):
        wrong: Any = DQNConfig()
        PPO(CARTPOLE.observation_space, CARTPOLE.action_space, wrong)


def test_ppo_class_defaults_anneal_nothing() -> None:
    policy = PPO(CARTPOLE.observation_space, CARTPOLE.action_space)
    assert policy.config.lr_anneal_steps is None and policy.config.clip_anneal_steps is None
    policy.set_progress(1_000_000)
    assert policy.optimizers["ppo"].param_groups[0]["lr"] == policy.config.lr
    assert policy.clip_range_now == policy.config.clip_range


def test_configs_inherit_along_the_family() -> None:
    from epochtrain import CQLConfig, SACConfig, TD3BCConfig

    assert issubclass(TD3BCConfig, TD3Config) and issubclass(CQLConfig, SACConfig)
    td3_fields = {f.name for f in dataclasses.fields(TD3Config)}
    assert td3_fields < {f.name for f in dataclasses.fields(TD3BCConfig)}


def test_configs_are_frozen() -> None:
    cfg: Any = PPOConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0


def test_field_docs_read_the_overriding_class_first() -> None:
    from epochtrain import A2CConfig

    assert field_docs(A2CConfig)["lr"] == "RMSprop learning rate."
