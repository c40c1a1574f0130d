"""`kill -9` of an `epochtrain sweep --backend ray` driver: the local Ray it started goes with
it, the raylet's dashboard and runtime-env agents too (Ray kills only its GCS and raylet)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="needs the ray extra: pip install 'epochtrain[ray]'")


def _processes(name: str, value: str) -> dict[int, str]:
    """Live processes whose environment holds ``name=value``, with their names."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (
                (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").strip()
            )
        except (OSError, IndexError):
            continue
        if f"{name}={value}".encode() in environ.split(b"\0") and state != "Z":
            found[int(entry.name)] = command
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_local_ray_of_a_sweep_driver_killed_by_sigkill_ends_within_seconds(
    tmp_path: Path,
) -> None:
    # before: ray::DashboardAgent and ray::RuntimeEnvAgent outlived the driver by ~61 s
    # (they report the raylet's death to the dead GCS and wait out its 60 s timeout)
    name, value = "EPOCHTRAIN_TEST_ORPHANS", uuid.uuid4().hex
    argv = ["sweep", "--algo", "ppo", "--env", "CartPole-v1", "--seeds", "0", "--out"]
    argv += [os.fspath(tmp_path / "exp"), "--backend", "ray", "--no-progress"]
    argv += ["--max-epoch", "1000", "--step-per-epoch", "2000", "--stop-at", "1e9"]
    driver = subprocess.Popen(
        [sys.executable, "-m", "epochtrain", *argv],
        env={**os.environ, "RAY_AUTH_MODE": "disabled", name: value},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    lock = tmp_path / "exp" / "ppo-CartPole-v1-s0" / "checkpoints" / ".lock"
    deadline = time.monotonic() + 180
    try:  # the trial runs: Ray is up (agents started with the raylet)
        while not lock.exists():
            assert driver.poll() is None, "the sweep ended before it was killed"
            assert time.monotonic() < deadline, f"no trial started: {_processes(name, value)}"
            time.sleep(0.1)
        running = _processes(name, value).values()
        assert any(command.endswith("/raylet") for command in running), running
        agents = {"ray::DashboardAgent", "ray::RuntimeEnvAgent"}  # what used to outlive it
        deadline = time.monotonic() + 30  # the raylet starts them: wait for their imports
        while not agents <= set(_processes(name, value).values()) and driver.poll() is None:
            if time.monotonic() > deadline:
                break  # one crashed on its own (a loaded machine): kill the driver anyway
            time.sleep(0.1)
    finally:
        driver.kill()
        driver.wait()
    deadline = time.monotonic() + 15
    while _processes(name, value) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _processes(name, value)
    for pid in left:  # leave no process behind for the next test, whatever the outcome
        os.kill(pid, signal.SIGKILL)
    assert not left, f"the killed driver's Ray outlived it: {sorted(left.values())}"
