"""What a save may replace, and how a damaged checkpoint is reported (epochtrain.checkpoint)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from epochtrain import make_trainer
from epochtrain.checkpoint import (
    MANIFEST,
    CheckpointError,
    find_checkpoints,
    read_manifest,
    resolve_checkpoint,
)
from epochtrain.checkpoint_save import _sha256
from epochtrain.cli import main
from tests.faults.envs import dqn_trainer
from tests.trainer.tiny import build

CARTPOLE = dict(
    step_per_epoch=64, step_per_collect=64, batch_size=64, show_progress=False, stop_fn=None
)


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _edit_manifest(ckpt: Path, **changes: Any) -> None:
    manifest = json.loads((ckpt / MANIFEST).read_text())
    manifest.update(changes)
    (ckpt / MANIFEST).write_text(json.dumps(manifest))


def test_a_save_refuses_a_user_folder_a_file_or_no_path_and_writes_nothing(
    tmp_path: Path,
) -> None:
    trainer = build("off", max_epoch=2)
    next(trainer)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.csv").write_text("1,2")
    (tmp_path / "notes.txt").write_text("important")
    before = _listing(tmp_path)

    with pytest.raises(ValueError, match=r"'.*data' is a directory that holds no .*x\.csv"):
        trainer.save_checkpoint(tmp_path / "data")
    with pytest.raises(ValueError, match=r"'.*notes\.txt' is a file, not a checkpoint"):
        trainer.save_checkpoint(tmp_path / "notes.txt")
    with pytest.raises(ValueError, match=r"'.*notes\.txt' is a file; pass a path under"):
        trainer.save_checkpoint(tmp_path / "notes.txt" / "ckpt")
    with pytest.raises(ValueError, match=r"path '' names no directory"):
        trainer.save_checkpoint("")

    assert _listing(tmp_path) == before  # no .tmp-*, no .old-*: nothing written or moved
    assert (tmp_path / "data" / "x.csv").read_text() == "1,2"
    assert (tmp_path / "notes.txt").read_text() == "important"


def test_a_save_does_not_replace_another_runs_checkpoint(tmp_path: Path) -> None:
    other = make_trainer("dqn", "CartPole-v1", seed=0, warmup_steps=0, **CARTPOLE)
    theirs = other.save_checkpoint(tmp_path / "theirs")
    same_algo = make_trainer("ppo", "CartPole-v1", seed=1, **CARTPOLE)
    ours = same_algo.save_checkpoint(tmp_path / "seed1")
    trainer = make_trainer("ppo", "CartPole-v1", seed=0, **CARTPOLE)
    before = _listing(tmp_path)

    with pytest.raises(ValueError, match=r"another run \(dqn on CartPole-v1, seed 0, epoch 0;"):
        trainer.save_checkpoint(theirs)
    with pytest.raises(ValueError, match=r"another run \(ppo on CartPole-v1, seed 1"):
        trainer.save_checkpoint(ours)
    assert _listing(tmp_path) == before
    assert read_manifest(theirs)["spec"]["algo"] == "dqn"

    # this run's own checkpoint (the docs' "manual/after-2" twice) and an empty directory
    (tmp_path / "empty").mkdir()
    trainer.save_checkpoint(tmp_path / "empty")
    mine = trainer.save_checkpoint(tmp_path / "manual" / "after")
    next(trainer)
    trainer.save_checkpoint(mine)
    assert read_manifest(mine)["epoch"] == 1
    assert os.listdir(tmp_path / "manual") == ["after"]


@pytest.mark.parametrize("version", [0, -1])
def test_a_format_version_no_epochtrain_wrote_is_refused(tmp_path: Path, version: int) -> None:
    trainer = build("off", max_epoch=2)
    path = trainer.save_checkpoint(tmp_path / "ckpt")
    _edit_manifest(path, format_version=version)
    with pytest.raises(CheckpointError, match=rf"'format_version' is {version}, not a version"):
        read_manifest(path)


def _damaged_checkpoint_dir(tmp_path: Path) -> Path:
    """A checkpoint_dir with epoch_000001 and epoch_000002, whose policy.pt is truncated,
    and what a save of epoch_000003 killed mid-write (``kill -9``) left."""
    trainer = build("off", max_epoch=2, checkpoint_dir=str(tmp_path / "ckpts"))
    trainer.run()
    del trainer  # lets go of the directory's lock
    root = tmp_path / "ckpts"
    os.truncate(root / "epoch_000002" / "policy.pt", 100)
    killed = root / f".tmp-epoch_000003-{2**22 + 12345}"  # no such process: pid_max is below
    killed.mkdir()
    (killed / "policy.pt").write_bytes(b"half")
    return root


def test_a_damaged_latest_checkpoint_is_refused_naming_the_file_and_the_one_before(
    tmp_path: Path,
) -> None:
    root = _damaged_checkpoint_dir(tmp_path)
    policy = root / "epoch_000002" / "policy.pt"
    with pytest.raises(CheckpointError) as info:
        build("off", max_epoch=2, checkpoint_dir=str(root), resume_from=str(root))
    message = str(info.value)
    assert "epoch_000002, is damaged" in message  # a killed save's .tmp-* is no checkpoint
    assert f"{str(policy)!r} has 100 bytes" in message
    assert f"pass {str(root / 'epoch_000001')!r}" in message
    assert policy.stat().st_size == 100  # left as it was, for the user to look at


def test_a_run_resumed_from_the_one_before_sets_the_damaged_one_aside_never_replaces_it(
    tmp_path: Path,
) -> None:
    root = _damaged_checkpoint_dir(tmp_path)
    with pytest.warns(UserWarning, match=r"changed settings .*max_epoch: saved 2, now 3"):
        resumed = build(
            "off", max_epoch=3, checkpoint_dir=str(root), resume_from=str(root / "epoch_000001")
        )
    with pytest.warns(UserWarning, match=r"epoch_000002' is damaged.*'damaged-epoch_000002'"):
        next(resumed)
    assert (root / "damaged-epoch_000002" / "policy.pt").stat().st_size == 100
    assert read_manifest(root / "epoch_000002")["epoch"] == 2


def _cli_run(tmp_path: Path) -> Path:
    args = ["train", "--algo", "ppo", "--step-per-epoch", "64", "--no-progress", "--quiet"]
    assert main([*args, "--max-epoch", "1", "--logdir", str(tmp_path), "--stop-at", "none"]) == 0
    (run_dir,) = tmp_path.iterdir()
    return run_dir


@pytest.mark.parametrize("damage", ["truncated policy.pt", "empty", "list", "no manifest"])
def test_the_cli_names_its_only_checkpoint_damaged_and_never_advises_deleting_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    run_dir = _cli_run(tmp_path)
    ckpt = run_dir / "checkpoints" / "epoch_000001"
    if damage == "truncated policy.pt":
        os.truncate(ckpt / "policy.pt", 100)
        named = "policy.pt' has 100 bytes"
    elif damage == "no manifest":
        (ckpt / MANIFEST).unlink()
        named = "manifest.json' is missing"
    else:
        (ckpt / MANIFEST).write_text("" if damage == "empty" else "[1]")
        named = "manifest.json'"
    capsys.readouterr()
    assert main(["train", "--resume", str(run_dir), "--max-epoch", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "epoch_000001, is damaged" in err and named in err, err
    assert "deleted" not in err and "stopped before its first checkpoint" not in err
    assert main(["eval", str(run_dir), "--episodes", "1"]) == 2
    assert named in capsys.readouterr().err


def test_eval_warns_of_other_versions_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = make_trainer("ppo", "CartPole-v1", seed=0, **CARTPOLE).save_checkpoint(tmp_path / "a")
    manifest = json.loads((ckpt / MANIFEST).read_text())
    _edit_manifest(ckpt, versions={**manifest["versions"], "torch": "99.0"})
    capsys.readouterr()
    assert main(["eval", str(ckpt), "--episodes", "1"]) == 0
    assert capsys.readouterr().err.count("was written with torch 99.0") == 1


def test_eval_of_another_algorithms_weights_names_policy_pt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = make_trainer("ppo", "CartPole-v1", seed=0, **CARTPOLE).save_checkpoint(tmp_path / "a")
    manifest = json.loads((ckpt / MANIFEST).read_text())
    dqn = make_trainer("dqn", "CartPole-v1", seed=0, warmup_steps=0, **CARTPOLE)
    foreign = dqn.save_checkpoint(tmp_path / "b") / "policy.pt"
    os.replace(foreign, ckpt / "policy.pt")
    files = manifest["files"]
    files["policy.pt"] = {
        "bytes": (ckpt / "policy.pt").stat().st_size,
        "sha256": _sha256(ckpt / "policy.pt"),
    }
    _edit_manifest(ckpt, files=files)
    capsys.readouterr()
    assert main(["eval", str(ckpt), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert f"{str(ckpt / 'policy.pt')!r} does not fit this PPO" in err, err


def test_checkpoints_past_epoch_999999_are_ordered_by_epoch_not_by_name(tmp_path: Path) -> None:
    # the names have 6 digits: by name, epoch_1000000 sorted before epoch_999999, so a
    # resume took the older one and rotation removed the newest
    trainer = dqn_trainer(max_epoch=1, checkpoint_dir=str(tmp_path / "first"))
    trainer.run()
    (written,) = find_checkpoints(tmp_path / "first")
    root = tmp_path / "ckpts"
    for name in ("epoch_999999", "epoch_1000000"):
        shutil.copytree(written, root / name)
    assert [p.name for p in find_checkpoints(root)] == ["epoch_999999", "epoch_1000000"]
    assert resolve_checkpoint(root).name == "epoch_1000000"
