"""Ctrl-C or SIGTERM with an env hung in the async-collection worker thread: the trainer
gives the collect step in flight one grace period, counted once from the signal, then rolls
back and raises; the hung worker is a daemon thread."""

from __future__ import annotations

import functools
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from epochtrain.errors import terminated_handler
from epochtrain.trainer import async_collection as ac
from tests.faults.envs import FaultyEnv, dqn_trainer

GRACE = 1.0  # seconds; the code's _GRACE_SECONDS, shortened for the test


class HangingEnv(FaultyEnv):
    """:class:`FaultyEnv` that, once ``armed`` and stepped outside the main thread (by the
    async-collection worker), sends ``signum`` to the main thread and then hangs: it waits
    on ``release``, which the test sets only after its checks."""

    armed: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()
    signalled_at: ClassVar[list[float]] = []
    signum: ClassVar[signal.Signals] = signal.SIGINT

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.armed.is_set() and threading.current_thread() is not threading.main_thread():
            self.armed.clear()
            self.signalled_at.append(time.monotonic())
            signal.pthread_kill(threading.main_thread().ident or 0, self.signum)
            self.release.wait()
            raise RuntimeError("released after the test")
        return super().step(action)


@pytest.fixture
def hanging(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[HangingEnv]]:
    monkeypatch.setattr(ac, "_GRACE_SECONDS", GRACE)
    HangingEnv.armed.clear()
    HangingEnv.release.clear()
    HangingEnv.signalled_at.clear()
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)  # CI ignores SIGINT
    old_term = signal.signal(signal.SIGTERM, terminated_handler())
    try:
        yield HangingEnv
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        HangingEnv.release.set()  # the hung worker thread ends


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_with_a_hung_worker_env_ends_the_epoch_within_one_grace_period(
    hanging: type[HangingEnv], monkeypatch: pytest.MonkeyPatch, signum: signal.Signals
) -> None:
    monkeypatch.setattr(HangingEnv, "signum", signum)
    fns = [functools.partial(HangingEnv, "raise", None) for _ in range(2)]
    envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    trainer = dqn_trainer(envs, async_collection=True, warmup_steps=16)
    next(trainer)
    hanging.armed.set()  # epoch 2's first collect in the worker thread hangs
    # a bound for a trainer that would wait for the hung env for ever: the test fails
    watchdog = threading.Timer(8 * GRACE, hanging.release.set)
    watchdog.start()
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            next(trainer)
    finally:
        watchdog.cancel()
    elapsed = time.monotonic() - hanging.signalled_at[0]
    assert isinstance(info.value, KeyboardInterrupt)
    # one grace period for the collect in flight, not one per wait of the stop path
    assert GRACE * 0.9 <= elapsed < GRACE * 1.8, elapsed
    assert trainer.state.epoch == 1  # rolled back to the end of epoch 1
    workers = [t for t in threading.enumerate() if t.name == "epochtrain-collect"]
    assert workers and all(t.daemon for t in workers)  # it cannot keep the process alive
