"""An ``AsyncVectorEnv`` worker process that dies (``kill -9``, the out-of-memory killer) is
reported as a dead process naming its sub-env, pid and signal, not as an env that raised
the pipe's ``ConnectionResetError``/``BrokenPipeError``; one that died between epochs is
found before the next epoch's work; the envs are then closed quietly (no warning at exit)."""

from __future__ import annotations

import gc
import os
import signal
import sys
import warnings

import pytest

from epochtrain import DQN, Collector
from epochtrain.errors import EnvError
from tests.faults.envs import dqn_trainer, faulty_vec


@pytest.mark.parametrize("reap_first", [True, False])
def test_a_killed_env_process_is_named_with_its_sub_env_pid_and_signal(reap_first: bool) -> None:
    envs = faulty_vec(3, bad=-1, fault="raise", fault_at=1, mode="async")
    policy = DQN(envs.single_observation_space, envs.single_action_space, hidden=(8,))
    collector = Collector(policy, envs)
    collector.reset(seed=0)
    collector.collect(n_step=6, random=True)
    victim = envs.processes[1]
    pid = victim.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    if reap_first:  # the pipe error may also come before the process is reaped
        victim.join()
    with pytest.raises(EnvError) as info:
        collector.collect(n_step=6, random=True)
    message = str(info.value)
    assert info.value.sub_env == 1
    assert f"sub-env 1's process (pid {pid})" in message
    assert "died (killed by SIGKILL)" in message and "the env did not raise" in message
    assert isinstance(info.value.__cause__, EOFError | OSError)
    assert all(not p.is_alive() for p in envs.processes)  # the envs were closed


def test_envs_whose_env_process_was_killed_close_without_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unraisable: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(repr(u.exc_value)))
    envs = faulty_vec(3, bad=-1, fault="raise", fault_at=1, mode="async")
    policy = DQN(envs.single_observation_space, envs.single_action_space, hidden=(8,))
    collector = Collector(policy, envs)
    collector.reset(seed=0)
    os.kill(envs.processes[1].pid or 0, signal.SIGKILL)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(EnvError, match="died"):
            collector.collect(n_step=6, random=True)
        assert envs.closed  # so its __del__ does not close it again, reading a dead pipe
        del envs, collector
        gc.collect()
    assert unraisable == []  # was: Exception ignored in AsyncVectorEnv.__del__: EOFError
    assert [str(w.message) for w in caught if "pending call" in str(w.message)] == []


def test_a_test_env_process_killed_between_epochs_is_named_before_the_next_epoch_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unraisable: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(repr(u.exc_value)))
    test_envs = faulty_vec(2, bad=-1, fault="raise", fault_at=1, mode="async")
    trainer = dqn_trainer(faulty_vec(2, -1, "raise", 1), test_envs=test_envs)
    next(trainer)
    victim = test_envs.processes[1]
    pid = victim.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    victim.join()
    with pytest.raises(EnvError) as info:
        next(trainer)
    message = str(info.value)
    # named as a training env's death is, as the test envs', before the epoch's work
    assert info.value.sub_env == 1
    assert message.startswith("the test envs: ")
    assert f"sub-env 1's process (pid {pid})" in message and "(killed by SIGKILL)" in message
    assert "before epoch 2 started" in message and "at env step 40 (epoch 1)" in message
    assert all(p.exitcode is not None for p in test_envs.processes) and test_envs.closed
    trainer.close()
    del trainer, test_envs
    gc.collect()
    assert unraisable == []
