"""Tests of epochtrain.cli_interrupts: the line and exit status an interrupted command ends
with, and SIGTERM raised where Ctrl-C would be."""

from __future__ import annotations

import contextlib
import errno
import importlib
import importlib.abc
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from epochtrain.cli_interrupts import (
    Terminated,
    end_interrupted,
    exit_at_interrupt,
    exit_status,
    failed_line,
    interrupted_line,
    is_file_fault,
    sigterm_as_interrupt,
)
from epochtrain.errors import LAST_CHECKPOINT_NOTE, CheckpointError, NonFiniteError


def with_checkpoint(exc: BaseException, path: str) -> BaseException:
    exc.add_note(LAST_CHECKPOINT_NOTE + path)
    return exc


def test_train_names_its_last_checkpoint_and_the_resume_command_without_the_old_resume() -> None:
    exc = with_checkpoint(KeyboardInterrupt(), "/runs/a b/checkpoints/epoch_000003")
    argv = ["train", "--algo", "ppo", "--resume", "/old", "--logdir", "/runs/a b"]
    line = interrupted_line(exc, argv)
    assert line == (
        "epochtrain: interrupted; last checkpoint /runs/a b/checkpoints/epoch_000003; resume "
        "with: epochtrain train --algo ppo --logdir '/runs/a b' --resume '/runs/a b/checkpoints'"
    )
    assert interrupted_line(KeyboardInterrupt(), ["train", "--algo", "ppo"]) == (
        "epochtrain: interrupted before any checkpoint was written; nothing to resume"
    )


def test_a_sweep_is_continued_by_the_same_command_whatever_run_was_interrupted() -> None:
    exc = with_checkpoint(Terminated(), "/exp/ppo-CartPole-v1-s0/checkpoints/epoch_000001")
    argv = ["sweep", "--algo", "ppo", "--seeds", "0-4", "--out", "exp"]
    assert interrupted_line(exc, argv) == (
        "epochtrain: terminated; finished runs and checkpoints are kept; continue with the "
        "same command: epochtrain sweep --algo ppo --seeds 0-4 --out exp"
    )


@pytest.mark.parametrize("command", ["eval", "collect", "compare", "config"])
def test_commands_without_checkpoints_say_only_that_they_were_interrupted(command: str) -> None:
    assert interrupted_line(KeyboardInterrupt(), [command, "x"]) == "epochtrain: interrupted"


def test_the_exit_status_is_128_plus_the_signal() -> None:
    assert exit_status(KeyboardInterrupt()) == 130
    assert exit_status(Terminated()) == 143


def test_sigterm_raises_terminated_inside_the_block_and_the_old_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), sigterm_as_interrupt():
        signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == before


def test_outside_the_main_thread_the_block_runs_unchanged() -> None:
    seen: list[object] = []

    def body() -> None:
        with sigterm_as_interrupt():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [signal.getsignal(signal.SIGTERM)]


def test_a_write_fault_names_the_error_then_how_to_continue_like_an_interrupt() -> None:
    full = CheckpointError("cannot write checkpoint file '/r/c/.tmp-x/policy.pt': No space")
    exc = with_checkpoint(full, "/r/c/epoch_000002")
    assert failed_line(exc, ["train", "--algo", "dqn"]) == (
        f"epochtrain: error: {full}; last checkpoint /r/c/epoch_000002; resume with: "
        "epochtrain train --algo dqn --resume /r/c"
    )
    refused = OSError(errno.ENOSPC, "No space left on device", "/exp/a/result.json")
    assert failed_line(refused, ["sweep", "--out", "exp"]) == (
        f"epochtrain: error: {refused}; finished runs and checkpoints are kept; continue "
        "with the same command: epochtrain sweep --out exp"
    )
    assert failed_line(refused, ["train", "--algo", "dqn"]) == f"epochtrain: error: {refused}"


@pytest.mark.parametrize(
    ("exc", "one_line"),
    [
        (CheckpointError("cannot write ..."), True),
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (OSError(errno.EFBIG, "File too large"), True),
        (OSError(errno.EROFS, "Read-only file system"), True),
        (OSError(errno.ECONNRESET, "Connection reset by peer"), False),  # keeps its traceback
        (NonFiniteError("loss is nan"), False),
        (RuntimeError("a bug"), False),
    ],
)
def test_only_checkpoint_errors_and_refused_writes_are_cut_to_one_line(
    exc: BaseException, one_line: bool
) -> None:
    assert is_file_fault(exc) is one_line


def _sleep_forever() -> None:
    import time

    time.sleep(60)


def test_a_process_forked_inside_the_block_dies_of_sigterm_quietly() -> None:
    """An AsyncVectorEnv worker forked during a run inherits the handler; when its parent
    stops it with SIGTERM it must end as any process does, not raise Terminated (which
    printed a BrokenPipeError traceback after every `epochtrain train --env-backend
    async`)."""
    import multiprocessing

    with sigterm_as_interrupt():
        child = multiprocessing.get_context("fork").Process(target=_sleep_forever)
        child.start()
    time.sleep(0.5)  # the child is in its sleep, with the inherited handler
    assert child.pid is not None
    os.kill(child.pid, signal.SIGTERM)
    child.join(10)
    assert child.exitcode == -signal.SIGTERM


def test_epochtrain_train_with_async_envs_ends_without_a_traceback(tmp_path: Path) -> None:
    argv = ["train", "--algo", "ppo", "--env-backend", "async", "--num-envs", "2"]
    argv += ["--num-test-envs", "1", "--episode-per-test", "1", "--max-epoch", "1"]
    argv += ["--step-per-epoch", "64", "--set", "step_per_collect=32", "--no-progress"]
    result = subprocess.run(
        [sys.executable, "-m", "epochtrain", *argv, "--quiet", "--logdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "Finished" in result.stdout


def test_the_end_of_an_interrupted_command_is_its_line_and_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert end_interrupted(Terminated(), ["sweep", "--out", "x"], process_ends=False) == 143
    assert capsys.readouterr().err == (
        "epochtrain: terminated; finished runs and checkpoints are kept; continue with the "
        "same command: epochtrain sweep --out x\n"
    )
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    try:
        assert end_interrupted(KeyboardInterrupt(), ["eval", "p"], process_ends=True) == 130
        ignored = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
    assert capsys.readouterr().err == "epochtrain: interrupted\n"
    assert ignored == (signal.SIG_IGN, signal.SIG_IGN)  # the process only exits after it


class _Exited(Exception):
    """Raised by a stand-in for ``os._exit``, with its status."""


def _exit_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def _exit(status: int) -> None:
        raise _Exited(status)

    monkeypatch.setattr(os, "_exit", _exit)


@pytest.mark.parametrize(
    ("sig", "status", "what"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_a_signal_inside_exit_at_interrupt_ends_the_process_at_once_with_its_line(
    sig: signal.Signals,
    status: int,
    what: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    _exit_raises(monkeypatch)
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with pytest.raises(_Exited) as exited, exit_at_interrupt(["compare", "runs"]):
        signal.raise_signal(sig)
    assert exited.value.args == (status,)
    assert capfd.readouterr().err == f"epochtrain: {what}\n"
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


class _SignalWhileImporting(importlib.abc.MetaPathFinder):
    """Sends SIGINT to this process when ``name`` is imported: Ctrl-C during the import."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, *args: object) -> None:
        if fullname == self.name:
            signal.raise_signal(signal.SIGINT)
        return None


def test_python_m_epochtrain_ends_at_a_ctrl_c_while_it_imports_the_command(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    _exit_raises(monkeypatch)
    monkeypatch.delitem(sys.modules, "epochtrain.cli", raising=False)
    monkeypatch.delitem(sys.modules, "epochtrain.__main__", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_SignalWhileImporting("epochtrain.cli"), *sys.meta_path])
    monkeypatch.setattr(sys, "argv", ["epochtrain", "train", "--algo", "ppo"])
    entry = importlib.import_module("epochtrain.__main__")  # defines main, runs nothing
    with pytest.raises(_Exited) as exited:
        entry.main()
    assert exited.value.args == (130,)
    assert capfd.readouterr().err == (
        "epochtrain: interrupted before any checkpoint was written; nothing to resume\n"
    )


CTRL_C_IN_GENERATED_CODE = """
import importlib.abc, signal, sys

class CtrlCInGeneratedCode(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "epochtrain.cli":
            sys.meta_path.remove(self)
            exec("signal.raise_signal(signal.SIGINT)")  # as inside a @dataclass's methods
        return None

sys.meta_path.insert(0, CtrlCInGeneratedCode())
"""


def test_a_ctrl_c_inside_generated_code_of_the_imports_still_ends_with_status_130(
    tmp_path: Path,
) -> None:
    """Caught, a KeyboardInterrupt raised inside ``exec`` of a string (what ``@dataclass``
    runs, hundreds of times in torch's import) still ended ``python -m`` by SIGINT: CPython
    3.11 remembers it as unhandled. The signal is sent there on purpose, by a
    sitecustomize of this test (the library has no such hook)."""
    (tmp_path / "sitecustomize.py").write_text(CTRL_C_IN_GENERATED_CODE)
    python_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    result = subprocess.run(
        [sys.executable, "-m", "epochtrain", "train", "--algo", "ppo"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *python_path])},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # CI ignores it
    )
    assert (result.returncode, result.stderr) == (
        130,
        "epochtrain: interrupted before any checkpoint was written; nothing to resume\n",
    )


def _importing_torch(pid: int) -> bool:
    """True once process ``pid`` has mapped torch's library: it is inside ``import torch``,
    which goes on for a second or more (Python modules of torch, then epochtrain's)."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False


COMMANDS = {
    "python -m epochtrain": [sys.executable, "-m", "epochtrain"],
    "console script": [str(Path(sys.executable).with_name("epochtrain"))],
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("sig", "after", "line"),
    [
        (signal.SIGINT, 0.0, "epochtrain: interrupted"),  # at once: torch's own modules
        (signal.SIGINT, 0.5, "epochtrain: interrupted"),  # later: epochtrain's, or the run
        (signal.SIGTERM, 0.0, "epochtrain: terminated"),
    ],
)
def test_a_signal_while_the_command_imports_torch_ends_it_with_one_line_and_its_status(
    command: str, sig: signal.Signals, after: float, line: str, tmp_path: Path
) -> None:
    """Sent again and again, as an impatient user presses Ctrl-C, until the process ends;
    whichever the moment, the end is the same. (The first epoch, of a million env steps,
    does not end before: no checkpoint to name.)"""
    argv = ["train", "--algo", "ppo", "--env", "CartPole-v1", "--step-per-epoch", "1000000"]
    proc = subprocess.Popen(
        [*COMMANDS[command], *argv, "--no-progress", "--logdir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # CI ignores it
    )
    deadline = time.monotonic() + 120
    while not _importing_torch(proc.pid):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the command never imported torch"
        time.sleep(0.005)
    time.sleep(after)  # the moment of the first signal, not a wait for something
    while proc.poll() is None:
        proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.05)
    out, err = proc.communicate()
    assert (proc.returncode, err, out) == (
        128 + sig,
        f"{line} before any checkpoint was written; nothing to resume\n",
        "",
    )
