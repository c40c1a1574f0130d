"""Test-session settings: the slow tests are collected first.

With ``pytest -n 2 --dist worksteal`` (``make test``) the workers take tests in collection
order and an idle worker takes pending tests from a busy one, so the slow tests, started
first, run side by side and the quick ones fill the gaps: the suite's wall-clock is then
close to half its CPU time. (Under the default ``--dist load`` a worker keeps a chunk of
tests queued behind a slow one; with the slow tests first that was slower than no order.)
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: order kept


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread for the test: two spinning OpenMP threads on a loaded 2-core
    machine make tiny gradient steps tens of times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress bars are drawn as in a terminal (under pytest stderr is a capture)."""
    for module in ("epochtrain.trainer.progress", "epochtrain.experiment.progress"):
        monkeypatch.setattr(f"{module}.bars_watched", lambda: True)


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process of this host that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def other_process() -> Iterator[subprocess.Popen[bytes]]:
    """A live process of this host that is not this one (a lock's other holder)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def live_pid(other_process: subprocess.Popen[bytes]) -> int:
    """The pid of :func:`other_process`."""
    return other_process.pid
