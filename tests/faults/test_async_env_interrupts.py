"""A Ctrl-C that cuts short a ``step`` or ``reset`` of ``env_backend="async"`` envs whose
processes are healthy leaves the envs usable: the trainer goes back to its last complete
epoch and training continues in the same process (a Jupyter user's interrupt), even when
the Ctrl-C reached the env processes too (a terminal's or a kernel's, to the whole process
group). A call that does not finish within the grace (a hung env) is still given up, and a
second Ctrl-C during the grace ends the wait at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from epochtrain import envs_async
from epochtrain.envs import make_envs
from epochtrain.errors import EnvError
from tests.faults.envs import dqn_trainer
from tests.faults.test_env_process_hang import WATCHDOG, _Watchdog

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "EpochtrainSignalingEnv-v0"
PLAN = "EPOCHTRAIN_TEST_SIGNAL_PLAN"
"""Environment variable read by :class:`SignalingEnv` when it is built (in its env
process): ``"call:count:how:target:marker_file"``."""
SLOW_STEP = 0.5
"""Seconds the signalling env's call takes after its Ctrl-C: the call is in flight."""


class SignalingEnv(gym.Env[np.ndarray, np.int64]):
    """CartPole-shaped: obs ``[t, 0, 0, 0]``, reward 1, episodes of exactly 20 steps.

    With :data:`PLAN` set when it is built, the first sub-env (of those built with that
    plan) to make its ``count``-th ``call`` (``step``, or a seeded ``reset``; counted over
    its life) writes its pid to ``marker_file``, presses Ctrl-C (SIGINT to the run's
    process, ``target="parent"``, or to the whole process group as a terminal does,
    ``"group"``) and then finishes the call :data:`SLOW_STEP` seconds later (``how="slow"``)
    or hangs for ever, deaf to Ctrl-C (``"hang"``: ended only by SIGTERM or SIGKILL)."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1e6, 1e6, shape=(4,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        plan = os.environ.get(PLAN)
        self.plan = plan.split(":", 4) if plan else None
        self.counts = {"step": 0, "reset": 0}
        self.t = 0

    def _maybe_signal(self, call: str) -> None:
        self.counts[call] += 1
        if self.plan is None or self.plan[0] != call or self.counts[call] != int(self.plan[1]):
            return
        how, target, marker = self.plan[2:]
        Path(f"{marker}.{os.getpid()}").touch()  # this sub-env has the call
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # another sub-env presses Ctrl-C
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _wait_until_the_run_waits(marker)
        if target == "group":
            os.killpg(os.getpgid(0), signal.SIGINT)
        else:
            os.kill(os.getppid(), signal.SIGINT)
        if how == "hang":
            threading.Event().wait()  # blocks on a lock nobody releases
        time.sleep(SLOW_STEP)  # a slow env step: the reply comes after the Ctrl-C

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:  # the collector's resets, not the autoreset inside a step
            self._maybe_signal("reset")
        self.t = 0
        return np.array([0.0, 0.0, 0.0, 0.0], dtype=np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._maybe_signal("step")
        self.t += 1
        return np.array([self.t, 0.0, 0.0, 0.0], dtype=np.float32), 1.0, self.t >= 20, False, {}


def _wait_until_the_run_waits(marker: str, envs: int = 2) -> None:
    """Return once every sub-env (``envs``) has the call (the run's process has sent all
    its commands) and the run's process sleeps (it waits for the replies), or after 10 s:
    a Ctrl-C then cuts the call short where a call spends its time, not while the
    commands are sent (microseconds, in which the envs are given up: which got the call
    is unknown)."""
    stat = Path(f"/proc/{os.getppid()}/stat")
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        have = len(list(Path(marker).parent.glob(f"{Path(marker).name}.*")))
        if have >= envs and stat.read_text().rpartition(")")[2].split()[0] == "S":
            return
        time.sleep(0.001)  # polled: another process's progress


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=SignalingEnv)


def signaling_envs(
    monkeypatch: pytest.MonkeyPatch, plan: str | None, n: int = 2
) -> gym.vector.VectorEnv[Any, Any, Any]:
    """``n`` :class:`SignalingEnv` in env processes (``make_envs``), built with ``plan``."""
    if plan is None:
        monkeypatch.delenv(PLAN, raising=False)
    else:
        monkeypatch.setenv(PLAN, plan)
    envs = make_envs(ENV_ID, n, backend="async")
    envs.reset(seed=0)  # every env process has read the plan: it may change now
    return envs


@pytest.fixture
def interruptible() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt (CI starts pytest with SIGINT ignored)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _cut_short_in_the_wait(exc: BaseException) -> bool:
    """True when ``exc`` was raised while the envs' call was in flight (waiting for the
    replies of the env processes), not elsewhere in the epoch."""
    tb = exc.__traceback__
    names = []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return "step_wait" in names or "reset_wait" in names


@pytest.mark.parametrize(
    "call", ["step", "reset"]
)  # a training collect's step; a test step's reset
def test_ctrl_c_during_an_async_env_call_keeps_the_envs_and_training_continues(
    interruptible: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, call: str
) -> None:
    marker = tmp_path / "pressed"
    # epoch 2: env step 30 of each training env (20 per epoch), or the test envs' 2nd reset
    plans = {"step": (f"step:30:slow:parent:{marker}", None)}
    plans["reset"] = (None, f"reset:3:slow:parent:{marker}")  # 1st: signaling_envs'
    train = signaling_envs(monkeypatch, plans[call][0])
    test = signaling_envs(monkeypatch, plans[call][1])
    processes = [p for envs in (train, test) for p in envs.processes]
    pids = [p.pid for p in processes]
    trainer = dqn_trainer(train, test_envs=test, max_epoch=4, step_per_epoch=40)
    try:
        next(trainer)
        with pytest.raises(KeyboardInterrupt) as info:
            next(trainer)
        assert marker.exists()
        notes = getattr(info.value, "__notes__", [])
        assert not any("envs were closed" in note for note in notes), notes
        assert _cut_short_in_the_wait(info.value), "the Ctrl-C landed outside the env call"
        assert trainer.state.epoch == 1  # back at its last complete epoch
        assert not train.closed and not test.closed
        assert not train.owes_replies and not test.owes_replies
        rest = list(trainer)  # the same trainer, envs and env processes go on
    finally:
        trainer.close()
    assert [stats.epoch for stats in rest] == [2, 3, 4]
    for stats in rest:  # every episode whole: no reply of the cut-short call was mixed in
        for collected in (stats.train_collect_stat, stats.test_collect_stat):
            if collected is not None:
                assert set(collected.lens.tolist()) <= {20}, stats
    assert stats.test_collect_stat is not None and stats.test_collect_stat.returns_stat
    assert stats.test_collect_stat.returns_stat.mean == 20.0
    # closed by trainer.close(): every process ended, its handle released
    assert train.processes == [] and test.processes == []
    assert all(_gone(pid) for pid in pids)


def test_ctrl_c_with_an_async_env_hung_gives_up_after_the_grace(
    interruptible: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    grace = 1.0
    monkeypatch.setattr(envs_async, "_INTERRUPTED_CALL_GRACE", grace)
    hung_file = tmp_path / "hung"
    train = signaling_envs(monkeypatch, f"step:30:hang:parent:{hung_file}")
    test = signaling_envs(monkeypatch, None)
    trainer = dqn_trainer(train, test_envs=test, max_epoch=4, step_per_epoch=40)
    watchdog = _Watchdog(hung_file, train)
    try:
        next(trainer)
        with pytest.raises(KeyboardInterrupt) as info:
            next(trainer)
        ended = time.monotonic()
        with pytest.raises(EnvError, match=r"cannot continue: .*cut short"):
            next(trainer)
    finally:
        watchdog.cancel()
        trainer.close()
    assert watchdog.hung_at is not None
    elapsed = ended - watchdog.hung_at
    assert grace * 0.9 <= elapsed < WATCHDOG * 0.9, f"gave up after {elapsed:.1f} s"
    assert _cut_short_in_the_wait(info.value)
    notes = getattr(info.value, "__notes__", [])
    assert any("envs were closed" in note for note in notes), notes
    assert train.closed and all(p.exitcode is not None for p in train.processes)


def test_a_second_ctrl_c_during_the_grace_ends_it_at_once(
    interruptible: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(envs_async, "_INTERRUPTED_CALL_GRACE", 60.0)
    settling = threading.Event()
    settle = getattr(envs_async._AsyncVectorEnv, "_settle", None)

    def watched_settle(self: Any, timeout: float) -> bool:
        settling.set()
        assert settle is not None
        return bool(settle(self, timeout))

    monkeypatch.setattr(envs_async._AsyncVectorEnv, "_settle", watched_settle)
    hung_file = tmp_path / "hung"
    train = signaling_envs(monkeypatch, f"step:30:hang:parent:{hung_file}")
    trainer = dqn_trainer(train, test_envs=signaling_envs(monkeypatch, None), max_epoch=4)

    def second_ctrl_c() -> None:
        if settling.wait(WATCHDOG):
            os.kill(os.getpid(), signal.SIGINT)

    presser = threading.Thread(target=second_ctrl_c, daemon=True)
    watchdog = _Watchdog(hung_file, train)
    try:
        next(trainer)
        presser.start()
        with pytest.raises(KeyboardInterrupt) as info:
            next(trainer)
        ended = time.monotonic()
    finally:
        watchdog.cancel()
        trainer.close()
    assert watchdog.hung_at is not None
    assert ended - watchdog.hung_at < WATCHDOG * 0.5  # not the 60 s grace
    assert isinstance(info.value.__context__, KeyboardInterrupt)  # the first Ctrl-C's
    assert train.closed and all(p.exitcode is not None for p in train.processes)


TERMINAL_CTRL_C = """
import json, os, sys
from tests.faults.test_async_env_interrupts import PLAN, make_envs, ENV_ID
from tests.faults.envs import dqn_trainer
os.environ[PLAN] = "step:30:slow:group:" + sys.argv[1]
train = make_envs(ENV_ID, 2, backend="async")
train.reset(seed=0)
del os.environ[PLAN]
test = make_envs(ENV_ID, 2, backend="async")
trainer = dqn_trainer(train, test_envs=test, max_epoch=3, step_per_epoch=40)
next(trainer)
try:
    next(trainer)
    notes = None
except KeyboardInterrupt as exc:
    notes = getattr(exc, "__notes__", [])
epoch = trainer.state.epoch
alive = all(p.exitcode is None for envs in (train, test) for p in envs.processes)
rest = [stats.epoch for stats in trainer]
trainer.close()
print(json.dumps({"notes": notes, "epoch": epoch, "alive": alive, "rest": rest}))
"""


def test_a_terminals_ctrl_c_to_the_process_group_leaves_the_env_processes_running(
    tmp_path: Path,
) -> None:
    # a session of its own: the env's SIGINT to its process group reaches the run and its
    # env processes only, as a terminal's Ctrl-C (or a Jupyter kernel's interrupt) does
    proc = subprocess.Popen(
        [sys.executable, "-c", TERMINAL_CTRL_C, str(tmp_path / "pressed")], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    outcome = json.loads(out.splitlines()[-1])
    assert outcome["notes"] is not None, "no KeyboardInterrupt"
    assert not any("envs were closed" in note for note in outcome["notes"]), outcome
    assert outcome["epoch"] == 1 and outcome["alive"], outcome
    assert outcome["rest"] == [2, 3], outcome


class _CtrlCAtSend:
    """A pipe to an env process that presses Ctrl-C as a command is sent on it, as a
    Ctrl-C that lands while the run sends its commands does (for fast envs, a large part
    of a step)."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe

    def send(self, obj: Any) -> None:
        signal.raise_signal(signal.SIGINT)
        self.pipe.send(obj)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pipe, name)


@pytest.mark.parametrize("call", ["step", "reset"])
def test_a_ctrl_c_while_commands_are_sent_is_raised_after_the_call_and_keeps_the_envs(
    interruptible: None, call: str
) -> None:
    envs = make_envs(ENV_ID, 2, backend="async")
    try:
        envs.reset(seed=0)
        pipe = envs.parent_pipes[1]
        envs.parent_pipes[1] = _CtrlCAtSend(pipe)
        with pytest.raises(KeyboardInterrupt):
            if call == "step":
                envs.step(np.array([0, 1]))
            else:
                envs.reset(seed=1)
        envs.parent_pipes[1] = pipe
        assert not envs.owes_replies  # every env process got the call and answered it
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        obs, _ = envs.reset(seed=2)
        obs, *_ = envs.step(np.array([0, 1]))  # the replies of this step, not a stale one
        assert obs[:, 0].tolist() == [1.0, 1.0]
    finally:
        envs.close()


def _gone(pid: int | None) -> bool:
    """True when no process ``pid`` exists any more (ended and reaped)."""
    assert pid is not None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
