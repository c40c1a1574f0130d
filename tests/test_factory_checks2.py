"""make_trainer and the CLI refuse or warn about settings before any work, naming the
setting the user gave: ``checkpoint_dir=""``, a rollout too large for memory (blamed on
``step_per_collect``, not ``buffer_size``), a device ``config`` cannot use (as ``train``
refuses it), and an on-policy minibatch larger than the rollout (a warning)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

import epochtrain.data.buffer_storage
import epochtrain.factory
from epochtrain import RunSpec, make_trainer
from epochtrain.cli import main
from epochtrain.factory import UnusedSettingWarning

SHORT: dict[str, Any] = dict(max_epoch=1, step_per_epoch=16, show_progress=False)


def test_an_empty_checkpoint_dir_is_refused_before_any_env_saying_to_pass_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It wrote the checkpoints into the working directory."""
    made: list[str] = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(epochtrain.factory, "make_envs", lambda *a, **k: made.append("envs"))
    with pytest.raises(ValueError, match=r"checkpoint_dir='' .* pass checkpoint_dir=None"):
        make_trainer("ppo", "CartPole-v1", checkpoint_dir="", **SHORT)
    spec = RunSpec.tuned("ppo", "CartPole-v1").with_overrides({"checkpoint_dir": ""})
    with pytest.raises(ValueError, match=r"checkpoint_dir=None for no checkpoints"):
        make_trainer(spec)
    assert made == [] and list(tmp_path.iterdir()) == []


def test_the_clis_empty_checkpoint_dir_still_means_no_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--algo", "ppo", "--env", "CartPole-v1", "--logdir", "", "--quiet"]
    sizes = ["--max-epoch", "1", "--step-per-epoch", "16", "--step-per-collect", "16"]
    sizes += ["--num-envs", "1", "--num-test-envs", "1", "--episode-per-test", "1"]
    assert main([*argv, *sizes, "--checkpoint-dir", ""]) == 0
    assert list(tmp_path.iterdir()) == []


def test_a_rollout_too_large_for_memory_is_blamed_on_step_per_collect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It said "lower buffer_size", which on-policy runs leave unset."""
    monkeypatch.setattr(epochtrain.data.buffer_storage, "available_memory", lambda: 10**6)
    with pytest.raises(ValueError) as info:
        make_trainer("ppo", "CartPole-v1", num_envs=1, step_per_collect=100_000, **SHORT)
    message = str(info.value)
    assert message.startswith("step_per_collect=100,000 makes a buffer of 100,000 transitions")
    assert "lower step_per_collect (at most 17,021 here)" in message
    assert "buffer_size" not in message
    with pytest.raises(ValueError, match=r"^buffer_size=100,000 transitions .* lower buffer_size"):
        make_trainer("dqn", "CartPole-v1", num_envs=1, buffer_size=100_000, **SHORT)


def test_config_refuses_a_device_as_train_does(capsys: pytest.CaptureFixture[str]) -> None:
    """It printed the spec and exited 0."""
    assert main(["config", "--algo", "ppo", "--env", "CartPole-v1", "--device", "banana"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "--device must be a torch device such as 'cpu' or 'cuda:0', got 'banana'" in err


def test_config_refuses_an_algorithm_for_the_wrong_action_space(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["config", "--algo", "td3bc", "--env", "CartPole-v1"]) == 2
    assert "for Discrete actions use bc or cql" in capsys.readouterr().err


def test_a_minibatch_larger_than_the_rollout_warns_naming_both_sizes() -> None:
    """It ran silently, one gradient step per pass on the whole rollout."""
    with pytest.warns(UnusedSettingWarning, match=r"batch_size=33 is larger than the rollout .*"
                      r"step_per_collect=31 over num_envs=2: 32 transitions"):  # fmt: skip
        make_trainer("ppo", "CartPole-v1", num_envs=2, step_per_collect=31, batch_size=33, **SHORT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        long = {**SHORT, "step_per_epoch": 32}  # one whole collect step
        make_trainer("ppo", "CartPole-v1", num_envs=2, step_per_collect=31, batch_size=32, **long)
        make_trainer("ppo", "CartPole-v1", num_envs=2, step_per_collect=31, batch_size=None, **long)


FIT: dict[str, Any] = dict(batch_size=None, show_progress=False)


def test_an_epoch_shorter_than_one_collect_step_warns_naming_both_sizes() -> None:
    """It ran a whole collect step per epoch silently (256 env steps for 64 asked)."""
    with pytest.warns(UnusedSettingWarning, match=r"step_per_epoch=64 is less than one collect "
                      r"step \(step_per_collect=250 over num_envs=4: 252 env steps\)"):  # fmt: skip
        make_trainer(
            "ppo", "CartPole-v1", num_envs=4, step_per_collect=250, step_per_epoch=64, **FIT
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_trainer(
            "ppo", "CartPole-v1", num_envs=4, step_per_collect=250, step_per_epoch=252, **FIT
        )
        make_trainer(
            "pg",
            "CartPole-v1",
            episode_per_collect=1,
            step_per_collect=None,
            buffer_size=2000,
            **FIT,
        )
