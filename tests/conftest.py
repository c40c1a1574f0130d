"""Test-session settings: the slow tests are collected first.

With ``pytest -n 2`` the workers take tests in collection order, so a slow test collected
last runs alone while the other worker idles; started first, the slow tests run side by
side and the quick ones fill the gaps (the suite's wall-clock is then close to half its
CPU time).
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: order kept
