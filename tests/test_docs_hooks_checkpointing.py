"""The python blocks of docs/hooks.md and docs/checkpointing.md run as written
(in order, each page in one namespace, inside a temporary working directory)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.DOTALL)


@pytest.mark.parametrize("page", ["hooks.md", "checkpointing.md"])
def test_doc_python_blocks_run(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(page)
    assert len(blocks) >= 3
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, str(DOCS / page), "exec"), namespace)
    assert capsys.readouterr().out


def test_hooks_doc_covers_every_point_and_builtin() -> None:
    import epochtrain.trainer as trainer_pkg
    from epochtrain.trainer import HOOK_POINTS, TrainerHook

    text = (DOCS / "hooks.md").read_text()
    for point in HOOK_POINTS:
        assert f"| `{point}` |" in text, point
    builtins = [
        name
        for name in trainer_pkg.__all__
        if isinstance(getattr(trainer_pkg, name), type)
        and issubclass(getattr(trainer_pkg, name), TrainerHook)
        and name != "TrainerHook"
    ]
    assert len(builtins) == 11
    import epochtrain

    for name in builtins:
        assert f"| `{name}(" in text, name
        assert getattr(epochtrain, name) is getattr(trainer_pkg, name), name  # as the doc says
        assert re.search(rf"```python\n[^`]*\b{name}\(", text), f"no example of {name}"


def test_the_logging_doc_example_runs_and_its_trainer_writes_to_both_loggers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (block,) = re.findall(r"```python\n(.*?)```", (DOCS / "logging.md").read_text(), re.DOTALL)
    namespace: dict[str, Any] = {}
    exec(compile(block, str(DOCS / "logging.md"), "exec"), namespace)
    with namespace["trainer"] as trainer:
        assert trainer.logger is namespace["logger"]
        next(trainer)
    assert (tmp_path / "runs" / "ppo-cartpole" / "log.jsonl").read_text()
    assert list((tmp_path / "runs" / "ppo-cartpole").glob("events.out.tfevents.*"))
