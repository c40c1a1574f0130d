"""What a resume compares beyond the run settings: the offline dataset's content and the
hooks' constructor arguments (epochtrain.checkpoint.load_checkpoint)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from epochtrain import make_trainer
from epochtrain.checkpoint import MANIFEST, CheckpointError, DatasetMismatchError
from epochtrain.cli import main
from epochtrain.data import ReplayBuffer
from epochtrain.dataset import dataset_fingerprint, record_dataset
from epochtrain.trainer import (
    BatchSubSampler,
    EarlyStopping,
    GradClip,
    LRScheduler,
    ObservationNormalizer,
    RewardNormalizer,
    TrainerHook,
)
from epochtrain.trainer.hook_settings import constructor_settings
from epochtrain.trainer.params import SettingsMismatchError
from tests.trainer.tiny import build

OFFLINE = dict(
    max_epoch=2, step_per_epoch=5, num_test_envs=1, episode_per_test=1, show_progress=False
)


def edit_manifest(ckpt: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite ``ckpt``'s manifest through ``edit`` (as an older epochtrain wrote it)."""
    manifest = json.loads((ckpt / MANIFEST).read_text(encoding="utf-8"))
    edit(manifest)
    (ckpt / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two recordings of CartPole with different seeds: same shapes, other data."""
    root = tmp_path_factory.mktemp("datasets")
    paths = {"a": root / "a.buf", "b": root / "b.buf"}
    for seed, path in enumerate(paths.values()):
        record_dataset(None, "CartPole-v1", 300, path, seed=seed)
    return paths


def offline_checkpoint(tmp_path: Path, dataset: Path) -> Path:
    """An epoch of BC on a copy of ``dataset`` at ``tmp_path/data.buf``, checkpointed."""
    shutil.copy(dataset, tmp_path / "data.buf")
    trainer = make_trainer("bc", "CartPole-v1", dataset=str(tmp_path / "data.buf"), **OFFLINE)
    next(trainer)
    return trainer.save_checkpoint(tmp_path / "ckpt")


def short(path: Path) -> str:
    return dataset_fingerprint(ReplayBuffer.load(path))[:16]


def test_a_dataset_whose_content_changed_under_the_same_path_is_refused_naming_both(
    tmp_path: Path, datasets: dict[str, Path]
) -> None:
    ckpt = offline_checkpoint(tmp_path, datasets["a"])
    shutil.copy(datasets["b"], tmp_path / "data.buf")  # same path, other data
    trainer = make_trainer("bc", "CartPole-v1", dataset=str(tmp_path / "data.buf"), **OFFLINE)
    with pytest.raises(DatasetMismatchError) as raised:
        trainer.load_checkpoint(ckpt)
    message = str(raised.value)
    assert "(dataset: saved " in message
    assert short(datasets["a"]) in message and short(datasets["b"]) in message
    assert message.count(repr(str(tmp_path / "data.buf"))) == 2
    assert "resume with the original dataset" in message and "start a new run" in message
    assert trainer.state.epoch == 0  # nothing was restored


def test_resume_from_onto_another_dataset_is_refused(
    tmp_path: Path, datasets: dict[str, Path]
) -> None:
    ckpt = offline_checkpoint(tmp_path, datasets["a"])
    with pytest.raises(DatasetMismatchError, match=r"dataset: saved .* now '.*b\.buf'"):
        make_trainer("bc", "CartPole-v1", dataset=str(datasets["b"]), resume_from=ckpt, **OFFLINE)


def test_the_same_dataset_moved_to_another_path_resumes_with_a_warning_naming_both_paths(
    tmp_path: Path, datasets: dict[str, Path]
) -> None:
    ckpt = offline_checkpoint(tmp_path, datasets["a"])
    moved = tmp_path / "elsewhere" / "moved.buf"
    moved.parent.mkdir()
    (tmp_path / "data.buf").rename(moved)
    with pytest.warns(UserWarning, match=r"dataset: saved '.*data\.buf', now '.*moved\.buf'"):
        trainer = make_trainer("bc", "CartPole-v1", dataset=str(moved), resume_from=ckpt, **OFFLINE)
    assert trainer.state.epoch == 1
    assert len(list(trainer)) == 1  # and the run goes on


def test_a_hand_built_offline_trainer_on_another_buffer_is_refused(tmp_path: Path) -> None:
    first = build("offline")
    next(first)
    ckpt = first.save_checkpoint(tmp_path / "ckpt")
    other = build("offline")
    state = other.buffer.state_dict()
    state["storage"]["rew"] = state["storage"]["rew"] + 1.0  # one field changed
    other.buffer.load_state_dict(state)
    with pytest.raises(DatasetMismatchError, match=r"dataset: saved a buffer passed in"):
        other.load_checkpoint(ckpt)
    same = build("offline")
    same.load_checkpoint(ckpt)
    assert same.state.epoch == 1


def test_a_checkpoint_without_a_dataset_fingerprint_loads_with_a_one_line_warning(
    tmp_path: Path, datasets: dict[str, Path]
) -> None:
    ckpt = offline_checkpoint(tmp_path, datasets["a"])
    edit_manifest(ckpt, lambda manifest: manifest.pop("dataset"))
    shutil.copy(datasets["b"], tmp_path / "data.buf")  # not detectable without a fingerprint
    trainer = make_trainer("bc", "CartPole-v1", dataset=str(tmp_path / "data.buf"), **OFFLINE)
    with pytest.warns(UserWarning, match="records no dataset fingerprint") as caught:
        trainer.load_checkpoint(ckpt)
    assert trainer.state.epoch == 1
    assert all("\n" not in str(w.message) for w in caught)


def test_a_malformed_dataset_or_hooks_entry_of_the_manifest_is_a_checkpoint_error(
    tmp_path: Path,
) -> None:
    trainer = build("off", hooks=[GradClip(max_norm=1.0)])
    next(trainer)
    ckpt = trainer.save_checkpoint(tmp_path / "ckpt")
    edit_manifest(ckpt, lambda manifest: manifest.update(dataset={"sha256": "xyz"}))
    with pytest.raises(CheckpointError, match="'dataset' must be null or an object"):
        build("off", hooks=[GradClip(max_norm=1.0)]).load_checkpoint(ckpt)
    edit_manifest(ckpt, lambda manifest: manifest.update(dataset=None, hooks=[1]))
    with pytest.raises(CheckpointError, match="'hooks' must map each hook"):
        build("off", hooks=[GradClip(max_norm=1.0)]).load_checkpoint(ckpt)


def test_train_resume_onto_changed_dataset_exits_2_and_onto_a_moved_one_goes_on(
    tmp_path: Path, datasets: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data.buf"
    shutil.copy(datasets["a"], data)
    train = ["train", "--algo", "bc", "--env", "CartPole-v1", "--step-per-epoch", "5"]
    train += ["--no-progress", "--logdir", "", "--checkpoint-dir", str(tmp_path / "ckpts")]
    assert main([*train, "--max-epoch", "1", "--dataset", str(data)]) == 0
    capsys.readouterr()
    resume = [*train, "--max-epoch", "2", "--resume", str(tmp_path / "ckpts")]
    shutil.copy(datasets["b"], data)
    assert main([*resume, "--dataset", str(data)]) == 2
    err = capsys.readouterr().err
    assert "(dataset: saved" in err and "resume with the original dataset" in err
    assert len(err.strip().splitlines()) == 1
    shutil.copy(datasets["a"], tmp_path / "moved.buf")
    assert main([*resume, "--dataset", str(tmp_path / "moved.buf")]) == 0


def step_lr(gamma: float) -> LRScheduler:
    return LRScheduler(lambda opt: torch.optim.lr_scheduler.StepLR(opt, 5, gamma=gamma))


CHANGED_HOOKS: list[tuple[str, Callable[[], TrainerHook], Callable[[], TrainerHook], str]] = [
    ("off", lambda: GradClip(max_norm=1.0), lambda: GradClip(max_norm=10.0), "max_norm"),
    ("off", lambda: EarlyStopping(patience=5), lambda: EarlyStopping(patience=50), "patience"),
    (
        "off",
        lambda: ObservationNormalizer(clip=5.0),
        lambda: ObservationNormalizer(clip=10.0),
        "clip",
    ),
    ("on", lambda: RewardNormalizer(gamma=0.9), lambda: RewardNormalizer(gamma=0.99), "gamma"),
    ("off", lambda: BatchSubSampler(8), lambda: BatchSubSampler(4), "batch_size"),
    ("off", lambda: step_lr(0.5), lambda: step_lr(0.9), "schedulers"),
]


@pytest.mark.parametrize(
    ("kind", "saved_hook", "given_hook", "setting"),
    CHANGED_HOOKS,
    ids=[case[3] for case in CHANGED_HOOKS],
)
def test_a_hook_built_with_other_arguments_is_refused_naming_hook_setting_values_and_fix(
    tmp_path: Path,
    kind: str,
    saved_hook: Callable[[], TrainerHook],
    given_hook: Callable[[], TrainerHook],
    setting: str,
) -> None:
    first = build(kind, hooks=[saved_hook()])
    next(first)
    ckpt = first.save_checkpoint(tmp_path / "ckpt")
    hook = given_hook()
    resumed = build(kind, hooks=[hook])
    name = type(hook).__name__
    with pytest.raises(SettingsMismatchError) as raised:
        resumed.load_checkpoint(ckpt)
    message = str(raised.value)
    saved_value = first.hooks[0].resume_settings()[setting]
    given_value = hook.resume_settings()[setting]
    if isinstance(saved_value, dict):  # the nested value that differs is named
        nested = [f"hooks.{name}.{setting}.optim.gamma"]
        assert f"{name}.{setting}.optim.gamma: saved 0.5, now 0.9" in message
    else:
        nested = [f"hooks.{name}.{setting}"]
        assert f"{name}.{setting}: saved {saved_value!r}, now {given_value!r}" in message
    fix = f"build the hooks as the checkpointed run did ({name}({setting}={saved_value!r}))"
    assert fix in message
    assert "start a new run; nothing was restored" in message
    assert list(raised.value.settings) == nested
    assert resumed.state.epoch == 0
    twin = build(kind, hooks=[saved_hook()])  # the same arguments resume
    twin.load_checkpoint(ckpt)
    assert twin.state.epoch == 1


def test_observation_normalizer_keeps_the_given_clip_never_the_saved_one(tmp_path: Path) -> None:
    first = build("off", hooks=[ObservationNormalizer(clip=5.0)])
    next(first)
    ckpt = first.save_checkpoint(tmp_path / "ckpt")
    hook = ObservationNormalizer(clip=10.0)
    with pytest.raises(SettingsMismatchError, match=re.escape("ObservationNormalizer(clip=5.0)")):
        build("off", hooks=[hook]).load_checkpoint(ckpt)
    assert hook.clip == 10.0


def test_the_second_of_two_hooks_of_a_class_is_named_by_its_index(tmp_path: Path) -> None:
    first = build("off", hooks=[GradClip(max_norm=1.0), GradClip(max_value=0.5)])
    next(first)
    ckpt = first.save_checkpoint(tmp_path / "ckpt")
    resumed = build("off", hooks=[GradClip(max_norm=1.0), GradClip(max_value=2.0)])
    with pytest.raises(SettingsMismatchError, match=r"GradClip\[1\]\.max_value: saved 0\.5"):
        resumed.load_checkpoint(ckpt)


class CountingHook(TrainerHook):
    """A user hook as written before hooks had settings: no resume_settings."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale

    def register(self, trainer: Any) -> None:
        trainer.register_op("post_optim", lambda: None)


class ComparedHook(CountingHook):
    """A user hook that opts in."""

    def resume_settings(self) -> dict[str, Any]:
        return constructor_settings(self)


def test_a_user_hook_is_compared_only_when_it_declares_its_settings(tmp_path: Path) -> None:
    for hook_cls, refused in ((CountingHook, False), (ComparedHook, True)):
        first = build("off", hooks=[hook_cls(scale=1.0)])
        next(first)
        ckpt = first.save_checkpoint(tmp_path / hook_cls.__name__)
        resumed = build("off", hooks=[hook_cls(scale=2.0)])
        if refused:
            with pytest.raises(SettingsMismatchError, match=r"ComparedHook\.scale: saved 1\.0"):
                resumed.load_checkpoint(ckpt)
        else:
            resumed.load_checkpoint(ckpt)
            assert resumed.state.epoch == 1


def test_a_checkpoint_from_before_hook_settings_resumes_and_a_new_setting_at_its_default_too(
    tmp_path: Path,
) -> None:
    first = build("off", hooks=[GradClip(max_norm=1.0)])
    next(first)
    ckpt = first.save_checkpoint(tmp_path / "ckpt")
    edit_manifest(ckpt, lambda manifest: manifest["hooks"]["GradClip"].pop("norm_type"))
    build("off", hooks=[GradClip(max_norm=1.0)]).load_checkpoint(ckpt)  # 2.0: the default
    with pytest.raises(SettingsMismatchError, match=r"GradClip\.norm_type: saved None, now 1\.0"):
        build("off", hooks=[GradClip(max_norm=1.0, norm_type=1.0)]).load_checkpoint(ckpt)
    edit_manifest(ckpt, lambda manifest: manifest.pop("hooks"))
    older = build("off", hooks=[GradClip(max_norm=10.0)])
    older.load_checkpoint(ckpt)  # not recorded: not compared, as before
    assert older.state.epoch == 1


def test_another_hook_list_is_still_named_by_the_state_check(tmp_path: Path) -> None:
    first = build("off", hooks=[GradClip(max_norm=1.0)])
    next(first)
    ckpt = first.save_checkpoint(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match=r"hooks \['GradClip'\], this trainer has \[\]"):
        build("off").load_checkpoint(ckpt)
