"""Checkpoints an older epochtrain wrote with buffer_size < batch_size (then allowed):
``eval`` tests them, a resume continues them as they were saved (other sizes refused by
the checkpoint's settings comparison), a new run of those settings is refused."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from epochtrain.checkpoint import read_manifest
from epochtrain.cli import main
from epochtrain.factory import make_trainer
from epochtrain.spec import RunSpec

OLD_BATCH_SIZE = 128
"""Larger than the run's buffer_size=64: what an older epochtrain let a run save."""


def old_small_buffer_run(root: Path) -> Path:
    """A one-epoch DQN run's checkpoint directory whose saved spec says batch_size=128 with
    buffer_size=64, as an epochtrain before the capacity check wrote it (the buffer file
    holds 64 transitions either way; only the saved settings are edited)."""
    ckpt_dir = root / "ckpts"
    trainer = make_trainer(
        "dqn", "CartPole-v1", seed=0, hidden=(16,), max_epoch=1, step_per_epoch=64,
        step_per_collect=16, warmup_steps=32, batch_size=32, buffer_size=64,
        episode_per_test=1, stop_fn=None, show_progress=False, checkpoint_dir=str(ckpt_dir),
    )  # fmt: skip
    with trainer:
        trainer.run()
    manifest_path = ckpt_dir / "epoch_000001" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for params in (
        manifest["spec"]["trainer"],
        manifest["settings"]["trainer"],
        manifest["config"]["params"],
    ):
        assert params["batch_size"] == 32
        params["batch_size"] = OLD_BATCH_SIZE
    manifest_path.write_text(json.dumps(manifest))
    return ckpt_dir


def saved_spec(ckpt_dir: Path) -> RunSpec:
    return RunSpec.from_dict(read_manifest(ckpt_dir / "epoch_000001")["spec"])


def test_eval_tests_the_policy_of_an_old_small_buffer_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt_dir = old_small_buffer_run(tmp_path)
    capsys.readouterr()
    assert main(["eval", str(ckpt_dir), "--episodes", "1"]) == 0
    captured = capsys.readouterr()
    assert "mean return" in captured.out and "epoch 1" in captured.out
    assert "buffer_size" not in captured.err


def test_a_resume_continues_the_old_run_as_saved_with_a_warning(tmp_path: Path) -> None:
    ckpt_dir = old_small_buffer_run(tmp_path)
    as_new_run = saved_spec(ckpt_dir).with_overrides({"checkpoint_dir": None})
    with pytest.raises(ValueError, match=r"buffer\.buffer_size=64 is smaller than trainer\.batch"):
        make_trainer(as_new_run)  # what the capacity check is for
    spec = saved_spec(ckpt_dir).with_overrides({"resume_from": str(ckpt_dir), "max_epoch": 2})
    with pytest.warns(UserWarning, match=r"buffer_size=64 .*batch_size=128") as record:
        trainer = make_trainer(spec)
    assert any("older epochtrain" in str(w.message) for w in record)
    with trainer:
        assert trainer.state.epoch == 1
        assert trainer.params.batch_size == OLD_BATCH_SIZE  # the run's own setting
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stats = list(trainer)
    assert [s.epoch for s in stats] == [2]


def test_a_resume_that_changes_the_buffer_size_of_an_old_run_is_still_compared(
    tmp_path: Path,
) -> None:
    ckpt_dir = old_small_buffer_run(tmp_path)
    spec = saved_spec(ckpt_dir).with_overrides(
        {"resume_from": str(ckpt_dir), "buffer.buffer_size": 32}
    )
    with pytest.raises(ValueError, match=r"other settings \(buffer.buffer_size: saved 64, now 32"):
        make_trainer(spec)


def test_train_resume_on_the_command_line_continues_the_old_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt_dir = old_small_buffer_run(tmp_path)
    capsys.readouterr()
    code = main(["train", "--resume", str(ckpt_dir), "--max-epoch", "2", "--no-verbose"])
    assert code == 0
    assert "buffer.buffer_size=64 smaller than trainer.batch_size=128" in capsys.readouterr().err
    assert (ckpt_dir / "epoch_000002" / "manifest.json").is_file()
