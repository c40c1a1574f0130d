"""Tests of epochtrain.cli_interrupts: the line and exit status an interrupted command ends
with, and SIGTERM raised where Ctrl-C would be."""

from __future__ import annotations

import errno
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
