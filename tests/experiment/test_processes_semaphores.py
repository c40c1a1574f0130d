"""A ``"processes"`` sweep whose worker is killed while its ``"async"`` vector envs are open:
the driver removes that worker's named semaphores, so the sweep ends without the resource
tracker's "leaked semaphore objects" warning."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

SWEEP = """
import sys
from epochtrain.experiment import grid, run_experiment
specs = grid(["ppo"], ["CartPole-v1"], [0], max_epoch=3, step_per_epoch=512,
             step_per_collect=64, repeat_per_collect=1, num_envs=2, num_test_envs=1,
             episode_per_test=1, env_backend="async")
run_experiment(specs, sys.argv[1], backend="processes", workers=1, max_failures=1,
               show_progress=False)
"""


def _kill_worker_after_epoch_1(run_dir: Path, killed: list[int]) -> threading.Thread:
    def watch() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            lock = run_dir / "checkpoints" / ".lock"
            if (run_dir / "checkpoints" / "epoch_000001").is_dir() and lock.is_file():
                if not (run_dir / "result.json").exists():
                    pid = json.loads(lock.read_text())["pid"]
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher


def test_a_killed_workers_semaphores_are_removed_without_the_trackers_warning(
    tmp_path: Path,
) -> None:
    # before: "resource_tracker: There appear to be 6 leaked semaphore objects to clean up
    # at shutdown" after the sweep's last line (the dead worker's env queues and locks)
    out = tmp_path / "exp"
    killed: list[int] = []
    watcher = _kill_worker_after_epoch_1(out / "ppo-CartPole-v1-s0", killed)
    done = subprocess.run(
        [sys.executable, "-c", SWEEP, os.fspath(out)], capture_output=True, text=True, timeout=300
    )
    watcher.join()
    assert killed, "the run finished before its worker could be killed: lengthen it"
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "ppo-CartPole-v1-s0" / "result.json").read_text())["status"] == (
        "finished"
    )
    assert "leaked semaphore" not in done.stderr, done.stderr
