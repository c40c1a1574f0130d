"""The errors of RunSpec.with_overrides, replace, tuned and make_trainer name the fix, as
the errors of a spec file do."""

from __future__ import annotations

import re

import pytest

from epochtrain import RunSpec, make_trainer


@pytest.fixture(scope="module")
def ppo() -> RunSpec:
    return RunSpec.tuned("ppo", "CartPole-v1")


@pytest.mark.parametrize("name", ["warmup_steps", "trainer.warmup_steps"])
def test_a_trainer_setting_of_other_algorithms_names_them(ppo: RunSpec, name: str) -> None:
    """It said only "unknown setting 'warmup_steps' for algo 'ppo'" (a file named them)."""
    expected = "'warmup_steps' is a trainer setting of 'ddpg', 'dqn', 'sac', 'td3', not of 'ppo'"
    with pytest.raises(ValueError, match=re.escape(expected)):
        ppo.with_overrides({name: 100})


def test_make_trainer_names_the_algorithms_that_have_the_setting() -> None:
    with pytest.raises(ValueError, match=r"trainer setting of 'ddpg', 'dqn', 'sac', 'td3'"):
        make_trainer("ppo", "CartPole-v1", warmup_steps=100)


def test_a_config_setting_of_other_algorithms_names_them(ppo: RunSpec) -> None:
    with pytest.raises(ValueError, match=r"'epsilon_start' is a config setting of 'dqn', not"):
        ppo.with_overrides({"epsilon_start": 0.5})


def test_a_nested_table_says_to_name_each_setting(ppo: RunSpec) -> None:
    """It said "unknown setting 'config'"."""
    with pytest.raises(ValueError, match=re.escape("'config' is a table")) as info:
        ppo.with_overrides({"config": {"lr": 1e-3}})
    assert "'config.lr': 0.001" in str(info.value) and "bare name" in str(info.value)


def test_a_setting_under_the_wrong_section_names_its_section(ppo: RunSpec) -> None:
    """``trainer.lr`` gave the list of trainer fields, not that lr is a config setting."""
    with pytest.raises(ValueError, match=re.escape("'lr' is a config setting: say 'config.lr'")):
        ppo.with_overrides({"trainer.lr": 1e-3})
    assert ppo.with_overrides({"config.lr": 1e-3}).config == ppo.with_overrides({"lr": 1e-3}).config


def test_replace_with_a_section_setting_names_with_overrides(ppo: RunSpec) -> None:
    """``spec.replace(seed=3)`` said "RunSpec has no field 'seed'", though with_overrides
    takes seed by its bare name."""
    with pytest.raises(TypeError, match=re.escape("spec.with_overrides({'seed': 3})")) as info:
        ppo.replace(seed=3)
    assert "'trainer.seed'" in str(info.value)
    assert ppo.with_overrides({"seed": 3}).seed == 3
    with pytest.raises(TypeError, match="RunSpec has no field 'num_env'"):  # no setting
        ppo.replace(num_env=3)


@pytest.mark.parametrize(
    ("algo", "env_id", "message"),
    [
        ("dqn", "Pendulum-v1", "action_space must be gymnasium.spaces.Discrete for DQN"),
        ("td3", "CartPole-v1", "action_space must be a 1-d gymnasium.spaces.Box for TD3"),
        ("ddpg", "CartPole-v1", "action_space must be a 1-d gymnasium.spaces.Box for DDPG"),
        ("td3bc", "CartPole-v1", "td3bc is for continuous actions"),
    ],
)
def test_tuned_refuses_an_algorithm_that_cannot_act_on_the_env(
    algo: str, env_id: str, message: str
) -> None:
    """These specs were built, and could never run: make_trainer refused them later."""
    with pytest.raises(ValueError, match=re.escape(message)) as tuned:
        RunSpec.tuned(algo, env_id)
    with pytest.raises(ValueError, match=re.escape(message)):
        RunSpec.default(algo, env_id)
    with pytest.raises(ValueError) as built:
        make_trainer(algo, env_id)
    assert str(tuned.value) == str(built.value)
    assert RunSpec.tuned("sac", env_id).env_id == env_id  # SAC acts on both kinds


def test_a_replay_buffer_smaller_than_a_minibatch_is_refused_before_any_work(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``buffer_size=10, batch_size=64`` trained 128 gradient steps of 64 transitions drawn
    (with replacement) from the 10 the buffer could hold, without a word."""
    from epochtrain.cli import main
    from epochtrain.factory import check_spec

    small = {"buffer_size": 10, "batch_size": 64}
    expected = (
        "buffer.buffer_size=10 is smaller than trainer.batch_size=64: the replay buffer could "
        "never hold one minibatch"
    )
    with pytest.raises(ValueError, match=re.escape(expected)) as info:
        make_trainer("dqn", "CartPole-v1", **small)
    assert "set buffer_size >= batch_size (typically 100000)" in str(info.value)
    spec = RunSpec.tuned("dqn", "CartPole-v1").with_overrides(small)  # a file may hold it
    with pytest.raises(ValueError, match=re.escape(expected)):
        check_spec(spec)
    assert main(["config", "--algo", "dqn", "--buffer-size", "10", "--batch-size", "64"]) == 2
    assert expected in capsys.readouterr().err
    RunSpec.tuned("dqn", "CartPole-v1").with_overrides({"buffer_size": 64, "batch_size": 64})
    check_spec(RunSpec.tuned("dqn", "CartPole-v1").with_overrides({"buffer_size": 64}))
