"""An interrupt (Ctrl-C, SIGTERM) that lands while an ``env_backend='async'`` run waits for
its env processes' replies: the run still stops, instead of waiting for ever on a reply
it has already read."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from epochtrain import envs_async
from epochtrain.envs import make_envs
from epochtrain.errors import Terminated
from epochtrain.factory import make_trainer

SMALL = {
    "num_envs": 2,
    "num_test_envs": 1,
    "episode_per_test": 1,
    "max_epoch": 3,
    "step_per_epoch": 64,
    "step_per_collect": 64,
    "repeat_per_collect": 1,
    "hidden": (8,),
    "show_progress": False,
}


class _CutShort:
    """A pipe to an env process whose next ``recv`` raises ``Terminated``, as a SIGTERM
    does when it lands after the replies of the pipes before it were read."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe
        self.armed = True

    def recv(self) -> Any:
        if self.armed:
            self.armed = False
            raise Terminated("signal 15")
        return self.pipe.recv()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pipe, name)


@pytest.fixture(autouse=True)
def _short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wait 1 s (not 5) for the replies of a call an interrupt cut short."""
    monkeypatch.setattr(envs_async, "_PENDING_CALL_WAIT", 1.0)


def test_an_interrupt_between_two_env_replies_stops_the_run_and_ends_its_env_processes() -> None:
    # before: the roll-back closed the envs, whose close waited for ever for env 0's reply
    # to the cut-short step (read already): `epochtrain train` hung after SIGTERM
    trainer = make_trainer("ppo", "CartPole-v1", seed=0, env_backend="async", **SMALL)
    envs = trainer.train_collector.env
    processes = list(envs.processes)
    next(trainer)
    envs.parent_pipes[1] = _CutShort(envs.parent_pipes[1])
    raised: list[BaseException] = []

    def epoch() -> None:
        try:
            next(trainer)
        except BaseException as exc:  # what the epoch raised is the result
            raised.append(exc)

    runner = threading.Thread(target=epoch, daemon=True)
    runner.start()
    runner.join(timeout=15)
    hung = runner.is_alive()
    for process in processes:  # a hung close waits on these: end them to free the thread
        if process.is_alive():
            process.kill()
    runner.join(timeout=5)
    assert not hung, "the interrupted epoch never returned: closing the envs hung"
    assert len(raised) == 1 and isinstance(raised[0], Terminated)
    assert trainer.state.epoch == 1  # back at its last complete epoch
    assert any("the envs were closed" in note for note in getattr(raised[0], "__notes__", []))
    assert envs.closed
    trainer.close()


@pytest.mark.parametrize("call", ["reset", "step"])
def test_closing_async_envs_whose_call_an_interrupt_cut_short_ends_their_processes(
    call: str,
) -> None:
    envs = make_envs("CartPole-v1", 2, backend="async")
    envs.reset(seed=0)
    envs.parent_pipes[1] = _CutShort(envs.parent_pipes[1])
    with pytest.raises(Terminated):
        if call == "reset":
            envs.reset(seed=1)
        else:
            envs.step(envs.action_space.sample())
    closer = threading.Thread(target=envs.close, daemon=True)
    closer.start()
    closer.join(timeout=15)
    hung = closer.is_alive()
    for process in envs.processes:
        if process.is_alive():
            process.kill()
    closer.join(timeout=5)
    assert not hung, "close waited for ever for a reply that was already read"
    assert envs.closed
    assert not any(p.is_alive() for p in envs.processes)
