"""Config dataclasses: one validator, ranges beside fields, docstrings as help, keywords."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import pytest
import torch

from epochtrain import ALGORITHMS, PPO, DQNConfig, PPOConfig, TD3Config
from epochtrain.config import field_docs, fields_info
from epochtrain.factory import make_trainer
from epochtrain.suggestions import close_matches

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


# ------------------------------------------------------------------ finite floats
INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    ("cls_name", "field", "value"),
    [
        ("PPOConfig", "lr", INF),
        ("PPOConfig", "ent_coef", INF),
        ("PPOConfig", "log_std_init", NAN),
        ("PPOConfig", "log_std_init", -INF),
        ("SACConfig", "target_entropy", -INF),
        ("CQLConfig", "lagrange_threshold", INF),
        ("OffpolicyParams", "update_per_step", INF),
        ("BufferSpec", "priority_alpha", INF),
        ("RunSpec", "stop_at", NAN),
    ],
)
def test_a_nonfinite_float_is_refused_naming_the_field_and_that_it_must_be_finite(
    cls_name: str, field: str, value: float
) -> None:
    import epochtrain

    pattern = rf"{cls_name}\.{field} must be finite, got {value!r}"
    with pytest.raises(ValueError, match=pattern):
        if cls_name == "RunSpec":
            epochtrain.RunSpec.default("ppo", "CartPole-v1").with_overrides({field: value})
        else:
            getattr(epochtrain, cls_name)(**{field: value})


def test_inf_is_accepted_only_by_the_settings_where_it_means_no_clipping() -> None:
    from epochtrain import BufferSpec
    from epochtrain.trainer.params import OfflineParams, OffpolicyParams, OnpolicyParams

    classes = [entry.config_cls for entry in ALGORITHMS.values()]
    classes += [OnpolicyParams, OffpolicyParams, OfflineParams, BufferSpec]
    accepting = set()
    for cls in classes:
        for info in fields_info(cls):
            if "float" not in str(info.type):
                continue
            try:
                cls(**{info.name: INF})
            except ValueError as exc:
                assert f"{cls.__name__}.{info.name} must be finite" in str(exc), exc
            else:
                accepting.add(info.name)
    assert accepting == {"max_grad_norm", "noise_clip"}
    with pytest.raises(ValueError, match=r"DQNConfig\.max_grad_norm must be a number, not NaN"):
        DQNConfig(max_grad_norm=NAN)


def test_log_std_init_is_bounded_so_that_its_exp_is_a_usable_std() -> None:
    allowed = r"log_std_init must be float \(>= -20 and <= 20\), got 1000000\.0"
    with pytest.raises(ValueError, match=allowed):
        PPOConfig(log_std_init=1e6)  # exp(1e6) is inf: the first actions were inf


def test_max_grad_norm_inf_trains_exactly_as_no_clipping() -> None:
    from epochtrain import make_trainer

    weights = []
    for max_grad_norm in (None, INF):
        trainer = make_trainer("pg", "CartPole-v1", max_grad_norm=max_grad_norm, max_epoch=1,
                               step_per_epoch=64, step_per_collect=64, num_envs=2,
                               num_test_envs=1, episode_per_test=1, stop_at=None,
                               show_progress=False)  # fmt: skip
        assert trainer.run().gradient_step > 0
        trainer.close()
        weights.append({k: v.detach().clone() for k, v in trainer.policy.named_parameters()})
    assert weights[0].keys() == weights[1].keys()
    for name, tensor in weights[0].items():
        assert torch.equal(tensor, weights[1][name]), name


# ------------------------------------------------------------------ README
def test_readme_algorithm_table_lists_the_action_spaces_each_algorithm_accepts() -> None:
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    row = r"^\| `\w+` — .*? \| `(\w+)` \| ([a-z, ]+) \|"  # | `PPO` — ... | `ppo` | actions |
    listed = {module: set(actions.split(", ")) for module, actions in re.findall(row, readme, re.M)}
    obs = gym.spaces.Box(-1.0, 1.0, shape=(3,))
    spaces = {"discrete": gym.spaces.Discrete(2), "continuous": gym.spaces.Box(-1.0, 1.0, (1,))}
    accepted: dict[str, set[str]] = {}
    for name, entry in ALGORITHMS.items():
        accepted[name] = set()
        for kind, action_space in spaces.items():
            try:
                entry.policy_cls(obs, action_space)
            except ValueError as exc:
                assert "action_space" in str(exc), exc
            else:
                accepted[name].add(kind)
    assert listed == accepted


def test_close_matches_ignore_case() -> None:
    """``make_trainer("PPO", ...)`` suggested nothing."""
    assert close_matches("PPO", ["ppo", "dqn"]) == " (did you mean 'ppo'?)"
    assert close_matches("Batch_Sise", ["batch_size"]) == " (did you mean 'batch_size'?)"
    assert close_matches("Learning_Rate", ["lr", "gamma"]) == " (did you mean 'lr'?)"
    assert close_matches("ppo", ["ppo"]) == ""  # a name is no match of itself
    with pytest.raises(ValueError, match=r"got 'PPO' \(did you mean 'ppo'\?\)"):
        make_trainer("PPO", "CartPole-v1")
