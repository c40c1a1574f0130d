"""Dataset and video writers interrupted or failing at any step leave what was there and
nothing else: no new folder, no Minari namespace, no buffer file without its sidecar."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from epochtrain import dataset as dataset_module
from epochtrain.data import ReplayBuffer
from epochtrain.dataset import dataset_fingerprint, record_dataset
from tests.faults.interrupts import interrupt_at_call

FS_CALLS = (
    (os, "replace"),
    (os, "rename"),
    (os, "link"),
    (os, "unlink"),
    (os, "fsync"),
    (os, "mkdir"),
    (os, "rmdir"),
    (shutil, "rmtree"),
)


def tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root`` (hidden ones too): a file's bytes, None for a folder."""
    if not root.exists():
        return {}
    return {
        os.fspath(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


def interrupted_at_every_call(write: Any, check: Any, when: str) -> int:
    """Run ``write()`` with a KeyboardInterrupt at its 1st, 2nd, ... filesystem call until
    it finishes, calling ``check()`` after each interrupted run; returns the number of
    interrupted runs."""
    n = 1
    while True:
        with interrupt_at_call(n, when, FS_CALLS) as count:
            try:
                write()
            except KeyboardInterrupt:
                check(n)
                n += 1
                continue
        assert count[0] < n  # the run that finished was not interrupted
        return n - 1


# ------------------------------------------------------------------ record_dataset


def record(path: Path, seed: int = 0, overwrite: bool = False) -> None:
    record_dataset(None, "CartPole-v1", 60, path, seed=seed, overwrite=overwrite)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_new_dataset_interrupted_at_any_call_leaves_nothing_not_even_its_folders(
    tmp_path: Path, when: str
) -> None:
    path = tmp_path / "new" / "deeper" / "data.buf"

    def check(n: int) -> None:
        assert tree(tmp_path) == {}, f"call {n}"

    interrupted = interrupted_at_every_call(lambda: record(path), check, when)
    assert interrupted >= 5
    # the run that finished needed no overwrite: the interrupted ones left no file
    assert sorted(p.name for p in path.parent.iterdir()) == ["data.buf", "data.buf.json"]


def fingerprint(path: Path) -> str:
    return dataset_fingerprint(ReplayBuffer.load(path))


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_replacement_interrupted_at_any_call_keeps_the_old_pair_whole(
    tmp_path: Path, when: str
) -> None:
    path, sidecar = tmp_path / "data.buf", tmp_path / "data.buf.json"
    record(tmp_path / "new.buf", seed=2)
    new = fingerprint(tmp_path / "new.buf")
    (tmp_path / "new.buf").unlink()
    (tmp_path / "new.buf.json").unlink()
    record(path, seed=1)
    old = tree(tmp_path)

    def check(n: int) -> None:
        now = tree(tmp_path)
        assert sorted(now) == ["data.buf", "data.buf.json"], f"call {n}"
        if now != old:  # only an interrupt once the last rename returned: the new pair
            assert json.loads(sidecar.read_text())["seed"] == 2, f"call {n}"
            assert fingerprint(path) == new, f"call {n}"

    interrupted = interrupted_at_every_call(
        lambda: record(path, seed=2, overwrite=True), check, when
    )
    assert interrupted >= 8  # 2 temporary files written, 2 moved aside, 2 renamed in, ...
    assert fingerprint(path) == new and json.loads(sidecar.read_text())["seed"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.buf", "data.buf.json"]


def test_a_recording_that_fails_removes_only_the_empty_folders_it_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "kept").mkdir()

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(dataset_module.Collector, "collect", fail)
    with pytest.raises(KeyboardInterrupt):
        record(tmp_path / "kept" / "a" / "b" / "data.buf")
    assert tree(tmp_path) == {"kept": None}


def test_a_failed_recording_leaves_no_new_folder_and_a_rerun_needs_no_overwrite(
    tmp_path: Path,
) -> None:
    path = tmp_path / "new" / "data.buf"
    with pytest.raises(ValueError, match="no episode of CartPole-v1 ended"):
        record_dataset(None, "CartPole-v1", 3, path)
    assert tree(tmp_path) == {}
    record(path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["data.buf", "data.buf.json"]


# -------------------------------------------------------------------- record_video


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_a_video_that_is_not_written_removes_only_the_empty_folders_it_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    pytest.importorskip("imageio_ffmpeg", reason="the video extra is not installed")
    pytest.importorskip("pygame", reason="the video extra is not installed")
    from epochtrain.trainer import video
    from tests.trainer.tiny import TinyPolicy, make_envs

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    (tmp_path / "kept").mkdir()
    (tmp_path / "full").mkdir()

    def interrupted(*args: object, **kwargs: object) -> None:
        if (tmp_path / "full" / "a").exists():  # another writer, meanwhile
            (tmp_path / "full" / "a" / "theirs.txt").write_text("another writer's")
        raise error("stopped")

    monkeypatch.setattr(video, "_record_episode", interrupted)
    policy = TinyPolicy(make_envs(1))
    for folder in ("kept", "full"):
        with pytest.raises(error):
            video.record_video(policy, "CartPole-v1", tmp_path / folder / "a" / "b" / "v.mp4")
    # "full/a" holds another writer's file: it stays, its new empty "b" goes
    assert tree(tmp_path) == {
        "full": None,
        "full/a": None,
        "full/a/theirs.txt": b"another writer's",
        "kept": None,
    }


# -------------------------------------------------------------------- write_minari


@pytest.fixture
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pytest.importorskip("minari", reason="the minari extra is not installed")
    pytest.importorskip("h5py", reason="minari's HDF5 storage needs h5py (minari[hdf5])")
    monkeypatch.setenv("MINARI_DATASETS_PATH", os.fspath(tmp_path / "datasets"))
    return tmp_path / "datasets"


@pytest.fixture
def cartpole_buffer(tmp_path: Path) -> Path:
    path = tmp_path / "recorded" / "cartpole.buf"
    record(path)
    return path


def existing_dataset(dataset_id: str, buffer: Path) -> None:
    """A dataset written before, whose namespace(s) must outlive any failed write."""
    from epochtrain.data.minari import write_minari

    write_minari(
        buffer, dataset_id, "CartPole-v1", author="a", author_email="a@b", code_permalink="c"
    )


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
@pytest.mark.parametrize(
    ("before", "dataset_id"),
    [
        (None, "cartpole/random-v0"),  # a new namespace
        ("cartpole/other-v0", "cartpole/random-v0"),  # an existing one
        ("top/other-v0", "top/sub/random-v0"),  # a new namespace in an existing one
        (None, "random-v0"),  # none
    ],
)
def test_a_minari_write_failing_after_minari_wrote_leaves_the_datasets_root_as_it_was(
    minari_root: Path,
    cartpole_buffer: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: type[BaseException],
    before: str | None,
    dataset_id: str,
) -> None:
    import minari

    from epochtrain.data.minari import write_minari

    if before is not None:
        existing_dataset(before, cartpole_buffer)
    was = tree(minari_root)
    create = minari.create_dataset_from_buffers

    def fail_after_writing(*args: Any, **kwargs: Any) -> Any:
        create(*args, **kwargs)
        raise error("stopped")

    monkeypatch.setattr(minari, "create_dataset_from_buffers", fail_after_writing)
    with pytest.raises(error):
        write_minari(cartpole_buffer, dataset_id, "CartPole-v1")
    assert tree(minari_root) == was
    monkeypatch.setattr(minari, "create_dataset_from_buffers", create)
    write_minari(cartpole_buffer, dataset_id, "CartPole-v1")  # the id is free again
    assert minari.load_dataset(dataset_id).total_episodes > 0


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("namespace_existed", [False, True])
def test_a_minari_write_interrupted_at_any_call_leaves_the_datasets_root_as_it_was(
    minari_root: Path, cartpole_buffer: Path, when: str, namespace_existed: bool
) -> None:
    import minari

    from epochtrain.data.minari import write_minari

    if namespace_existed:
        existing_dataset("cartpole/other-v0", cartpole_buffer)
    was = tree(minari_root)

    def check(n: int) -> None:
        assert tree(minari_root) == was, f"call {n}"

    def write() -> None:
        write_minari(cartpole_buffer, "cartpole/random-v0", "CartPole-v1")

    assert interrupted_at_every_call(write, check, when) >= 3
    assert minari.load_dataset("cartpole/random-v0").total_episodes > 0


def test_a_minari_write_onto_a_folder_minari_does_not_list_leaves_that_folder_alone(
    minari_root: Path, cartpole_buffer: Path
) -> None:
    from epochtrain.data.minari import write_minari

    (minari_root / "cartpole" / "random-v0").mkdir(parents=True)
    (minari_root / "cartpole" / "random-v0" / "notes.txt").write_text("mine")
    was = tree(minari_root)
    with pytest.raises(ValueError, match="already exists"):
        write_minari(cartpole_buffer, "cartpole/random-v0", "CartPole-v1")
    assert tree(minari_root) == was
