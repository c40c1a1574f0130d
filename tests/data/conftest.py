"""Fixtures of the data tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def datasets_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Minari's datasets folder for one test (``MINARI_DATASETS_PATH``): nothing of the
    user's is read or written, and no dataset is downloaded."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    return tmp_path / "datasets"
