"""The README's python blocks run as written (in order, sharing one namespace)."""

from __future__ import annotations

import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_the_three_ways() -> None:
    code = "\n".join(python_blocks())
    assert "for stats in trainer" in code
    assert ".run()" in code
    assert "zip(a, b)" in code


def test_readme_python_blocks_run(capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, object] = {}
    for block in python_blocks():
        exec(compile(block, str(README), "exec"), namespace)
    out = capsys.readouterr().out
    assert "epoch 1: test return" in out
    assert "gradient steps, best test return" in out


def test_the_block_that_builds_the_pieces_by_hand_repeats_in_one_process(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Its policy's initial weights come from the global torch generator, which the
    trainer's seed does not cover: run twice in one process it must print the same."""
    (block,) = [b for b in python_blocks() if "OffpolicyTrainer(" in b]
    block = block.replace("max_epoch=2, step_per_epoch=2_000", "max_epoch=1, step_per_epoch=600")
    outputs = []
    for _ in range(2):
        exec(compile(block, str(README), "exec"), {})
        outputs.append(capsys.readouterr().out)
    assert outputs[0] and outputs[0] == outputs[1]


def test_the_docs_name_the_video_files_as_the_video_recorder_writes_them() -> None:
    """hooks.md said ``epoch_<epoch>.mp4``; the files are ``epoch_0002.mp4``."""
    import inspect

    from epochtrain.trainer import video

    assert 'f"epoch_{info.epoch:04d}.mp4"' in inspect.getsource(video.VideoRecorder)
    docs = README.parent / "docs"
    for page in ("hooks.md", "logging.md"):
        text = " ".join((docs / page).read_text().split())
        assert "epoch_<" in text and re.search(r"`epoch_\d{4}\.mp4`", text), page


@pytest.mark.slow  # about 17 s with no mypy cache (.mypy_cache, shared with `make lint`)
def test_readme_python_blocks_pass_mypy_strict(tmp_path: Path) -> None:
    """Each block, as a user would paste it into a script of their own, type-checks: the
    first one failed with union-attr errors on the stats fields that may be None."""
    files = []
    for i, block in enumerate(python_blocks()):
        path = tmp_path / f"readme_block_{i}.py"
        path.write_text(block)
        files.append(str(path))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", *files],
        cwd=README.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_make_trainer_has_an_overload_per_registered_algorithm() -> None:
    """``make_trainer("ppo", ...)`` returned ``BaseTrainer[Any]``, so a typo in a stats field
    passed ``mypy --strict``: each algorithm name gets its trainer class and stats type."""
    from epochtrain import factory
    from epochtrain.registry import ALGORITHMS

    typed: dict[str, tuple[object, object]] = {}
    for overload in typing.get_overloads(factory.make_trainer):
        hints = typing.get_type_hints(overload, vars(factory))
        trainer_type = hints["return"]
        for name in (
            typing.get_args(hints["spec"])
            if typing.get_origin(hints["spec"]) is typing.Literal
            else []
        ):
            typed[name] = (typing.get_origin(trainer_type), typing.get_args(trainer_type)[0])
    expected = {
        name: (entry.trainer_cls, typing.get_type_hints(entry.policy_cls.learn)["return"])
        for name, entry in ALGORITHMS.items()
    }
    assert typed == expected
