"""A sweep directory copied elsewhere (``cp -r``): a finished one re-runs and compares on a
read-only copy without writing anything; an unfinished one resumes in its copy and never
writes to the original."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from epochtrain.cli import main
from epochtrain.experiment import grid, load_experiment, run_experiment, runner
from epochtrain.spec import RunSpec
from tests.experiment.settings import FAST, results

SPECS = grid(["ppo"], ["CartPole-v1"], [0, 1], **FAST)


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("original") / "exp"
    run_experiment(SPECS, out, show_progress=False)
    return out


def tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``root`` with its inode, size and modification time: any write
    (a new file, a replaced or appended one) changes it."""
    out = {}
    for path in sorted(root.rglob("*")):
        info = path.stat()
        out[os.fspath(path.relative_to(root))] = (info.st_ino, info.st_size, info.st_mtime_ns)
    return out


def read_only(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """Make ``root`` behave as after ``chmod -R a-w`` for a user who is not root: it
    reports unwritable, and creating a file or directory under it is refused."""
    real_access, real_open, real_mkdir = os.access, os.open, Path.mkdir
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def under(path: Any) -> bool:
        return Path(os.path.abspath(os.fspath(path))).is_relative_to(root.absolute())

    def access(path: Any, mode: int, **kwargs: Any) -> bool:
        return False if under(path) and mode & os.W_OK else real_access(path, mode, **kwargs)

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if under(path) and flags & writes:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    def mkdir(self: Path, *args: Any, **kwargs: Any) -> None:
        if under(self) and not self.is_dir():
            raise PermissionError(13, "Permission denied", os.fspath(self))
        real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(Path, "mkdir", mkdir)


def test_a_finished_sweep_re_runs_on_a_read_only_copy_writing_nothing(
    finished_sweep: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(finished_sweep, copy)
    before = tree(copy)
    read_only(monkeypatch, copy)
    experiment = run_experiment(SPECS, copy, show_progress=False)
    assert [r.status for r in experiment.runs] == ["finished", "finished"]
    assert results(copy) == results(finished_sweep)
    assert main(["compare", os.fspath(copy), "--reps", "100"]) == 0
    assert "| CartPole-v1 | ppo |" in capsys.readouterr().out
    assert tree(copy) == before


def test_an_unfinished_copy_resumes_in_its_new_place_and_leaves_the_original_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original, copy = tmp_path / "original", tmp_path / "copy"
    real_open = runner.open_trainer

    def interrupted_in_epoch_2(run_dir: Path) -> Any:
        trainer = real_open(run_dir)
        trainer.register_op("epoch_start", ctrl_c_at_epoch_2)
        return trainer

    monkeypatch.setattr(runner, "open_trainer", interrupted_in_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(SPECS, original, show_progress=False)
    monkeypatch.setattr(runner, "open_trainer", real_open)
    shutil.copytree(original, copy)
    before = tree(original)
    with pytest.warns(UserWarning, match="resuming .* with changed settings"):  # its paths
        experiment = run_experiment(SPECS, copy, show_progress=False)
    assert [r.status for r in experiment.runs] == ["finished", "finished"]
    assert tree(original) == before
    for run in experiment.runs:
        spec = RunSpec.from_file(copy / run.run_id / "spec.toml")
        assert spec.trainer.checkpoint_dir == os.fspath(
            (copy / run.run_id).resolve() / "checkpoints"
        )
        assert (copy / run.run_id / "checkpoints" / "epoch_000002").is_dir()
    assert [r.status for r in load_experiment(original).runs] == ["pending", "pending"]


def ctrl_c_at_epoch_2(epoch: int) -> None:
    if epoch == 2:
        raise KeyboardInterrupt
