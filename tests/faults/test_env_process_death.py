"""An ``AsyncVectorEnv`` worker process that dies (``kill -9``, the out-of-memory killer) is
reported as a dead process naming its sub-env, pid and signal, not as an env that raised
the pipe's ``ConnectionResetError``/``BrokenPipeError``."""

from __future__ import annotations

import os
import signal

import pytest

from epochtrain import DQN, Collector
from epochtrain.errors import EnvError
from tests.faults.envs import faulty_vec


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
