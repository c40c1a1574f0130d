"""Checkpoint format, rotation, validation and resume edge cases (epochtrain.checkpoint)."""

from __future__ import annotations

import gc
import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from epochtrain import RunSpec, make_trainer
from epochtrain.checkpoint import (
    MANIFEST,
    CheckpointError,
    find_checkpoints,
    read_manifest,
    resolve_checkpoint,
)
from epochtrain.data import Collector, ReplayBuffer
from epochtrain.factory import UnusedSettingWarning
from epochtrain.trainer import OffpolicyParams, OffpolicyTrainer
from tests.trainer.test_base import comparable
from tests.trainer.tiny import TinyPolicy, build


def saved(tmp_path: Path, **kw: Any) -> tuple[Any, Path]:
    trainer = build("off", max_epoch=3, **kw)
    next(trainer)
    return trainer, trainer.save_checkpoint(tmp_path / "ckpt")


def test_checkpoint_directory_layout_and_manifest(tmp_path: Path) -> None:
    trainer = make_trainer(
        "dqn", "CartPole-v1", seed=4, max_epoch=2, step_per_epoch=32, warmup_steps=16,
        num_test_envs=1, episode_per_test=1, show_progress=False, stop_fn=None,
    )  # fmt: skip
    next(trainer)
    path = trainer.save_checkpoint(tmp_path / "run" / "first")
    assert sorted(p.name for p in path.iterdir()) == [
        "buffer.pt",
        MANIFEST,
        "policy.pt",
        "trainer.pt",
    ]
    manifest = read_manifest(path)
    assert manifest["format"] == "epochtrain-checkpoint" and manifest["format_version"] == 1
    assert set(manifest["versions"]) >= {"epochtrain", "torch", "gymnasium"}
    assert (manifest["epoch"], manifest["env_step"]) == (1, trainer.state.env_step)
    assert manifest["gradient_step"] == trainer.state.gradient_step
    spec = manifest["spec"]  # the whole run spec, from which the run can be rebuilt
    assert (spec["algo"], spec["env_id"], spec["trainer"]["seed"]) == ("dqn", "CartPole-v1", 4)
    assert spec["trainer"]["step_per_epoch"] == 32 and spec["trainer"]["warmup_steps"] == 16
    assert RunSpec.from_dict(spec) == RunSpec.from_dict(manifest["settings"])
    config = manifest["config"]
    assert (config["trainer"], config["policy"]) == ("OffpolicyTrainer", "DQN")
    assert config["params"]["step_per_epoch"] == 32
    assert set(manifest["files"]) == {"buffer.pt", "policy.pt", "trainer.pt"}
    assert not list(path.parent.glob(".tmp-*"))  # the temporary directory was renamed


def test_partial_checkpoint_raises_naming_the_missing_manifest(tmp_path: Path) -> None:
    _, path = saved(tmp_path)
    (path / MANIFEST).unlink()
    with pytest.raises(CheckpointError, match=r"manifest.json' is missing: .* not a complete"):
        build("off", max_epoch=3, resume_from=path)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupt_file_raises_naming_the_file_and_the_problem(tmp_path: Path, damage: str) -> None:
    _, path = saved(tmp_path)
    file = path / "trainer.pt"
    data = bytearray(file.read_bytes())
    if damage == "truncate":
        file.write_bytes(data[: len(data) // 2])
        match = r"trainer.pt' has \d+ bytes, the manifest says \d+"
    else:
        data[len(data) // 2] ^= 0xFF
        file.write_bytes(bytes(data))
        match = r"trainer.pt' is corrupt: its sha256 differs"
    with pytest.raises(CheckpointError, match=match):
        build("off", max_epoch=3).load_checkpoint(path)


def test_garbled_manifest_raises(tmp_path: Path) -> None:
    _, path = saved(tmp_path)
    (path / MANIFEST).write_text("{not json")
    with pytest.raises(CheckpointError, match=r"manifest.json' is corrupt"):
        read_manifest(path)


def test_other_library_version_loads_with_a_warning(tmp_path: Path) -> None:
    _, path = saved(tmp_path)
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["versions"]["epochtrain"] = "0.0.1"
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.warns(UserWarning, match=r"written with epochtrain 0.0.1 \(now"):
        resumed = build("off", max_epoch=3, resume_from=path)
    assert resumed.state.epoch == 1


def test_newer_format_is_refused(tmp_path: Path) -> None:
    _, path = saved(tmp_path)
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["format_version"] = 99
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"format version 99; .* upgrade epochtrain"):
        read_manifest(path)


def test_wrong_trainer_class_is_refused(tmp_path: Path) -> None:
    _, path = saved(tmp_path)
    with pytest.raises(ValueError, match="written by a OffpolicyTrainer trainer, this one is a"):
        build("on", max_epoch=3, resume_from=path)


def test_periodic_checkpoints_rotate_keeping_the_last_and_the_best(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    returns = iter([5.0, 9.0, 1.0, 2.0, 3.0])
    trainer = build("off", max_epoch=5, checkpoint_dir=tmp_path, checkpoint_every=1, keep_last=2)
    # fake test returns so that epoch 2 is the best
    trainer.register_op("test_end", lambda stat: None)
    original = trainer.test_collector.collect

    def collect(**kw: Any) -> Any:
        stat = original(**kw)
        value = next(returns)
        assert stat.returns_stat is not None
        stat.returns_stat.mean = value
        return stat

    monkeypatch.setattr(trainer.test_collector, "collect", collect)
    trainer.run()
    names = [p.name for p in find_checkpoints(tmp_path)]
    assert names == ["epoch_000002", "epoch_000004", "epoch_000005"]
    assert resolve_checkpoint(tmp_path).name == "epoch_000005"


def test_keep_last_none_keeps_all_and_every_k_epochs(tmp_path: Path) -> None:
    build("off", max_epoch=5, checkpoint_dir=tmp_path, checkpoint_every=2, keep_last=None).run()
    # every 2 epochs, and the final epoch
    assert [p.name for p in find_checkpoints(tmp_path)] == [
        "epoch_000002",
        "epoch_000004",
        "epoch_000005",
    ]


@pytest.mark.parametrize("keep_last", [None, 2])
def test_a_save_reads_no_more_checkpoints_as_they_accumulate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep_last: int | None
) -> None:
    """Checkpoints read per save stay flat over a long run (before, with keep_last=None,
    each save re-read every manifest: 575 ms a save at epoch 400)."""
    import epochtrain.checkpoint_files as files
    import epochtrain.checkpoint_save as save

    reads: list[Path] = []
    real = files.is_complete

    def counted(path: Path) -> bool:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(files, "is_complete", counted)
    monkeypatch.setattr(save, "is_complete", counted)
    trainer = build("off", max_epoch=8, step_per_epoch=10, checkpoint_dir=tmp_path,
                    keep_last=keep_last)  # fmt: skip
    per_save = []
    for _ in trainer:
        per_save.append(len(reads))
        reads.clear()
    assert max(per_save[1:]) <= (0 if keep_last is None else keep_last + 2), per_save
    kept = [p.name for p in find_checkpoints(tmp_path)]  # (and, with keep_best, the best)
    assert kept[-(keep_last or 8) :] == [f"epoch_{e:06d}" for e in range(9 - (keep_last or 8), 9)]


def test_after_a_failed_save_the_next_save_cleans_what_it_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saves read the directory once per lock; a failed one (a full disk) makes the next
    save look again, so its partial copy does not stay behind."""
    import os

    import epochtrain.checkpoint_periodic as save

    real = save.save_checkpoint
    leftover = tmp_path / f".tmp-epoch_000002-{os.getpid()}"

    def full_disk(trainer: Any, path: Path) -> Path:
        leftover.mkdir()
        raise OSError(28, "No space left on device")

    trainer = build("off", max_epoch=3, step_per_epoch=10, checkpoint_dir=tmp_path)
    next(trainer)
    monkeypatch.setattr(save, "save_checkpoint", full_disk)
    with pytest.raises(OSError, match="No space left"):
        next(trainer)
    monkeypatch.setattr(save, "save_checkpoint", real)
    next(trainer)
    assert not leftover.exists()
    assert [p.name for p in find_checkpoints(tmp_path)][-1] == "epoch_000003"


def test_resume_from_a_checkpoint_dir_takes_the_latest(tmp_path: Path) -> None:
    full = [comparable(s) for s in build("off", max_epoch=3)]
    first = build("off", max_epoch=3, checkpoint_dir=tmp_path)
    next(first), next(first)
    resumed = build("off", max_epoch=3, resume_from=tmp_path)
    assert resumed.state.epoch == 2
    assert [comparable(s) for s in resumed] == full[2:]


def test_finished_run_resumed_with_a_larger_max_epoch_goes_on(tmp_path: Path) -> None:
    full = [comparable(s) for s in build("off", max_epoch=3)]
    short = build("off", max_epoch=2, checkpoint_dir=tmp_path)
    short.run()
    assert short.stop_reason == "max_epoch"
    longer = build("off", max_epoch=3, resume_from=tmp_path)
    assert [comparable(s) for s in longer] == full[2:]
    same = build("off", max_epoch=2, resume_from=tmp_path)
    assert list(same) == [] and same.stop_reason == "max_epoch"


def test_save_inside_next_is_refused(tmp_path: Path) -> None:
    trainer = build("off", max_epoch=1)
    trainer.register_op("epoch_end", lambda stats: trainer.save_checkpoint(tmp_path / "x"))
    with pytest.raises(RuntimeError, match="save_checkpoint cannot run inside next"):
        next(trainer)


def test_resume_validation_happens_in_the_constructor(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"resume_from=.*does not exist"):
        build("off", resume_from=tmp_path / "nope")
    with pytest.raises(CheckpointError, match="holds no complete checkpoint"):
        build("off", resume_from=tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="checkpoint_dir must be a directory"):
        build("off", checkpoint_dir=tmp_path / "file")
    with pytest.raises(ValueError, match="keep_last must be int or None"):
        build("off", keep_last=0)
    with pytest.raises(ValueError, match="checkpoint_every must be int"):
        build("off", checkpoint_every=0)


def _async_trainer(resume_from: Path | None = None) -> OffpolicyTrainer[Any]:
    import torch

    from tests.trainer.tiny import make_envs

    torch.manual_seed(0)
    train_envs = gym.make_vec(
        "CartPole-v1",
        num_envs=2,
        vectorization_mode="async",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    policy = TinyPolicy(train_envs)
    params = OffpolicyParams(
        max_epoch=3,
        step_per_epoch=40,
        step_per_collect=10,
        batch_size=16,
        episode_per_test=2,
        show_progress=False,
        seed=7,
        resume_from=None if resume_from is None else str(resume_from),
    )
    return OffpolicyTrainer(
        policy=policy,
        train_collector=Collector(policy, train_envs, ReplayBuffer(400, 2)),
        test_collector=Collector(policy, make_envs(2), exploration=False),
        params=params,
    )


def test_async_envs_restart_their_episodes_deterministically(tmp_path: Path) -> None:
    first = _async_trainer()
    next(first)
    path = first.save_checkpoint(tmp_path / "ckpt")
    first.train_collector.env.close()
    runs = []
    for _ in range(2):
        resumed = _async_trainer(resume_from=path)
        runs.append([comparable(s) for s in resumed])
        resumed.train_collector.env.close()
    assert runs[0] == runs[1] and len(runs[0]) == 2


def test_params_resume_from_builds_the_trainer_and_restores_it(tmp_path: Path) -> None:
    full = [comparable(s) for s in build("off", max_epoch=3)]
    _, path = saved(tmp_path)
    parts = build("off", max_epoch=3)  # fresh policy and collectors, built the same way
    resumed = OffpolicyTrainer(
        policy=parts.policy,
        train_collector=parts.train_collector,
        test_collector=parts.test_collector,
        params=parts.params.replace(resume_from=path),
    )
    assert isinstance(resumed, OffpolicyTrainer) and resumed.state.epoch == 1
    assert [comparable(s) for s in resumed] == full[1:]


def _resume_warnings(**settings: Any) -> list[str]:
    """The warnings of a DQN trainer built with ``settings`` (resume_from among them), but
    the note that its tiny epochs run whole collect steps."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=UnusedSettingWarning)
        trainer = make_trainer("dqn", "CartPole-v1", **TINY_DQN, **settings)
    del trainer  # lets go of the checkpoint_dir
    gc.collect()
    return [str(w.message) for w in caught]


TINY_DQN: dict[str, Any] = dict(
    max_epoch=1, step_per_epoch=32, warmup_steps=16, num_test_envs=1, episode_per_test=1,
    show_progress=False, stop_fn=None,
)  # fmt: skip


PATHS = {"logdir": "run", "checkpoint_dir": "run/checkpoints"}


def _run_in_a_with_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run a tiny DQN with :data:`PATHS` from ``tmp_path/a`` (the cwd after this; ``b``
    is made beside it); returns its checkpoint."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    first = make_trainer("dqn", "CartPole-v1", **TINY_DQN, **PATHS)
    first.run()
    del first
    gc.collect()
    (ckpt,) = find_checkpoints(tmp_path / "a" / "run" / "checkpoints")
    return ckpt


def test_directories_are_recorded_absolute_and_compared_as_the_directories_they_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = _run_in_a_with_relative_paths(tmp_path, monkeypatch)
    run = (tmp_path / "a" / "run").resolve()
    settings = read_manifest(ckpt)["settings"]
    assert settings["logging"]["logdir"] == str(run)
    assert settings["trainer"]["checkpoint_dir"] == str(run / "checkpoints")
    absolute = {"logdir": str(run), "checkpoint_dir": str(run / "checkpoints")}
    assert _resume_warnings(**PATHS, resume_from=str(ckpt)) == []
    monkeypatch.chdir(tmp_path / "b")
    assert _resume_warnings(**absolute, resume_from=str(ckpt)) == []


def test_an_older_checkpoints_relative_directories_name_the_same_ones_from_either_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = _run_in_a_with_relative_paths(tmp_path, monkeypatch)
    manifest = json.loads((ckpt / MANIFEST).read_text())  # as an older epochtrain wrote it:
    manifest["settings"]["logging"]["logdir"] = "run"  # relative to a cwd it did not record
    manifest["settings"]["trainer"]["checkpoint_dir"] = "run/checkpoints"
    (ckpt / MANIFEST).write_text(json.dumps(manifest))
    run = (tmp_path / "a" / "run").resolve()
    absolute = {"logdir": str(run), "checkpoint_dir": str(run / "checkpoints")}
    assert _resume_warnings(**absolute, resume_from=str(ckpt)) == []  # from its own cwd
    monkeypatch.chdir(tmp_path / "b")  # the run's cwd is inferred from the checkpoint's place
    assert _resume_warnings(**absolute, resume_from=str(ckpt)) == []
    other = str(tmp_path / "b" / "other")
    (changed,) = _resume_warnings(
        logdir=other, checkpoint_dir=str(run / "checkpoints"), resume_from=str(ckpt)
    )
    assert f"logging.logdir: saved 'run', now '{other}'" in changed
    assert "checkpoint_dir" not in changed
