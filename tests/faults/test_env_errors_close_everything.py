"""An env error (or Ctrl-C) that ends an epoch leaves no env worker process and no collect
thread behind, wherever it happens: warm-up, training collect step, test step, with or
without asynchronous collection."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from epochtrain import DQN
from epochtrain.algorithms.base import ActResult
from epochtrain.data.batch import Obs
from epochtrain.errors import EnvError
from tests.faults.envs import dqn_trainer, faulty_vec

ROOT = Path(__file__).resolve().parents[2]
COLLECT_THREAD = "epochtrain-collect"


def live_children() -> set[int]:
    """This process's child processes, zombies (exited, not joined) included."""
    pids: set[int] = set()
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{task}/children") as f:
            pids.update(int(pid) for pid in f.read().split())
    return pids


def collect_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == COLLECT_THREAD}


def healthy_vec() -> Any:
    """Two envs in worker processes that never fault."""
    return faulty_vec(2, -1, "raise", 1, mode="async")


# where: (warm-up env steps, the faulty env is the test env, step of sub-env 1 that raises;
# 0: it raises in reset)
WHERE = {
    "first reset": (0, False, 0),
    "warm-up": (20, False, 5),
    "training collect": (0, False, 15),
    "test step": (0, True, 3),
}


@pytest.mark.parametrize("async_collection", [False, True])
@pytest.mark.parametrize("where", list(WHERE))
def test_an_env_error_closes_the_train_and_test_envs_and_stops_the_collect_thread_first(
    where: str, async_collection: bool
) -> None:
    warmup_steps, in_test, fault_at = WHERE[where]
    fault = "raise" if fault_at else "raise_in_reset"
    faulty = faulty_vec(2, bad=1, fault=fault, fault_at=fault_at, mode="async")
    other = healthy_vec()
    train_envs, test_envs = (other, faulty) if in_test else (faulty, other)
    before_children, before_threads = live_children(), collect_threads()
    trainer = dqn_trainer(
        train_envs, test_envs=test_envs, warmup_steps=warmup_steps, step_per_epoch=40,
        step_per_collect=10, async_collection=async_collection,
    )  # fmt: skip
    with pytest.raises(EnvError) as info:
        next(trainer)
    message = str(info.value)
    assert "sub-env 1 of 'AsyncVectorEnv' raised RuntimeError: the simulator crashed" in message
    assert f"(epoch {0 if where in ('first reset', 'warm-up') else 1})" in message
    assert info.value.sub_env == 1 and isinstance(info.value.__cause__, RuntimeError)
    assert train_envs.closed and test_envs.closed
    assert live_children() <= before_children  # every worker joined: not even a zombie
    assert collect_threads() <= before_threads
    trainer.close()


class ActorBugDQN(DQN):
    """Raises in ``act`` when it acts in the collect thread."""

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        if threading.current_thread().name == COLLECT_THREAD:
            raise ValueError("a bug in act")
        return super().act(obs, deterministic)


def test_a_policy_error_in_the_collect_thread_is_raised_after_the_thread_ended() -> None:
    train_envs, test_envs = healthy_vec(), healthy_vec()
    before_children, before_threads = live_children(), collect_threads()
    trainer = dqn_trainer(
        train_envs, test_envs=test_envs, async_collection=True, policy_cls=ActorBugDQN
    )
    with pytest.raises(ValueError, match="a bug in act"):
        next(trainer)
    assert collect_threads() <= before_threads
    # as after any other error inside an epoch, the envs stay open for load_checkpoint ...
    assert not train_envs.closed and not test_envs.closed
    trainer.close()  # ... and close() ends their workers
    assert live_children() <= before_children


CTRL_C_RUNS = """
import json, threading
from tests.faults.envs import ctrl_c_vec, dqn_trainer
for where in ("warm-up", "test step"):
    for async_collection in (False, True):
        train_envs = ctrl_c_vec(2, 5 if where == "warm-up" else None)
        test_envs = ctrl_c_vec(2, 3 if where == "test step" else None)
        trainer = dqn_trainer(train_envs, test_envs=test_envs, warmup_steps=20,
                              step_per_epoch=20, async_collection=async_collection)
        workers = [p for envs in (train_envs, test_envs) for p in envs.processes]
        try:
            next(trainer)
            notes = None
        except KeyboardInterrupt as exc:
            notes = getattr(exc, "__notes__", [])
        threads = [t.name for t in threading.enumerate() if t.name == "epochtrain-collect"]
        print(json.dumps({
            "case": f"{where}, async_collection={async_collection}",
            "notes": notes,
            "epoch": trainer.state.epoch,
            "workers_joined": all(p.exitcode is not None for p in workers),
            "collect_threads": threads,
        }))
        trainer.close()
"""


def processes_of_session(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    pids.append(int(entry))
            except ProcessLookupError:
                pass
    return pids


def test_ctrl_c_in_the_warm_up_or_the_test_step_leaves_no_worker_process_or_collect_thread() -> (
    None
):
    # A terminal's Ctrl-C reaches the env workers too: the runs get a session of their own,
    # so that the env's SIGINT to its process group reaches them only. One process for the
    # four cases (warm-up or test step, with or without async collection): one import.
    # SIGINT's disposition is a terminal's: a background job of a non-interactive shell
    # (CI) inherits SIGINT ignored, and then every process of the runs ignored the Ctrl-C
    # unless an earlier test in the same pytest process (Ray Tune) had set a handler
    proc = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_RUNS], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    outcomes = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(outcomes) == 4, out
    # all the cases named: one lost Ctrl-C (a race) and four (an ignored SIGINT) differ
    lost = [outcome["case"] for outcome in outcomes if outcome["notes"] is None]
    assert not lost, f"no KeyboardInterrupt in: {lost}"
    for outcome in outcomes:
        notes = outcome["notes"]
        assert any("the trainer is back at the end of epoch 0" in n for n in notes), outcome
        assert any("the envs were closed" in n for n in notes), outcome
        assert outcome["epoch"] == 0, outcome
        assert outcome["workers_joined"] and outcome["collect_threads"] == [], outcome
    deadline = time.monotonic() + 30
    while processes_of_session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # polled: the runs have exited; an orphan would stay
    assert processes_of_session(proc.pid) == []
