"""docs/specs.md runs as written: its python blocks, and its TOML spec loads and trains."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from epochtrain import PPO, OnpolicyTrainer, RunSpec, make_trainer

PAGE = Path(__file__).resolve().parents[1] / "docs" / "specs.md"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)


def test_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    found = blocks("python")
    assert len(found) >= 2
    namespace: dict[str, object] = {}
    for block in found:
        exec(compile(block, str(PAGE), "exec"), namespace)
    assert (tmp_path / "dqn.toml").is_file()


def test_the_minimal_toml_example_is_the_tuned_spec(tmp_path: Path) -> None:
    minimal, _ = blocks("toml")
    path = tmp_path / "run.toml"
    path.write_text(minimal)
    assert RunSpec.from_file(path) == RunSpec.tuned("dqn", "CartPole-v1")
    assert "epochtrain train --algo dqn --env CartPole-v1" in " ".join(PAGE.read_text().split())


def test_the_toml_example_loads_and_runs(tmp_path: Path) -> None:
    _, toml = blocks("toml")
    path = tmp_path / "run.toml"
    path.write_text(toml)
    spec = RunSpec.from_file(path)
    assert spec.stop_at is None and spec.config.hidden == (32, 32) and spec.num_envs == 4
    trainer = make_trainer(spec)
    assert isinstance(trainer, OnpolicyTrainer) and isinstance(trainer.policy, PPO)
    info = trainer.run()
    assert info.epoch == 1 and info.env_step >= 512 and info.gradient_step == 2 * 2 * 256 // 64


def test_the_count_of_tuned_cases_is_that_of_the_presets() -> None:
    from epochtrain import PRESETS

    words = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    text = " ".join(PAGE.read_text().split())
    assert len(PRESETS) < len(words), "spell the count in docs/specs.md and extend words"
    assert f"all {words[len(PRESETS)]} tuned cases" in text
