"""RunSpec, presets and the misuses the run-specs issue lists: each a clear error before
any work starts, or a behaviour that now holds."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from epochtrain import (
    ALGORITHMS,
    DQN,
    PPO,
    PRESETS,
    Collector,
    OfflineParams,
    OfflineTrainer,
    OffpolicyParams,
    OffpolicyTrainer,
    OnpolicyParams,
    OnpolicyTrainer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    RunSpec,
    make_trainer,
)
from epochtrain.envs import make_envs
from epochtrain.spec import BufferSpec, LogSpec
from epochtrain.stats import CollectStats
from epochtrain.trainer.params import SettingsMismatchError
from tests.trainer.tiny import build


def _quiet(spec: RunSpec, **settings: Any) -> RunSpec:
    return spec.with_overrides({"show_progress": False, **settings})


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("suffix", [".toml", ".json"])
@pytest.mark.parametrize(("algo", "env_id"), [*sorted(PRESETS), ("a2c", "Acrobot-v1")])
def test_every_tuned_spec_round_trips_through_a_file(
    algo: str, env_id: str, suffix: str, tmp_path: Path
) -> None:
    spec = RunSpec.tuned(algo, env_id, seed=5).with_overrides(
        {"keep_last": None, "checkpoint_dir": str(tmp_path), "stop_at": None}
    )
    assert RunSpec.from_file(spec.to_file(tmp_path / f"spec{suffix}")) == spec
    assert RunSpec.from_dict(spec.to_dict()) == spec


def test_a_spec_file_without_stop_at_stops_where_the_default_spec_does(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    for env_id, threshold in (("CartPole-v1", 475.0), ("Pendulum-v1", None)):
        path.write_text(f'algo = "ppo"\nenv_id = "{env_id}"\n')
        assert RunSpec.from_file(path).stop_at == threshold
        assert RunSpec.default("ppo", env_id).stop_at == threshold
        assert RunSpec.from_dict({"algo": "ppo", "env_id": env_id}).stop_at == threshold
    path.write_text('algo = "ppo"\nenv_id = "CartPole-v1"\nstop_at = "none"\n')
    assert RunSpec.from_file(path).stop_at is None  # written "none": run every epoch
    given_none = {"algo": "ppo", "env_id": "CartPole-v1", "stop_at": None}
    assert RunSpec.from_dict(given_none).stop_at is None


def test_a_spec_toml_written_before_stop_at_none_was_written_reloads_as_it_ran(
    tmp_path: Path,
) -> None:
    # the toml of then left None out: every other top-level setting, no stop_at
    spec = RunSpec.tuned("dqn", "CartPole-v1").with_overrides({"stop_at": None})
    older = spec.to_toml().replace('stop_at = "none"\n', "")
    assert "stop_at" not in older
    (tmp_path / "spec.toml").write_text(older)
    assert RunSpec.from_file(tmp_path / "spec.toml") == spec


@pytest.mark.parametrize("stop_at", [None, 100.0])
def test_a_spec_that_runs_every_epoch_says_so_in_its_toml_and_reloads_as_it_was(
    stop_at: float | None, tmp_path: Path
) -> None:
    spec = RunSpec.tuned("ppo", "CartPole-v1").with_overrides({"stop_at": stop_at})
    line = 'stop_at = "none"' if stop_at is None else f"stop_at = {stop_at!r}"
    assert line in spec.to_toml().splitlines()
    assert RunSpec.from_file(spec.to_file(tmp_path / "spec.toml")) == spec
    assert RunSpec.from_file(spec.to_file(tmp_path / "spec.json")) == spec
    assert RunSpec.from_dict(spec.to_dict()) == spec


def test_every_registered_algorithm_has_a_default_spec() -> None:
    for name, entry in ALGORITHMS.items():
        env_id = "Pendulum-v1" if name in ("ddpg", "td3", "td3bc", "cql") else "CartPole-v1"
        spec = RunSpec.default(name, env_id)
        assert type(spec.config) is entry.config_cls and type(spec.trainer) is entry.params_cls


def test_a_preset_changes_only_its_settings_and_names_its_source() -> None:
    tuned, general = RunSpec.tuned("dqn", "CartPole-v1"), RunSpec.default("dqn", "CartPole-v1")
    assert tuned.config.lr == 1e-3 and general.config.lr == 1e-4
    assert tuned.trainer.batch_size == 64 and general.trainer.batch_size == 32
    assert "rl-baselines3-zoo" in PRESETS[("dqn", "CartPole-v1")].source
    assert RunSpec.tuned("dqn", "Acrobot-v1") == RunSpec.default("dqn", "Acrobot-v1")


# ------------------------------------------------------------------ names
def test_setting_names_dotted_or_bare_and_errors_list_close_matches() -> None:
    spec = RunSpec.tuned("ppo", "CartPole-v1")
    changed = spec.with_overrides({"lr": 3e-4, "trainer.batch_size": 128, "seed": 4})
    assert changed.config.lr == 3e-4 and changed.trainer.batch_size == 128
    assert changed.seed == 4 and changed.run_id == "ppo-CartPole-v1-s4"
    with pytest.raises(ValueError, match=r"unknown setting 'lrr' .*did you mean 'lr'"):
        spec.with_overrides({"lrr": 1})
    with pytest.raises(ValueError, match=r"unknown setting 'trainer\.bach_size'.*'batch_size'"):
        spec.with_overrides({"trainer.bach_size": 1})
    with pytest.raises(ValueError, match="algo cannot be overridden"):
        spec.with_overrides({"algo": "dqn"})


def test_a_bad_file_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('algo = "ppo"\nenv_id = "CartPole-v1"\n[config]\nlr = -1\n')
    with pytest.raises(ValueError, match=r"run\.toml: PPOConfig\.lr must be float \(> 0\)"):
        RunSpec.from_file(path)
    path.write_text('algo = "ppo"\nenv_id = "CartPole-v1"\nnum_env = 3\n')
    with pytest.raises(TypeError, match=r"no field 'num_env' \(did you mean 'num_envs'"):
        RunSpec.from_file(path)
    with pytest.raises(ValueError, match=r"must end in \.toml or \.json"):
        RunSpec.tuned("ppo", "CartPole-v1").to_file(tmp_path / "run.yaml")


def test_unknown_algo_and_env_are_errors_naming_them() -> None:
    with pytest.raises(ValueError, match=r"algo must be one of .* got 'ppo2' \(did you mean 'ppo'"):
        RunSpec.tuned("ppo2", "CartPole-v1")
    with pytest.raises(ValueError, match="env_id 'CartPole-v9' is not a registered gymnasium env"):
        RunSpec.tuned("ppo", "CartPole-v9")


# ------------------------------------------------------------------ the misuses
def test_a_bad_user_value_is_blamed_not_a_value_derived_from_it() -> None:
    # before: "beta_anneal_steps must be an int >= 0, got -1000"
    with pytest.raises(ValueError, match=r"max_epoch must be int \(>= 1\), got -1"):
        make_trainer("dqn", "CartPole-v1", max_epoch=-1)


def test_an_onpolicy_policy_in_an_offpolicy_trainer_is_refused_before_any_work() -> None:
    envs = make_envs("CartPole-v1", 2)
    ppo = PPO(envs.single_observation_space, envs.single_action_space)
    with pytest.raises(TypeError, match=r"OffpolicyTrainer cannot train PPO.*use OnpolicyTrainer"):
        OffpolicyTrainer(
            policy=ppo,
            train_collector=Collector(ppo, envs, ReplayBuffer(100, 2)),
            params=OffpolicyParams(show_progress=False),
        )


def test_an_offpolicy_policy_in_an_onpolicy_trainer_is_refused() -> None:
    envs = make_envs("CartPole-v1", 2)
    dqn = DQN(envs.single_observation_space, envs.single_action_space)
    with pytest.raises(TypeError, match=r"OnpolicyTrainer cannot train DQN"):
        OnpolicyTrainer(
            policy=dqn,
            train_collector=Collector(dqn, envs, ReplayBuffer(4096, 2)),
            params=OnpolicyParams(show_progress=False),
        )


def test_a_policy_built_for_other_spaces_than_the_envs_is_refused() -> None:
    acrobot = make_envs("Acrobot-v1", 2)
    cartpole = make_envs("CartPole-v1", 2)
    dqn = DQN(acrobot.single_observation_space, acrobot.single_action_space)
    # the collector refuses it (a trainer takes only collectors of its own policy)
    with pytest.raises(ValueError, match=r"\(DQN\) was built for the observation space"):
        Collector(dqn, cartpole, ReplayBuffer(100, 2))
    with pytest.raises(ValueError, match=r"\(DQN\) was built for the observation space"):
        Collector(dqn, cartpole, exploration=False)
    # envs changed under a collector after it was built: the trainer's own check
    collector = Collector(dqn, acrobot, ReplayBuffer(100, 2))
    collector.env = cartpole
    with pytest.raises(ValueError, match=r"observation space .* of train_collector's envs"):
        OffpolicyTrainer(
            policy=dqn, train_collector=collector, params=OffpolicyParams(show_progress=False)
        )


def test_an_offline_dataset_of_another_env_is_refused() -> None:
    from epochtrain import BC

    buffer = ReplayBuffer(10, 1)
    obs = np.zeros((1, 6), dtype=np.float32)  # Acrobot-shaped observations
    for _ in range(4):
        act = np.zeros(1, dtype=np.int64)
        buffer.add(obs, act, np.ones(1), np.zeros(1, bool), np.zeros(1, bool), obs)
    envs = make_envs("CartPole-v1", 1)
    bc = BC(envs.single_observation_space, envs.single_action_space)
    with pytest.raises(ValueError, match=r"observations of the dataset .*have shape \(6,\)"):
        OfflineTrainer(policy=bc, buffer=buffer, params=OfflineParams(show_progress=False))


def test_batch_size_larger_than_the_rollout_buffer_is_refused() -> None:
    with pytest.raises(ValueError, match=r"step_per_collect=100 needs a rollout buffer"):
        build("on", step_per_collect=100)


def _resume(tmp_path: Path, **changes: Any) -> Any:
    spec = _quiet(
        RunSpec.tuned("dqn", "CartPole-v1"),
        max_epoch=1,
        step_per_epoch=64,
        warmup_steps=32,
        step_per_collect=16,
        num_test_envs=2,
        episode_per_test=2,
        buffer_size=1000,
        stop_at=None,
    )
    trainer = make_trainer(spec)
    trainer.run()
    path = trainer.save_checkpoint(tmp_path / "ckpt")
    return make_trainer(spec.with_overrides({"resume_from": str(path), **changes}))


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"step_per_epoch": 128}, "trainer.step_per_epoch"),
        ({"prioritized_replay": True}, "buffer.prioritized_replay"),
        ({"lr": 5e-4}, "config.lr"),
    ],
)
def test_resuming_into_a_different_spec_is_refused_naming_the_settings(
    tmp_path: Path, changes: dict[str, Any], named: str
) -> None:
    with pytest.raises(SettingsMismatchError, match=named):
        _resume(tmp_path, **changes)


def test_resuming_with_a_safe_change_warns_and_goes_on(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match=r"trainer\.max_epoch: saved 1, now 3"):
        resumed = _resume(tmp_path, max_epoch=3)
    assert resumed.state.epoch == 1 and len(list(resumed)) == 2


def test_resuming_a_hand_built_trainer_on_another_env_with_the_same_spaces_is_refused(
    tmp_path: Path,
) -> None:
    def trainer_on(env_id: str, resume: Path | None = None) -> OffpolicyTrainer[Any]:
        envs = make_envs(env_id, 1)
        torch.manual_seed(0)
        dqn = DQN(envs.single_observation_space, envs.single_action_space, hidden=(8,))
        return OffpolicyTrainer(
            policy=dqn,
            train_collector=Collector(dqn, envs, ReplayBuffer(100, 1)),
            params=OffpolicyParams(
                max_epoch=1, step_per_epoch=8, batch_size=4, show_progress=False,
                resume_from=None if resume is None else str(resume),
            ),
        )  # fmt: skip

    trainer = trainer_on("CartPole-v1")
    trainer.run()
    path = trainer.save_checkpoint(tmp_path / "ckpt")
    assert gym.spec("CartPole-v0").id != "CartPole-v1"  # same spaces, another task
    with pytest.raises(
        SettingsMismatchError, match=r"env_id: saved 'CartPole-v1', now 'CartPole-v0'"
    ):
        trainer_on("CartPole-v0", path)


def test_overriding_policy_update_fn_changes_what_every_trainer_runs() -> None:
    calls: list[int] = []

    def counting(kind: str) -> Any:
        trainer = build(kind, max_epoch=1)

        def policy_update_fn(self: Any, collect_stats: CollectStats | None) -> Any:
            calls.append(1)
            return None  # learns nothing

        trainer.__class__ = type(
            "Counting", (type(trainer),), {"policy_update_fn": policy_update_fn}
        )
        return trainer

    for kind in ("on", "off", "offline"):
        calls.clear()
        trainer = counting(kind)
        trainer.run()
        assert calls, kind
        assert trainer.state.gradient_step == 0, kind


def test_exploration_set_in_train_fn_holds_for_training_and_test_fn_for_testing() -> None:
    seen: dict[str, list[float]] = {"train": [], "test": []}
    trainer = make_trainer(
        "dqn",
        "CartPole-v1",
        max_epoch=2,
        step_per_epoch=64,
        step_per_collect=16,
        warmup_steps=0,
        episode_per_test=1,
        num_test_envs=1,
        show_progress=False,
        stop_fn=None,
        train_fn=lambda epoch, step: setattr(trainer.policy, "epsilon", 0.5),
        test_fn=lambda epoch, step: trainer.policy.set_eps(0.0),
    )
    policy = trainer.policy
    assert isinstance(policy, DQN)
    act = policy.act

    def spy(obs: Any, deterministic: bool = False) -> Any:
        seen["test" if deterministic else "train"].append(policy.epsilon)
        return act(obs, deterministic)

    policy.__dict__["act"] = spy
    trainer.run()
    assert set(seen["train"]) == {0.5}  # the schedule did not overwrite the user's epsilon
    assert set(seen["test"]) == {0.0}
    assert policy.epsilon == 0.5 and policy.scheduled_epsilon < 1.0  # schedule still advances
    policy.epsilon = None  # hand control back to the schedule
    assert policy.epsilon == policy.scheduled_epsilon


def test_make_trainer_builds_the_spec_bitwise_like_its_short_form() -> None:
    spec = _quiet(RunSpec.tuned("ppo", "CartPole-v1", seed=2), max_epoch=1, step_per_epoch=256)
    a = make_trainer(spec)
    b = make_trainer("ppo", "CartPole-v1", seed=2, max_epoch=1, step_per_epoch=256,
                     show_progress=False)  # fmt: skip
    assert a.spec == b.spec == spec.to_dict()
    stats_a, stats_b = next(a), next(b)
    assert stats_a.test_collect_stat is not None and stats_b.test_collect_stat is not None
    assert stats_a.test_collect_stat.returns.tolist() == stats_b.test_collect_stat.returns.tolist()


def test_prioritized_buffer_from_the_spec_anneals_over_the_run() -> None:
    trainer = make_trainer("dqn", "CartPole-v1", max_epoch=3, step_per_epoch=100,
                           prioritized_replay=True, show_progress=False)  # fmt: skip
    buffer = trainer.train_collector.buffer
    assert isinstance(buffer, PrioritizedReplayBuffer) and buffer.beta_anneal_steps == 300


def test_spec_settings_that_conflict_are_refused() -> None:
    with pytest.raises(ValueError, match="prioritized_replay=True needs an off-policy algorithm"):
        RunSpec.tuned("ppo", "CartPole-v1").with_overrides({"prioritized_replay": True})
    with pytest.raises(ValueError, match="exactly one of step_per_collect and episode_per_collect"):
        OnpolicyParams(episode_per_collect=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = RunSpec.tuned("ppo", "CartPole-v1").with_overrides({"episode_per_collect": 4})
    assert spec.trainer.step_per_collect is None  # collect by episodes instead


# ------------------------------------------------------------------ other libraries' names
@pytest.mark.parametrize(
    ("algo", "name", "suggested"),
    [
        ("ppo", "n_epochs", "'repeat_per_collect'"),  # not max_epoch: SB3's passes per rollout
        ("ppo", "n_steps", "'step_per_collect'"),  # not lr_anneal_steps
        ("ppo", "learning_rate", "'lr'"),
        ("dqn", "learning_starts", "'warmup_steps'"),
        ("dqn", "target_update_interval", "'target_update_freq'"),
        ("sac", "lr", "'actor_lr' or 'alpha_lr' or 'critic_lr'"),
        ("sac", "learning_rate", "'actor_lr' or 'alpha_lr' or 'critic_lr'"),
        ("sac", "ent_coef", "'alpha' or 'auto_alpha'"),
        ("sac", "gradient_steps", "'update_per_step'"),
        ("ppo", "update_step_num_repetitions", "'repeat_per_collect'"),  # Tianshou v2
    ],
)
def test_an_unknown_name_from_sb3_or_tianshou_suggests_the_setting_that_plays_its_part(
    algo: str, name: str, suggested: str
) -> None:
    spec = RunSpec.default(algo, "CartPole-v1")
    with pytest.raises(ValueError) as exc:
        spec.with_overrides({name: 1})
    message = str(exc.value)
    assert f"unknown setting {name!r} for algo {algo!r} (did you mean {suggested}?);" in message
    assert "\n" not in message


def test_every_name_the_other_library_table_suggests_is_a_setting() -> None:
    from epochtrain.suggestions import OTHER_LIBRARY_NAMES

    settings = {f.name for f in dataclasses.fields(RunSpec)}
    for entry in ALGORITHMS.values():
        for cls in (entry.config_cls, entry.params_cls, BufferSpec, LogSpec):
            settings |= {f.name for f in dataclasses.fields(cls)}
    unknown = {t for targets in OTHER_LIBRARY_NAMES.values() for t in targets} - settings
    assert not unknown


def test_a_spec_file_with_an_infinite_setting_names_the_file_and_the_field(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.toml"
    path.write_text('algo = "ppo"\nenv_id = "CartPole-v1"\n[config]\nent_coef = inf\n')
    with pytest.raises(ValueError, match=r"run\.toml: PPOConfig\.ent_coef must be finite, got inf"):
        RunSpec.from_file(path)


def test_a_setting_of_the_other_kind_of_algorithm_is_refused_not_ignored() -> None:
    with pytest.raises(ValueError, match=r"RunSpec.dataset is the data of an offline algorithm"):
        RunSpec.tuned("ppo", "CartPole-v1").with_overrides({"dataset": "data.buf"})
    with pytest.raises(ValueError, match=r"RunSpec.num_envs must be 0 for the offline algo 'bc'"):
        RunSpec.tuned("bc", "CartPole-v1").with_overrides({"num_envs": 4})


def test_an_env_object_in_place_of_its_id_is_a_type_error_saying_what_to_pass() -> None:
    env = gym.make("CartPole-v1")
    with pytest.raises(TypeError, match=r"env_id must be a gymnasium env id .*got a TimeLimit"):
        make_trainer("ppo", env)
    env.close()


@pytest.mark.parametrize(
    ("device", "fragment"), [("meta", "holds shapes, not values"), ("cuda", "CUDA is not")]
)
def test_a_device_that_cannot_hold_the_networks_is_refused_when_the_policy_is_built(
    device: str, fragment: str
) -> None:
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match=fragment):
        make_trainer("ppo", "CartPole-v1", device=device)
