"""Settings a run cannot use (a buffer size for an offline algorithm, a priority exponent
without prioritized replay, a test-in-train for an offline algorithm, an algorithm setting
that another setting or the env's kind of actions turns off): refused when given in code or
on the command line, a warning when a spec file or dict holds them (it may have run before:
it still loads and runs as it did)."""

from __future__ import annotations

import dataclasses
import re
import tomllib
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from epochtrain import (
    ALGORITHMS,
    DQN,
    PPO,
    PRESETS,
    OfflineParams,
    PPOConfig,
    RunSpec,
    SACConfig,
    make_trainer,
    spec_data,
)
from epochtrain.cli import main
from epochtrain.config import keeping_ignored
from epochtrain.dataset import record_dataset
from epochtrain.presets import Preset
from epochtrain.spec import BufferSpec
from tests.test_spec_defaults import older_toml

OFFLINE = sorted(name for name, entry in ALGORITHMS.items() if entry.kind == "offline")
NOT_OFFLINE = sorted(name for name, entry in ALGORITHMS.items() if entry.kind != "offline")
ENV_OF = {"bc": "CartPole-v1", "td3bc": "Pendulum-v1", "cql": "Pendulum-v1"}
ENV_OF |= {"ddpg": "Pendulum-v1", "td3": "Pendulum-v1"}
"""An env each algorithm can act on (ddpg, td3, td3bc: Box actions only)."""

IGNORED_OFFLINE = [("buffer_size", 1000), ("test_in_train", True)]
"""Settings of no use to an offline algorithm, each with a value away from its default."""
PRIORITY = [("priority_alpha", 0.3), ("priority_beta", 0.9)]
"""Prioritized-replay settings away from their defaults (0.6, 0.4)."""


CONFIG_RULES: list[tuple[str, str, dict[str, Any], str, Any, str]] = [
    ("sac", "Pendulum-v1", {"auto_alpha": False}, "alpha_lr", 0.01, "auto_alpha is off"),
    ("sac", "Pendulum-v1", {"auto_alpha": False}, "target_entropy", -3.0, "auto_alpha is off"),
    ("sac", "CartPole-v1", {"auto_alpha": False}, "target_entropy_ratio", 0.5, "auto_alpha is off"),
    ("sac", "CartPole-v1", {"target_entropy": 0.2}, "target_entropy_ratio", 0.5, "target_entropy"),
    ("cql", "Pendulum-v1", {"auto_alpha": False}, "alpha_lr", 0.01, "auto_alpha is off"),
    ("cql", "Pendulum-v1", {}, "cql_weight_lr", 0.01, "lagrange_threshold is None"),
    ("pg", "CartPole-v1", {"baseline": False}, "vf_coef", 2.0, "baseline is off"),
    ("dqn", "CartPole-v1", {"epsilon_decay_steps": 0}, "epsilon_start", 0.5, "decay_steps is 0"),
    ("dqn", "CartPole-v1", {"epsilon_end": 1.0, "epsilon_decay_steps": 100_000},
     "epsilon_decay_steps", 50, "epsilon_start and epsilon_end are both 1.0"),
    ("dqn", "CartPole-v1", {"target_update_freq": 1}, "double_q", False, "target_update_freq is 1"),
    ("td3", "Pendulum-v1", {"policy_noise": 0.0}, "noise_clip", 0.1, "policy_noise is 0"),
    ("td3", "Pendulum-v1", {"noise_clip": 0.0}, "policy_noise", 0.5, "noise_clip is 0"),
    ("td3bc", "Pendulum-v1", {"policy_noise": 0.0}, "noise_clip", 0.1, "policy_noise is 0"),
]  # fmt: skip
"""``(algo, env, base, name, value, why)``: ``name=value`` does nothing with the ``base``
settings (whatever the env): each reproduced by two seeded runs with the same numbers and
weights, and the config alone refuses it."""
RUN_RULES: list[tuple[str, str, dict[str, Any], str, Any, str]] = [
    ("sac", "Pendulum-v1", {}, "target_entropy_ratio", 0.5, "Discrete actions only"),
    ("cql", "Pendulum-v1", {}, "target_entropy_ratio", 0.5, "Discrete actions only"),
    ("cql", "CartPole-v1", {}, "n_action_samples", 3, "Box (continuous) actions only"),
    ("ppo", "CartPole-v1", {}, "log_std_init", -1.0, "Box (continuous) actions only"),
    ("a2c", "CartPole-v1", {}, "log_std_init", -1.0, "Box (continuous) actions only"),
    ("pg", "CartPole-v1", {}, "log_std_init", -1.0, "Box (continuous) actions only"),
    ("td3bc", "Pendulum-v1", {}, "exploration_noise", 0.3, "offline algorithm, which never"),
]
"""As :data:`CONFIG_RULES`, for settings the env's actions or the algorithm's kind turn off:
only a spec (which knows the env) can tell."""


def env_of(algo: str) -> str:
    return ENV_OF.get(algo, "CartPole-v1")


# ------------------------------------------------------------------ refused in code
@pytest.mark.parametrize("algo", OFFLINE)
@pytest.mark.parametrize(("name", "value"), IGNORED_OFFLINE)
def test_a_setting_an_offline_algorithm_cannot_use_is_refused_naming_it_and_the_fix(
    algo: str, name: str, value: Any
) -> None:
    spec = RunSpec.tuned(algo, env_of(algo))
    with pytest.raises(ValueError, match=rf"\.{name}={value!r} has no effect: '{algo}' is an"):
        spec.with_overrides({name: value})
    with pytest.raises(ValueError, match=rf"offline algorithm.*; drop {name}$"):
        make_trainer(algo, env_of(algo), **{name: value})


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
@pytest.mark.parametrize(("name", "value"), PRIORITY)
def test_a_priority_setting_without_prioritized_replay_is_refused_for_every_algorithm(
    algo: str, name: str, value: float
) -> None:
    spec = RunSpec.tuned(algo, env_of(algo))
    assert not spec.buffer.prioritized_replay
    fix = "turn prioritized_replay on" if spec.entry.kind == "offpolicy" else "drop"
    with pytest.raises(ValueError, match=rf"buffer\.{name}={value} has no effect: .*{fix}"):
        spec.with_overrides({name: value})


def test_priority_settings_apply_with_prioritized_replay_and_their_defaults_never_count() -> None:
    spec = RunSpec.tuned("dqn", "CartPole-v1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        per = spec.with_overrides(
            {"prioritized_replay": True, "priority_alpha": 0.3, "priority_beta": 0.9}
        )
        assert per.buffer.priority_alpha == 0.3 and spec_data.ignored_settings(per) == []
        # a default given explicitly changes nothing, so it is no mistake
        spec.with_overrides({"priority_alpha": 0.6, "priority_beta": 0.4})
        RunSpec.tuned("bc", "CartPole-v1").with_overrides(
            {"buffer_size": None, "test_in_train": False}
        )
    with pytest.raises(ValueError, match=r"priority_alpha=0\.3"):
        spec.with_overrides({"priority_alpha": 0.3})


@pytest.mark.parametrize(
    ("algo", "env_id", "base", "name", "value", "why"), CONFIG_RULES + RUN_RULES
)
def test_an_algorithm_setting_the_run_would_ignore_is_refused_naming_what_turns_it_off(
    algo: str, env_id: str, base: dict[str, Any], name: str, value: Any, why: str
) -> None:
    with warnings.catch_warnings():  # a preset's alpha_lr left behind by auto_alpha off
        warnings.simplefilter("ignore")
        spec = RunSpec.tuned(algo, env_id).with_overrides(base)  # base alone is no error
    text = rf"^config\.{name}={re.escape(repr(value))} has no effect: .*{re.escape(why)}"
    with pytest.raises(ValueError, match=text + r".*; .*drop " + name):
        spec.with_overrides({name: value})
    with pytest.raises(ValueError, match=text):
        make_trainer(algo, env_id, **{**base, name: value})
    with keeping_ignored():  # a config that holds it (as a saved spec's), given whole
        config = spec.config.replace(**{name: value})
    with pytest.raises(ValueError, match=rf"config\.{name}=.* has no effect"):
        RunSpec(algo=algo, env_id=env_id, config=config)


@pytest.mark.parametrize(("algo", "env_id", "base", "name", "value", "why"), CONFIG_RULES)
def test_a_config_built_in_code_refuses_what_its_algorithm_would_ignore(
    algo: str, env_id: str, base: dict[str, Any], name: str, value: Any, why: str
) -> None:
    cls = ALGORITHMS[algo].config_cls
    assert cls(**base).ignored_settings() == []
    text = rf"^{cls.__name__}\.{name}={re.escape(repr(value))} has no effect: .*{re.escape(why)}"
    with pytest.raises(ValueError, match=text):
        cls(**{**base, name: value})
    box = gym.spaces.Box(-1.0, 1.0, (1,))
    with pytest.raises(ValueError, match=text):  # a policy's keywords: its config, checked first
        ALGORITHMS[algo].policy_cls(box, box, **{**base, name: value})
    with pytest.raises(ValueError, match=text):
        cls(**base).replace(**{name: value})
    with keeping_ignored():  # as a saved spec reads it: kept, for the reader to judge
        kept = cls(**{**base, name: value})
    assert [s.name for s in kept.ignored_settings()] == [name]
    with warnings.catch_warnings():  # a change of another setting passes what it held
        warnings.simplefilter("error")
        assert kept.replace(gamma=0.9).ignored_settings() == kept.ignored_settings()


def test_turning_a_setting_off_warns_of_those_it_leaves_behind_in_a_config_and_a_spec() -> None:
    with pytest.warns(UserWarning, match=r"^SACConfig\.alpha_lr=0\.01 is ignored from now on: "):
        off = SACConfig(alpha_lr=0.01).replace(auto_alpha=False)
    assert off.alpha_lr == 0.01
    sac = RunSpec.tuned("sac", "Pendulum-v1")  # the preset's alpha_lr is 2e-3
    with pytest.warns(
        UserWarning, match=r"config\.alpha_lr=0\.002 is ignored from now on: auto_alpha is off"
    ):
        sac.with_overrides({"auto_alpha": False})
    # a spec moved to an env of the other kind of actions
    ppo = RunSpec.tuned("ppo", "Pendulum-v1").with_overrides({"log_std_init": -1.0})
    with pytest.warns(UserWarning, match=r"log_std_init=-1\.0 is ignored from now on: .*Discrete"):
        moved = ppo.replace(env_id="CartPole-v1", config=ppo.config)
    assert moved.config.log_std_init == -1.0


def test_a_setting_of_one_kind_of_actions_is_judged_by_the_config_given_the_space() -> None:
    config = PPOConfig(log_std_init=-1.0)  # a Box env's: the config alone cannot tell
    assert config.ignored_settings() == []
    assert config.ignored_for(gym.spaces.Box(-1.0, 1.0, (2,))) == []
    (found,) = config.ignored_for(gym.spaces.Discrete(3), env_id="E-v0")
    assert (found.name, found.value) == ("log_std_init", -1.0)
    assert "Box (continuous) actions only, and the actions of E-v0 are Discrete(3)" in found.why
    # a setting its config names already is not named twice
    with keeping_ignored():
        sac = SACConfig(target_entropy=-1.0, target_entropy_ratio=0.5)
    assert [s.name for s in sac.ignored_settings()] == ["target_entropy_ratio"]
    assert sac.ignored_for(gym.spaces.Box(-1.0, 1.0, (1,))) == []


def test_a_policy_built_in_code_refuses_a_setting_of_the_other_kind_of_actions() -> None:
    box = gym.spaces.Box(-1.0, 1.0, (4,))
    with pytest.raises(ValueError, match=r"PPOConfig\.log_std_init=-1\.0 has no effect"):
        PPO(box, gym.spaces.Discrete(2), log_std_init=-1.0)
    assert PPO(box, gym.spaces.Box(-1.0, 1.0, (1,)), log_std_init=-1.0) is not None
    # a spec judged it already (a saved file's warning): make_trainer builds the policy
    with keeping_ignored():
        assert PPO(box, gym.spaces.Discrete(2), log_std_init=-1.0) is not None


class _CountedEnv(gym.Env[Any, Any]):
    """CartPole's spaces; counts how often it is built."""

    built = 0

    def __init__(self) -> None:
        type(self).built += 1
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,))
        self.action_space = gym.spaces.Discrete(2)


@pytest.fixture
def counted_env() -> Any:
    env_id = "EpochtrainCountedEnv-v0"
    gym.register(env_id, entry_point=_CountedEnv)
    _CountedEnv.built = 0
    yield env_id
    del gym.registry[env_id]


def test_the_env_is_built_only_for_a_setting_of_one_kind_of_actions_and_once(
    counted_env: str,
) -> None:
    spec = RunSpec.tuned("ppo", counted_env).with_overrides({"lr": 1e-3, "hidden": (8,)})
    spec.with_overrides({"seed": 2})
    assert _CountedEnv.built == 1  # tuned() checks that PPO acts on it, once per process
    for _ in range(3):
        with pytest.raises(ValueError, match=rf"the actions of {counted_env} are Discrete\(2\)"):
            spec.with_overrides({"log_std_init": -1.0})
    assert _CountedEnv.built == 1


def test_an_env_that_cannot_be_built_here_leaves_the_setting_unjudged_until_registered_again(
    counted_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing(self: _CountedEnv) -> None:
        raise gym.error.DependencyNotInstalled("no simulator here")

    with monkeypatch.context() as patch:
        patch.setattr(_CountedEnv, "__init__", missing)
        spec = RunSpec.tuned("ppo", counted_env).with_overrides({"log_std_init": -1.0})
    assert spec.config.log_std_init == -1.0  # make_trainer names the missing package
    del gym.registry[counted_env]  # installed, and registered again
    gym.register(counted_env, entry_point=_CountedEnv)
    with pytest.raises(ValueError, match=r"config\.log_std_init=-1\.0 has no effect"):
        RunSpec.tuned("ppo", counted_env).with_overrides({"log_std_init": -1.0})


def test_a_dqn_schedule_ends_exactly_at_epsilon_end_so_epsilon_start_is_ignored_without_decay() -> (
    None
):
    space, actions = gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(2)
    decaying = DQN(space, actions, epsilon_end=0.05, epsilon_decay_steps=100)
    decaying.set_progress(100)
    assert decaying.epsilon == 0.05  # 1.0 + (0.05 - 1.0) is 0.050000000000000044
    with keeping_ignored():
        policies = [DQN(space, actions, epsilon_decay_steps=0, epsilon_start=s) for s in (1, 0.5)]
    for policy in policies:
        assert policy.epsilon == 0.05  # before any progress too
        policy.set_progress(0)
        assert policy.epsilon == 0.05


def test_a_spec_built_with_a_section_that_holds_an_ignored_setting_is_refused() -> None:
    with pytest.raises(ValueError, match=r"buffer\.buffer_size=1000 has no effect: 'bc'"):
        RunSpec(algo="bc", env_id="CartPole-v1", buffer=BufferSpec(buffer_size=1000))
    with pytest.raises(ValueError, match=r"OfflineParams\.test_in_train=True has no effect"):
        RunSpec(algo="cql", env_id="Pendulum-v1", trainer=OfflineParams(test_in_train=True))
    both = BufferSpec(buffer_size=10, priority_alpha=0.1, priority_beta=1.0)
    with pytest.raises(ValueError, match=r"priority_alpha=0\.1 .*; also, .*priority_beta=1\.0"):
        RunSpec(algo="ppo", env_id="CartPole-v1", buffer=both)


def test_turning_prioritized_replay_off_warns_of_the_priority_settings_left_behind() -> None:
    per = RunSpec.tuned("dqn", "CartPole-v1").with_overrides(
        {"prioritized_replay": True, "priority_alpha": 0.3}
    )
    with pytest.warns(
        UserWarning,
        match=r"priority_alpha=0\.3 is ignored from now on: .*; set priority_alpha to its default",
    ):
        off = per.with_overrides({"prioritized_replay": False})
    assert off.buffer.priority_alpha == 0.3


PRESET_ENVS = sorted({env_id for _, env_id in PRESETS})


@pytest.mark.parametrize(
    ("algo", "env_id"),
    sorted(
        {*PRESETS, *((a, e) for a in ALGORITHMS for e in [env_of(a), *PRESET_ENVS])}
        - {("ddpg", "CartPole-v1"), ("td3", "CartPole-v1"), ("td3bc", "CartPole-v1")}
        - {("dqn", "Pendulum-v1")}  # RunSpec.tuned refuses them: tests/test_spec_messages.py
    ),
)
def test_no_default_or_tuned_spec_holds_an_ignored_setting(algo: str, env_id: str) -> None:
    """Every algorithm on every env a preset names (the env's kind of actions counts)."""
    assert ALGORITHMS[algo].config_cls().ignored_settings() == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for spec in (RunSpec.default(algo, env_id), RunSpec.tuned(algo, env_id)):
            assert spec_data.ignored_settings(spec) == []
            assert RunSpec.from_dict(tomllib.loads(spec.to_toml())) == spec  # no warning


@pytest.mark.parametrize(
    ("algo", "env_id", "setting"),
    [
        ("sac", "CartPole-v1", {"auto_alpha": False}),  # its target_entropy_ratio then
        ("sac", "Pendulum-v1", {"target_entropy_ratio": 0.5}),
        ("ppo", "CartPole-v1", {"log_std_init": -0.5}),
    ],
)
def test_a_preset_holding_an_ignored_setting_is_refused(
    algo: str, env_id: str, setting: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    old = PRESETS.get((algo, env_id))
    settings = {**(old.settings if old is not None else {}), **setting}
    monkeypatch.setitem(PRESETS, (algo, env_id), Preset(algo, env_id, settings, "a test's"))
    with pytest.raises(ValueError, match=r"^config\.\w+=.* has no effect: "):
        RunSpec.tuned(algo, env_id)


# ------------------------------------------------------------------ a warning in a file
def file_with(text: str, section: str, line: str) -> str:
    """A spec file's ``text`` with ``line`` (``name = value``, or several such lines) as
    those settings of ``section`` (replacing the ones there, or added if the file left them
    out)."""
    head, _, rest = text.partition(f"[{section}]\n")
    names = [new.partition(" =")[0] for new in line.split("\n")]
    lines = [old for old in rest.split("\n") if old.partition(" =")[0] not in names]
    return head + f"[{section}]\n" + "\n".join([line, *lines])


@pytest.mark.parametrize("older", [False, True], ids=["to_toml", "older_to_toml"])
@pytest.mark.parametrize(
    ("algo", "section", "line", "name"),
    [
        ("bc", "buffer", "buffer_size = 1000", "buffer.buffer_size"),
        ("cql", "trainer", "test_in_train = true", "trainer.test_in_train"),
        ("dqn", "buffer", "priority_alpha = 0.3", "buffer.priority_alpha"),
        ("ppo", "buffer", "priority_beta = 0.9", "buffer.priority_beta"),
        ("ppo", "config", "log_std_init = -1.0", "config.log_std_init"),
        ("sac", "config", "auto_alpha = false", "config.target_entropy_ratio"),  # preset: 0.3
        ("cql", "config", "cql_weight_lr = 0.001", "config.cql_weight_lr"),
        ("td3bc", "config", "exploration_noise = 0.1", "config.exploration_noise"),
        ("dqn", "config", "target_update_freq = 1\ndouble_q = false", "config.double_q"),
    ],
)
def test_a_saved_spec_holding_an_ignored_setting_loads_with_a_warning_and_keeps_it(
    algo: str, section: str, line: str, name: str, older: bool, tmp_path: Path
) -> None:
    spec = RunSpec.tuned(algo, env_of(algo))
    written = file_with(spec.to_toml(), section, line)
    # the to_toml of earlier versions left its Nones out (buffer_size too, for bc)
    path = tmp_path / "spec.toml"
    path.write_text(file_with(older_toml(spec), section, line) if older else written)
    with pytest.warns(
        UserWarning, match=rf"^{re.escape(str(path))}: {name} = .* is ignored"
    ) as record:
        loaded = RunSpec.from_file(path)
    assert len(record) == 1
    assert tomllib.loads(loaded.to_toml()) == tomllib.loads(written)  # as it was written
    with warnings.catch_warnings():  # changing other settings neither warns nor refuses
        warnings.simplefilter("error")
        moved = loaded.with_overrides({"seed": 3, "checkpoint_dir": str(tmp_path)})
        assert loaded.replace(device="cpu") == loaded
    assert spec_data.ignored_settings(moved)[0].name == name


def test_a_bc_run_saved_with_a_buffer_size_still_runs_and_resumes_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = tmp_path / "data.buf"
    record_dataset(None, "CartPole-v1", 300, dataset, seed=0)
    short = {"max_epoch": 2, "step_per_epoch": 20, "episode_per_test": 2, "stop_at": None}
    plain = RunSpec.tuned("bc", "CartPole-v1").with_overrides(
        {**short, "dataset": str(dataset), "show_progress": False}
    )
    saved = tmp_path / "old.toml"
    saved.write_text(file_with(plain.to_toml(), "buffer", "buffer_size = 1000"))
    with pytest.warns(UserWarning, match="buffer_size = 1000 is ignored"):
        old = RunSpec.from_file(saved)

    def returns(spec: RunSpec) -> list[float]:
        with make_trainer(spec) as trainer:
            tests = [stats.test_collect_stat for stats in trainer]
        return [float(t.returns.mean()) for t in tests if t is not None]

    assert returns(old) == returns(plain)
    # the command line runs it, saves it as it was and resumes it, each warning on one line
    logs = tmp_path / "runs"
    quiet = ["--logdir", str(logs), "--no-progress", "--quiet"]
    assert main(["train", "--config", str(saved), "--max-epoch", "1", *quiet]) == 0
    err = capsys.readouterr().err
    assert err.count("epochtrain: warning: ") == 1 and len(err.strip().splitlines()) == 1
    assert "buffer.buffer_size = 1000 is ignored" in err
    (run_dir,) = logs.iterdir()
    assert "buffer_size = 1000" in (run_dir / "spec.toml").read_text()
    assert main(["train", "--resume", str(run_dir), "--max-epoch", "2", *quiet]) == 0
    captured = capsys.readouterr()
    assert "buffer.buffer_size = 1000 is ignored" in captured.err and "error" not in captured.err
    assert "Finished (max_epoch) after 2 epochs" in captured.out


@pytest.mark.parametrize(
    ("algo", "env_id", "base", "lines"),
    [
        ("ppo", "CartPole-v1", {}, "log_std_init = -1.0"),
        ("sac", "Pendulum-v1", {"auto_alpha": False, "alpha_lr": 3e-4}, "alpha_lr = 0.01"),
        (
            "sac",
            "CartPole-v1",
            {"target_entropy": 0.1, "target_entropy_ratio": 0.98},
            "target_entropy_ratio = 0.5",
        ),
        ("dqn", "CartPole-v1", {"epsilon_decay_steps": 0}, "epsilon_start = 0.5"),
        ("td3bc", "Pendulum-v1", {}, "exploration_noise = 0.3"),
    ],
)
def test_a_saved_spec_holding_an_ignored_algorithm_setting_runs_as_without_it(
    algo: str, env_id: str, base: dict[str, Any], lines: str, tmp_path: Path
) -> None:
    """The same numbers (returns, losses) and weights, epoch by epoch: the setting did
    nothing (dqn: epsilon is ``epsilon_end`` itself, not ``start + (end - start)``)."""
    short: dict[str, Any] = {"max_epoch": 2, "episode_per_test": 2, "stop_at": None}
    short |= {"show_progress": False, "checkpoint_dir": None}
    kind = ALGORITHMS[algo].kind
    if kind == "offline":
        record_dataset(None, env_id, 300, tmp_path / "data.buf", seed=0)
        short |= {"step_per_epoch": 20, "dataset": str(tmp_path / "data.buf")}
    elif kind == "offpolicy":
        short |= {"step_per_epoch": 80, "warmup_steps": 40, "step_per_collect": 10}
        short |= {"batch_size": 16, "hidden": (16, 16)}
    else:
        short |= {"step_per_epoch": 64, "step_per_collect": 32, "num_envs": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = RunSpec.tuned(algo, env_id).with_overrides({**short, **base})
    saved = tmp_path / "saved.toml"
    saved.write_text(file_with(plain.to_toml(), "config", lines))
    with pytest.warns(UserWarning, match=r"config\.\w+ = .* is ignored, the run is the same"):
        held = RunSpec.from_file(saved)
    assert held != plain and spec_data.ignored_settings(plain) == []

    def numbers(spec: RunSpec) -> tuple[Any, list[Any]]:
        with make_trainer(spec) as trainer:
            stats = [without_times(dataclasses.asdict(epoch)) for epoch in trainer]
            weights = [p.tolist() for p in trainer.policy.parameters() if p.requires_grad]
        return stats, weights

    assert numbers(held) == numbers(plain)


def without_times(data: Any) -> Any:
    """``data`` (an ``asdict`` of stats) as plain lists and numbers, without its times and
    speeds (they differ from run to run)."""
    if isinstance(data, dict):
        return {
            k: without_times(v) for k, v in data.items() if "time" not in k and "speed" not in k
        }
    if isinstance(data, list | tuple):
        return [without_times(v) for v in data]
    return data.tolist() if hasattr(data, "tolist") else data


# ------------------------------------------------------------------ the command line
@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (
            ["--algo", "bc", "--buffer-size", "1000"],
            ["buffer.buffer_size=1000 has no effect: 'bc' is an offline", "(--buffer-size)"],
        ),
        (
            ["--algo", "dqn", "--priority-alpha", "0.3"],
            ["priority_alpha=0.3 has no effect", "(--prioritized-replay)", "(--priority-alpha)"],
        ),
        (
            ["--algo", "ppo", "--set", "priority_beta=0.9"],
            ["priority_beta=0.9 has no effect: 'ppo' is an on-policy", "drop priority_beta"],
        ),
        (
            ["--algo", "cql", "--env", "Pendulum-v1", "--test-in-train"],
            ["test_in_train=True has no effect", "drop test_in_train (--test-in-train)"],
        ),
        (
            [
                "--algo",
                "sac",
                "--env",
                "Pendulum-v1",
                "--set",
                "auto_alpha=false",
                "--set",
                "alpha_lr=0.01",
            ],
            ["config.alpha_lr=0.01 has no effect: auto_alpha is off", "drop alpha_lr"],
        ),
        (
            ["--algo", "ppo", "--set", "log_std_init=-1"],
            ["config.log_std_init=-1.0 has no effect", "the actions of CartPole-v1 are Discr"],
        ),
    ],
)
@pytest.mark.parametrize("command", ["train", "config"])
def test_a_flag_the_run_would_ignore_exits_2_with_one_line(
    command: str,
    argv: list[str],
    fragments: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    extra = ["--logdir", str(tmp_path), "--no-progress"] if command == "train" else []
    assert main([command, *argv, *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith("epochtrain: error: ")
    for fragment in fragments:
        assert fragment in captured.err, captured.err
    assert not list(tmp_path.iterdir())


def test_the_flags_that_make_a_priority_setting_count_are_accepted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["config", "--algo", "dqn", "--prioritized-replay", "--priority-alpha", "0.3"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and RunSpec.from_dict(tomllib.loads(captured.out)).buffer == (
        BufferSpec(buffer_size=100_000, prioritized_replay=True, priority_alpha=0.3)
    )
    assert main(["config", "--algo", "dqn", "--priority-alpha", "0.3"]) == 2
