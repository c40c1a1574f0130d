"""An env that HANGS in ``step`` (blocked in native code, deaf to Ctrl-C), not one that
dies: Ctrl-C (or SIGTERM) still ends the run, its env processes are ended at once (a
graceful close would wait for ever for the hung env's reply), the last checkpoint is
named, and the trainer refuses to go on with envs or a worker thread it had to give up."""

from __future__ import annotations

import faulthandler
import functools
import gc
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from epochtrain.errors import LAST_CHECKPOINT_NOTE, EnvError
from epochtrain.trainer import async_collection as ac
from tests.faults.envs import ThreadHangingEnv, dqn_trainer, hanging_vec

GRACE = 1.0  # seconds: the async-collection grace period (_GRACE_SECONDS), shortened here
WATCHDOG = 12.0
"""Seconds after which a test that would wait for ever on a hung env frees it (kills the
env processes, or releases the hung thread) and fails: far beyond what a fixed run takes."""


@pytest.fixture
def interruptible(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Ctrl-C raises KeyboardInterrupt (CI starts pytest with SIGINT ignored); the
    grace period is short; yields the list the unraisable hook records into (an env's
    ``__del__`` that fails: "Exception ignored in ...")."""
    monkeypatch.setattr(ac, "_GRACE_SECONDS", GRACE)
    unraisable: list[str] = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda u: unraisable.append(f"{u.exc_type.__name__}: {u.object}")
    )
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield unraisable
    finally:
        signal.signal(signal.SIGINT, old_int)


class _Watchdog:
    """Frees a test stuck on a hung env: :data:`WATCHDOG` seconds after the env hung (it
    wrote ``hung_file``), kills ``envs``' processes. ``hung_at``: when it saw the hang;
    ``stacks``: every thread's stack just before it freed the test (where the run waited,
    for the failure message), or ``""``."""

    def __init__(self, hung_file: Path, envs: gym.vector.AsyncVectorEnv) -> None:
        self.hung_file, self.envs = hung_file, envs
        self.hung_at: float | None = None
        self.stacks = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self.hung_file.exists():
            if self._stop.wait(0.02):
                return
        self.hung_at = time.monotonic()
        if self._stop.wait(WATCHDOG):
            return
        with tempfile.TemporaryFile("w+") as file:
            faulthandler.dump_traceback(file, all_threads=True)
            file.seek(0)
            self.stacks = file.read()
        for process in self.envs.processes:
            if process.pid is not None and process.exitcode is None:
                os.kill(process.pid, signal.SIGKILL)

    def cancel(self) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.parametrize(
    ("where", "async_collection"),
    [("training", False), ("training", True), ("test", False)],
)
def test_ctrl_c_with_a_hung_env_process_ends_the_run_and_its_env_processes(
    interruptible: list[str], tmp_path: Path, where: str, async_collection: bool
) -> None:
    # sub-env 1 hangs in epoch 3's training (its 50th step: 20 per epoch), or in the test
    # of epoch 3 (its 45th step: one 20-step episode per test), and presses Ctrl-C then
    hung_file = tmp_path / "hung"
    hang_at = 50 if where == "training" else 45
    hung = hanging_vec(2, hang_at, interrupt=signal.SIGINT, hung_file=str(hung_file))
    other = hanging_vec(2, hang_at=None)
    train_envs, test_envs = (hung, other) if where == "training" else (other, hung)
    trainer = dqn_trainer(
        train_envs, test_envs=test_envs, async_collection=async_collection, max_epoch=5,
        checkpoint_dir=tmp_path / "ck",
    )  # fmt: skip
    processes = [p for envs in (train_envs, test_envs) for p in envs.processes]
    watchdog = _Watchdog(hung_file, hung)
    try:
        with pytest.raises(KeyboardInterrupt) as info, trainer:  # closes the envs
            trainer.run()
        ended = time.monotonic()
    finally:
        watchdog.cancel()
    assert watchdog.hung_at is not None
    elapsed = ended - watchdog.hung_at
    assert elapsed < WATCHDOG * 0.9, (
        f"the run waited {elapsed:.1f} s for its hung env; its threads then:\n{watchdog.stacks}"
    )
    notes = getattr(info.value, "__notes__", [])
    assert LAST_CHECKPOINT_NOTE + str(tmp_path / "ck" / "epoch_000002") in notes, notes
    assert any("cut short" in n or "given up" in n for n in notes), notes
    assert trainer.state.epoch == 2  # back at the end of its last complete epoch
    for process in processes:  # all ended (the hung one by SIGTERM), none left behind
        process.join(timeout=WATCHDOG)
        assert process.exitcode is not None
    assert hung.closed and other.closed
    del trainer, train_envs, test_envs, hung, other
    gc.collect()
    assert interruptible == []  # no "Exception ignored in AsyncVectorEnv.__del__"


def test_next_after_a_hung_env_process_was_given_up_raises_naming_it(
    interruptible: list[str], tmp_path: Path
) -> None:
    hung_file = tmp_path / "hung"  # sub-env 1 hangs in epoch 2, in the worker thread
    envs = hanging_vec(2, hang_at=30, interrupt=signal.SIGINT, hung_file=str(hung_file))
    trainer = dqn_trainer(envs, async_collection=True)
    watchdog = _Watchdog(hung_file, envs)
    try:
        next(trainer)
        with pytest.raises(KeyboardInterrupt):
            next(trainer)
        with pytest.raises(EnvError, match=r"cannot continue: .*given up") as info:
            next(trainer)
    finally:
        watchdog.cancel()
        trainer.close()
    assert "Ctrl-C or SIGTERM" in str(info.value) and "resume" in str(info.value)
    workers = [t for t in threading.enumerate() if t.name == "epochtrain-collect"]
    for thread in workers:  # its env processes ended: the pipe's EOF freed the thread
        thread.join(timeout=WATCHDOG)
        assert not thread.is_alive()


def test_next_with_the_collect_thread_still_hung_in_an_in_process_env_raises() -> None:
    armed, release = threading.Event(), threading.Event()
    fns = [functools.partial(ThreadHangingEnv, armed, release) for _ in range(2)]
    envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    trainer = dqn_trainer(envs, async_collection=True)
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    # a trainer that went on with the hung thread waited for it: freed, the test fails
    watchdog = threading.Timer(WATCHDOG, release.set)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ac, "_GRACE_SECONDS", GRACE)
            next(trainer)
            armed.set()  # epoch 2's first collect in the worker thread hangs
            with pytest.raises(KeyboardInterrupt):
                next(trainer)
            assert trainer.state.epoch == 1
            started = time.monotonic()
            watchdog.start()
            with pytest.raises(RuntimeError, match=r"worker thread is still hung") as info:
                next(trainer)
            assert time.monotonic() - started < WATCHDOG * 0.9
            assert not release.is_set()
            with pytest.raises(
                RuntimeError, match=r"next\(\) refused: .*worker thread is still hung"
            ):
                next(trainer)  # and every later next() says so
    finally:
        signal.signal(signal.SIGINT, old_int)
        watchdog.cancel()
        release.set()
        trainer.close()
    assert "resume" in str(info.value) and "step()" in str(info.value)


class _CtrlCToItsOwnThreadEnv(ThreadHangingEnv):
    """:class:`ThreadHangingEnv` whose Ctrl-C reaches the collect thread itself, as the
    kernel may deliver a process's SIGINT to any thread (the main thread may be about to
    block, or already have one pending): Python runs the handler in the main thread only,
    at its next chance."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.armed.is_set() and threading.current_thread() is not threading.main_thread():
            self.armed.clear()
            _wait_until_the_main_thread_waits_in_join()
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            self.release.wait()
            raise RuntimeError("released after the test")
        return super().step(action)


def _wait_until_the_main_thread_waits_in_join() -> None:
    """Return once the main thread sleeps in ``AsyncCollection.join`` (or after 10 s)."""
    main = threading.main_thread().ident
    assert main is not None
    stat = Path(f"/proc/self/task/{_main_native_id()}/stat")
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(main)
        names = []
        while frame is not None:
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        if "join" in names and stat.read_text().rpartition(")")[2].split()[0] == "S":
            return
        time.sleep(0.001)  # polled: another thread's progress


def _main_native_id() -> int:
    native = threading.main_thread().native_id
    assert native is not None
    return native


def test_a_ctrl_c_the_collect_thread_received_stops_the_main_threads_wait_for_it() -> None:
    # the main thread waits for the hung collect step (join): a wait without a timeout never
    # returned to run the handler, until the env was freed (12.2 s in 1 of 10 runs under
    # load of the test above: the watchdog's kill)
    armed, release = threading.Event(), threading.Event()
    fns = [functools.partial(_CtrlCToItsOwnThreadEnv, armed, release) for _ in range(2)]
    envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    trainer = dqn_trainer(envs, async_collection=True, update_per_step=0.1)
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    watchdog = threading.Timer(WATCHDOG, release.set)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ac, "_GRACE_SECONDS", GRACE)
            next(trainer)
            armed.set()  # epoch 2's first collect in the worker thread hangs
            watchdog.start()
            started = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                next(trainer)
            elapsed = time.monotonic() - started
            freed = release.is_set()
    finally:
        signal.signal(signal.SIGINT, old_int)
        watchdog.cancel()
        release.set()
        trainer.close()
    assert not freed, f"the Ctrl-C was acted on only when the env was freed ({elapsed:.1f} s)"
    assert elapsed < GRACE + 3.0
    assert trainer.state.epoch == 1
