"""A spec naming only its algorithm and env is the run `epochtrain train --algo A --env E`
starts (the tuned spec), for every algorithm: as a spec file, as ``RunSpec(...)`` and after
a ``to_toml`` round trip; and a missing setting never falls back to another algorithm's."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from epochtrain import ALGORITHMS, PRESETS, OfflineParams, RunSpec, make_trainer
from epochtrain.cli import build_parser, main
from epochtrain.spec_args import resolve_spec
from tests.pendulum_data import record_swing_up

torch.set_num_threads(1)

ENV_OF = {
    "ppo": "CartPole-v1",
    "a2c": "CartPole-v1",
    "pg": "CartPole-v1",
    "dqn": "CartPole-v1",
    "sac": "Pendulum-v1",
    "td3": "Pendulum-v1",
    "ddpg": "Pendulum-v1",
    "td3bc": "Pendulum-v1",
    "cql": "Pendulum-v1",
    "bc": "Pendulum-v1",
}
"""One env per algorithm: CartPole-v1 where it acts on Discrete actions, else Pendulum-v1."""

OFFLINE = sorted(name for name, entry in ALGORITHMS.items() if entry.kind == "offline")


def test_every_registered_algorithm_is_checked_here() -> None:
    assert set(ENV_OF) == set(ALGORITHMS)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A small Pendulum-v1 dataset file, as `epochtrain collect` writes one."""
    data, _ = record_swing_up(2000, gaussian=0.5)
    path = tmp_path_factory.mktemp("data") / "pendulum.buf"
    data.save(path)
    return str(path)


def cli_spec(*argv: str) -> RunSpec:
    """The spec `epochtrain train ARGV` would run."""
    args: argparse.Namespace = build_parser().parse_args(["train", *argv])
    spec: RunSpec = resolve_spec(args)
    return spec


def short_run(spec: RunSpec) -> dict[str, Any]:
    """Settings that make a run of ``spec`` one short epoch (the rest as they are)."""
    collect = getattr(spec.trainer, "step_per_collect", None) or 64
    offline = spec.entry.kind == "offline"
    return {
        "max_epoch": 1,
        "step_per_epoch": 8 if offline else max(64, collect),
        "episode_per_test": 1,
        "stop_at": None,
        "show_progress": False,
    }


def flags(settings: dict[str, Any]) -> list[str]:
    out = []
    for name, value in settings.items():
        if isinstance(value, bool):
            out.append(f"--{'' if value else 'no-'}{name.replace('_', '-')}")
        else:
            out += [f"--{name.replace('_', '-')}", "none" if value is None else str(value)]
    return out


# ------------------------------------------------------------------ a spec file
@pytest.mark.parametrize("algo", sorted(ENV_OF))
def test_a_spec_file_of_algo_and_env_is_the_spec_train_starts_without_flags(
    algo: str, tmp_path: Path
) -> None:
    env_id = ENV_OF[algo]
    path = tmp_path / "run.toml"
    path.write_text(f'algo = "{algo}"\nenv_id = "{env_id}"\n')
    spec = RunSpec.from_file(path)
    assert spec == cli_spec("--algo", algo, "--env", env_id) == RunSpec.tuned(algo, env_id)
    assert cli_spec("--config", str(path)) == spec
    json_path = tmp_path / "run.json"
    json_path.write_text(f'{{"algo": "{algo}", "env_id": "{env_id}"}}')
    assert RunSpec.from_file(json_path) == spec


@pytest.mark.parametrize("algo", sorted(ENV_OF))
def test_a_minimal_spec_file_trains_with_train_config(
    algo: str, tmp_path: Path, dataset: str, capsys: pytest.CaptureFixture[str]
) -> None:
    env_id, offline = ENV_OF[algo], algo in OFFLINE
    path = tmp_path / "run.toml"
    extra = f'dataset = "{dataset}"\n' if offline else ""
    path.write_text(f'algo = "{algo}"\nenv_id = "{env_id}"\n{extra}')
    tuned = RunSpec.tuned(algo, env_id)
    short = short_run(tuned)
    logdir = tmp_path / "runs"
    argv = ["train", "--config", str(path), *flags(short), "--logdir", str(logdir), "--quiet"]
    assert main(argv) == 0, capsys.readouterr().err
    (spec_file,) = logdir.glob("*/spec.toml")
    ran = RunSpec.from_file(spec_file)
    expected = tuned.with_overrides({**short, "dataset": dataset if offline else None})
    run_dir = spec_file.parent
    assert ran == expected.with_overrides(
        {"logdir": str(run_dir), "checkpoint_dir": str(run_dir / "checkpoints")}
    )


@pytest.mark.parametrize("algo", OFFLINE)
def test_an_offline_spec_file_without_a_dataset_loads_and_names_the_dataset_when_built(
    algo: str, tmp_path: Path
) -> None:
    path = tmp_path / "run.toml"
    path.write_text(f'algo = "{algo}"\nenv_id = "Pendulum-v1"\n')
    spec = RunSpec.from_file(path)
    assert spec.num_envs == 0 and spec == RunSpec.tuned(algo, "Pendulum-v1")
    with pytest.raises(ValueError, match=rf"algo '{algo}' needs a dataset: set dataset="):
        make_trainer(spec)


def test_settings_a_file_gives_apply_over_the_tuned_spec_as_the_same_flags_do(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.toml"
    path.write_text('algo = "dqn"\nenv_id = "CartPole-v1"\n[trainer]\nmax_epoch = 3\n')
    spec = RunSpec.from_file(path)
    assert spec == cli_spec("--algo", "dqn", "--max-epoch", "3")
    assert spec.buffer.buffer_size == 100_000 and spec.trainer.batch_size == 64  # the preset's
    path.write_text('algo = "a2c"\nenv_id = "CartPole-v1"\n[trainer]\nepisode_per_collect = 2\n')
    spec = RunSpec.from_file(path)
    assert spec == cli_spec("--algo", "a2c", "--episode-per-collect", "2")
    assert spec.trainer.step_per_collect is None and spec.num_envs == 8


# ------------------------------------------------------------------ RunSpec(...)
@pytest.mark.parametrize("algo", sorted(ENV_OF))
def test_runspec_of_algo_and_env_round_trips_through_toml_and_runs(
    algo: str, tmp_path: Path, dataset: str
) -> None:
    env_id = ENV_OF[algo]
    extra = {"dataset": dataset} if algo in OFFLINE else {}
    spec = RunSpec(algo=algo, env_id=env_id, **extra)
    assert spec == RunSpec.tuned(algo, env_id).with_overrides(extra)
    for suffix in (".toml", ".json"):
        assert RunSpec.from_file(spec.to_file(tmp_path / f"spec{suffix}")) == spec
    reloaded = RunSpec.from_file(tmp_path / "spec.toml")
    info = make_trainer(reloaded.with_overrides(short_run(reloaded))).run()
    assert info.epoch == 1 and info.gradient_step > 0


def test_runspec_settings_given_are_kept_and_the_others_are_the_tuned_ones() -> None:
    spec = RunSpec(algo="dqn", env_id="CartPole-v1", num_envs=4, stop_at=None)
    assert spec == RunSpec.tuned("dqn", "CartPole-v1").with_overrides(
        {"num_envs": 4, "stop_at": None}
    )
    trainer = OfflineParams(max_epoch=2)
    spec = RunSpec(algo="bc", env_id="Pendulum-v1", trainer=trainer)
    assert spec.trainer is trainer and spec.num_envs == 0 and spec.stop_at is None
    assert spec.config == RunSpec.tuned("bc", "Pendulum-v1").config


def test_runspec_of_an_unknown_algo_or_env_names_it() -> None:
    with pytest.raises(ValueError, match=r"algo must be one of .* got 'ppo2'"):
        RunSpec(algo="ppo2", env_id="CartPole-v1")
    with pytest.raises(ValueError, match=r"env_id 'NoSuchEnv-v0' is not a registered"):
        RunSpec(algo="ppo", env_id="NoSuchEnv-v0")


# ------------------------------------------------------------------ None in a file
@pytest.mark.parametrize(("algo", "env_id"), sorted(PRESETS))
def test_a_none_where_the_tuned_spec_has_a_value_round_trips_through_toml(
    algo: str, env_id: str, tmp_path: Path
) -> None:
    spec = RunSpec.tuned(algo, env_id)
    nones = {
        f"{section}.{f.name}": None
        for section in ("config", "trainer")
        for f in dataclasses.fields(getattr(spec, section))
        if "None" in str(f.type) and "str" not in str(f.type) and f.name != "step_per_collect"
    }
    spec = spec.with_overrides(nones)
    assert RunSpec.from_file(spec.to_file(tmp_path / "spec.toml")) == spec
    # every None is written: a file cut short by hand keeps them (not the preset's values)
    text = spec.to_toml()
    assert all(f'{name.partition(".")[2]} = "none"' in text for name in nones)
    (tmp_path / "short.toml").write_text(text.replace('device = "cpu"\n', ""))
    assert RunSpec.from_file(tmp_path / "short.toml") == spec


def older_toml(spec: RunSpec) -> str:
    """``spec`` as the ``to_toml`` of earlier versions wrote it: every None whose field
    default is None left out (``dataset`` at the top), ``stop_at`` always written."""
    lines = [f'{name} = "{getattr(spec, name)}"' for name in ("algo", "env_id")]
    lines += [f"{name} = {getattr(spec, name)!r}" for name in ("num_envs", "num_test_envs")]
    lines += [f'env_backend = "{spec.env_backend}"', f'device = "{spec.device}"']
    lines.append("stop_at = " + ('"none"' if spec.stop_at is None else repr(spec.stop_at)))
    for section in ("config", "trainer", "buffer", "logging"):
        obj = getattr(spec, section)
        lines += ["", f"[{section}]"]
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if value is None and f.default is None:
                continue
            text = '"none"' if value is None else repr(value)
            text = text.replace("'", '"').replace("(", "[").replace(")", "]")
            lines.append(f"{f.name} = {text.replace('True', 'true').replace('False', 'false')}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("algo", "env_id", "nones"),
    [
        ("ppo", "CartPole-v1", ("lr_anneal_steps", "clip_anneal_steps")),
        ("ppo", "Pendulum-v1", ("lr_anneal_steps",)),
        ("dqn", "CartPole-v1", ()),
        ("td3bc", "Pendulum-v1", ()),
    ],
)
def test_a_spec_toml_that_left_its_nones_out_reloads_as_it_ran(
    algo: str, env_id: str, nones: tuple[str, ...], tmp_path: Path
) -> None:
    spec = RunSpec.tuned(algo, env_id).with_overrides(dict.fromkeys(nones))
    text = older_toml(spec)
    assert all(f"{name} =" not in text for name in nones)
    (tmp_path / "spec.toml").write_text(text)
    assert RunSpec.from_file(tmp_path / "spec.toml") == spec


# ------------------------------------------------------------------ wrong places
def test_a_setting_at_the_top_of_a_file_names_the_table_it_belongs_in(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('algo = "ppo"\nenv_id = "CartPole-v1"\nlr = 3e-4\n')
    with pytest.raises(TypeError, match=r"'lr' is a config setting: write it under \[config\]"):
        RunSpec.from_file(path)


def test_a_setting_of_another_kind_of_algorithm_names_the_algorithms_it_is_for(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.toml"
    path.write_text('algo = "ppo"\nenv_id = "CartPole-v1"\n[trainer]\nwarmup_steps = 100\n')
    with pytest.raises(TypeError, match=r"no field 'warmup_steps'.*a setting of .*'dqn'"):
        RunSpec.from_file(path)
    path.write_text('algo = "dqn"\nenv_id = "CartPole-v1"\n[config]\ngae_lambda = 0.9\n')
    with pytest.raises(TypeError, match=r"no field 'gae_lambda'.*a setting of .*'ppo'"):
        RunSpec.from_file(path)


def test_the_num_envs_flag_says_its_default_is_the_tuned_specs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "default: 1)" not in out.split("--num-test-envs")[0]
    assert "num_envs = 1 " not in out
