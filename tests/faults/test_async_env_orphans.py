"""The env processes of an ``env_backend="async"`` run whose process was killed (``kill -9``,
the OOM killer): they end at once, quietly, on the terminal they share with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BUILD_ASYNC_ENVS = """
import sys
from epochtrain.envs import make_envs

train = make_envs("CartPole-v1", 2, backend="async")
test = make_envs("CartPole-v1", 1, backend="async")
train.reset(seed=0)
test.reset(seed=0)
print(" ".join(str(p.pid) for envs in (train, test) for p in envs.processes), flush=True)
if sys.argv[1] == "stepping":  # killed in a step: some env processes are mid-reply
    while True:
        train.step(train.action_space.sample())
        test.step(test.action_space.sample())
sys.stdin.read()  # killed while every env process waits for a command
"""


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (ended, not yet reaped by init)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.parametrize("moment", ["waiting", "stepping"])
def test_env_processes_of_a_killed_run_end_quietly(moment: str) -> None:
    run = subprocess.Popen(
        [sys.executable, "-c", BUILD_ASYNC_ENVS, moment],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,  # the env processes inherit it: the run's terminal
        text=True,
    )
    assert run.stdout is not None and run.stderr is not None
    pids = [int(pid) for pid in run.stdout.readline().split()]
    assert len(pids) == 3, run.communicate()
    killed = time.monotonic()
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    err = run.stderr.read()  # returns once the last env process has closed it: ending
    assert err == ""
    while [pid for pid in pids if _running(pid)]:  # closed its files: a moment from a zombie
        assert time.monotonic() - killed < 10, "env processes outlived their run"
        time.sleep(0.01)
    assert run.stdin is not None
    run.stdin.close()
