"""The README's python blocks run as written (in order, sharing one namespace)."""

from __future__ import annotations

import re
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


def test_the_docs_name_the_video_files_as_the_video_recorder_writes_them() -> None:
    """hooks.md said ``epoch_<epoch>.mp4``; the files are ``epoch_0002.mp4``."""
    import inspect

    from epochtrain.trainer import video

    assert 'f"epoch_{info.epoch:04d}.mp4"' in inspect.getsource(video.VideoRecorder)
    docs = README.parent / "docs"
    for page in ("hooks.md", "logging.md"):
        text = " ".join((docs / page).read_text().split())
        assert "epoch_<" in text and re.search(r"`epoch_\d{4}\.mp4`", text), page
