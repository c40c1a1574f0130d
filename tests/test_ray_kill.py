"""SIGTERM to `epochtrain sweep --backend ray` outside Tune's run: while the sweep starts
or stops its local Ray, the command still ends as a terminated sweep (exit status 143, its
one line), not by Ray's own SIGTERM handler (a C++ stack, exit status 15 or an abort)."""

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

SWEEP = """
import os, signal, sys
import ray
from epochtrain.experiment import ray_backend
from epochtrain.cli import main

def sigterm_self():
    os.kill(os.getpid(), signal.SIGTERM)

where = sys.argv[1]
if where == "after ray.init":  # Ray is up, Tune not yet running
    real_check = ray_backend._check_gpus
    def check_then_sigterm(gpus):
        real_check(gpus)
        sigterm_self()
    ray_backend._check_gpus = check_then_sigterm
elif where == "in ray.init":  # right after ray.init set Ray's own SIGTERM handler
    import ray._private.utils as ray_utils
    real_set = ray_utils.set_sigterm_handler
    def set_then_sigterm(handler):
        real_set(handler)
        sigterm_self()
    ray_utils.set_sigterm_handler = set_then_sigterm
else:  # "in ray.shutdown": the runs have ended, the local Ray is being stopped
    real_shutdown = ray.shutdown
    def sigterm_then_shutdown(*args, **kwargs):
        ray.shutdown = real_shutdown
        sigterm_self()
        real_shutdown(*args, **kwargs)
    ray.shutdown = sigterm_then_shutdown
sys.exit(main(["sweep", "--algo", "ppo", "--env", "CartPole-v1", "--seeds", "0", "--out",
               sys.argv[2], "--backend", "ray", "--no-progress", "--max-epoch", "1",
               "--step-per-epoch", "64", "--step-per-collect", "64", "--repeat-per-collect",
               "1", "--num-envs", "1", "--num-test-envs", "1", "--episode-per-test", "1"]))
"""


def _processes_with(marker: str) -> list[int]:
    """Live pids whose environment holds ``marker`` (the sweep's and its Ray's)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker.encode() in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("where", ["in ray.init", "after ray.init", "in ray.shutdown"])
def test_a_sigterm_while_the_sweep_starts_or_stops_its_ray_ends_it_as_terminated(
    tmp_path: Path, where: str
) -> None:
    # before: ray.init's SIGTERM handler stayed in place outside Tune's run: exit status
    # 15 (or an abort) after a C++ stack dump, without the line naming the command
    out = tmp_path / "exp"
    marker = f"EPOCHTRAIN_TEST_SWEEP={uuid.uuid4().hex}"
    done = subprocess.run(
        [sys.executable, "-c", SWEEP, where, os.fspath(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAY_AUTH_MODE": "disabled", **dict([marker.split("=")])},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert done.returncode == 143, done.stderr[-2000:]
    assert "SIGTERM received" not in done.stderr  # Ray's handler did not run
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("epochtrain: terminated; finished runs and checkpoints are kept"), last
    deadline = time.monotonic() + 15  # Ray's processes end with the sweep's Ray
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _processes_with(marker), "the sweep's local Ray outlived it"
    run_dir = out / "ppo-CartPole-v1-s0"
    if where != "in ray.shutdown":  # no run began: nothing of it to resume but its directory
        assert not (run_dir / "result.json").exists()
    else:  # the run had finished before Ray was stopped: its result is whole
        assert '"status": "finished"' in (run_dir / "result.json").read_text()


def test_a_trial_releases_its_runs_lock_with_the_runs_result(tmp_path: Path) -> None:
    # before: the lock was released only when Tune stopped the trial, an RPC later; a
    # driver killed meanwhile left it in the finished run (1 of 12 kill trials)
    from epochtrain.experiment import grid
    from epochtrain.experiment.prepare import prepare_runs
    from tests.experiment.settings import FAST
    from tests.ray_fixtures import run_dir_trainable

    run_dir = prepare_runs(grid(["ppo"], ["CartPole-v1"], [0], **FAST), tmp_path)[0]
    trainable = run_dir_trainable(run_dir, "t")
    first = trainable.train()
    assert first["done"] is False and (run_dir / "checkpoints" / ".lock").exists()
    last = trainable.train()
    assert last["done"] is True
    assert '"status": "finished"' in (run_dir / "result.json").read_text()
    assert not (run_dir / "checkpoints" / ".lock").exists()  # before Tune stops the trial
    trainable.save()  # Tune's checkpoint of the last step: nothing to save, no error
    trainable.stop()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "epoch_000001",
        "epoch_000002",
    ]
