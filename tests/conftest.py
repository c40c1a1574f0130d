"""Test-session settings: the slow tests are collected first.

With ``pytest -n 2 --dist worksteal`` (``make test``) the workers take tests in collection
order and an idle worker takes pending tests from a busy one, so the slow tests, started
first, run side by side and the quick ones fill the gaps: the suite's wall-clock is then
close to half its CPU time. (Under the default ``--dist load`` a worker keeps a chunk of
tests queued behind a slow one; with the slow tests first that was slower than no order.)
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: order kept


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress bars are drawn as in a terminal (under pytest stderr is a capture)."""
    for module in ("epochtrain.trainer.progress", "epochtrain.experiment.progress"):
        monkeypatch.setattr(f"{module}.bars_watched", lambda: True)
