"""Tests of the line each command ends with when interrupted (epochtrain.cli_interrupts):
it says only what is true of the files, and the command it gives continues the run."""

from __future__ import annotations

import contextlib
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from epochtrain.cli_interrupts import (
    Terminated,
    failed_line,
    ignore_further_interrupts,
    interrupted_line,
    sigterm_as_interrupt,
)
from epochtrain.errors import LAST_CHECKPOINT_NOTE, RESUMED_FROM_NOTE, CheckpointError

EPOCHTRAIN = [sys.executable, "-m", "epochtrain"]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # CI starts pytest with SIGINT ignored


@pytest.mark.parametrize("resume", [["--resume", "runs/r 1"], ["--resume=runs/r 1"]])
@pytest.mark.parametrize(
    ("exc", "what"), [(KeyboardInterrupt(), "interrupted"), (Terminated(), "terminated")]
)
def test_a_resume_stopped_before_its_first_checkpoint_keeps_the_checkpoints_and_resumes_alike(
    resume: list[str], exc: KeyboardInterrupt, what: str
) -> None:
    argv = ["train", *resume, "--max-epoch", "50"]
    assert interrupted_line(exc, argv) == (
        f"epochtrain: {what}; no new checkpoint was written and the run's checkpoints are "
        f"kept; resume with the same command: {shlex.join(['epochtrain', *argv])}"
    )


def test_a_new_run_from_another_runs_checkpoint_stopped_early_starts_again_from_it() -> None:
    # `--resume <that run's directory>` would append this run's epochs to the other run
    argv = ["train", "--algo", "ppo", "--logdir", "new", "--set", "resume_from=old/epoch_000001"]
    exc = KeyboardInterrupt()
    exc.add_note(RESUMED_FROM_NOTE + "old/epoch_000001")
    assert interrupted_line(exc, argv) == (
        "epochtrain: interrupted; no checkpoint of this run was written; the checkpoint it "
        "resumed from is kept (old/epoch_000001); start again from it with the same command: "
        + shlex.join(["epochtrain", *argv])
    )


def test_a_new_train_stopped_before_its_first_checkpoint_has_nothing_to_resume() -> None:
    argv = ["train", "--algo", "ppo", "--repeat-per-collect", "2"]  # --re... is not --resume
    assert interrupted_line(KeyboardInterrupt(), argv) == (
        "epochtrain: interrupted before any checkpoint was written; nothing to resume"
    )


@pytest.mark.parametrize("resume", [["--resume", "/old"], ["--resume=/old"]])
def test_a_resume_past_a_new_checkpoint_resumes_from_its_directory_with_one_resume(
    resume: list[str],
) -> None:
    exc = KeyboardInterrupt()
    exc.add_note(LAST_CHECKPOINT_NOTE + "/runs/a/checkpoints/epoch_000004")
    assert interrupted_line(exc, ["train", *resume, "--max-epoch", "9"]) == (
        "epochtrain: interrupted; last checkpoint /runs/a/checkpoints/epoch_000004; resume "
        "with: epochtrain train --max-epoch 9 --resume /runs/a/checkpoints"
    )


def test_a_resume_whose_first_save_failed_names_the_same_command() -> None:
    full = CheckpointError("cannot write checkpoint file '/r/c/.tmp-x/policy.pt': No space")
    assert failed_line(full, ["train", "--resume", "/r"]) == (
        f"epochtrain: error: {full}; no new checkpoint was written and the run's checkpoints "
        "are kept; resume with the same command: epochtrain train --resume /r"
    )


@pytest.mark.parametrize("command", ["eval", "collect", "compare", "config"])
def test_commands_that_keep_nothing_say_only_that_they_were_interrupted(command: str) -> None:
    assert interrupted_line(KeyboardInterrupt(), [command, "--resume", "x"]) == (
        "epochtrain: interrupted"
    )


def _importing_torch(pid: int) -> bool:
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_epochtrain_train_resume_interrupted_at_its_start_names_the_same_command(
    sig: signal.Signals, tmp_path: Path
) -> None:
    """A resumed run signalled while it starts (imports torch: before any epoch): its
    checkpoint is untouched and the line gives the command that resumes it."""
    argv = ["train", "--algo", "ppo", "--env", "CartPole-v1", "--max-epoch", "1"]
    argv += ["--step-per-epoch", "32", "--set", "step_per_collect=32", "--episode-per-test", "1"]
    argv += ["--no-progress", "--quiet", "--logdir", str(tmp_path)]
    first = subprocess.run([*EPOCHTRAIN, *argv], capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    (run_dir,) = tmp_path.iterdir()
    before = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    resume = ["train", "--resume", str(run_dir), "--max-epoch", "100000", "--quiet"]
    proc = subprocess.Popen(
        [*EPOCHTRAIN, *resume],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    deadline = time.monotonic() + 120
    while not _importing_torch(proc.pid):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the command never imported torch"
        time.sleep(0.005)
    while proc.poll() is None:
        proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.05)
    _, err = proc.communicate()
    what = "interrupted" if sig == signal.SIGINT else "terminated"
    assert (proc.returncode, err) == (
        128 + sig,
        f"epochtrain: {what}; no new checkpoint was written and the run's checkpoints are "
        f"kept; resume with the same command: epochtrain train --resume {run_dir} "
        "--max-epoch 100000 --quiet\n",
    )
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == before


ENTRY_POINTS = {
    "python -m epochtrain": EPOCHTRAIN,
    "console script": [str(Path(sys.executable).with_name("epochtrain"))],
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("after", [0.0, 0.3])
def test_a_signal_while_a_finished_command_exits_does_not_kill_it(
    entry: str, sig: signal.Signals, after: float
) -> None:
    """Sent again and again from ``after`` seconds past the command's output (flushed as
    it ends; the interpreter's exit, torch's finalizers with it, takes a second): a signal
    that lands before the command returned is an interrupt (its line, 128 + the signal);
    one in the exit is ignored (status 0). It killed the process (-2, -15) before."""
    argv = ["config", "--algo", "ppo", "--env", "CartPole-v1"]
    proc = subprocess.Popen(
        [*ENTRY_POINTS[entry], *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_default_sigint,
    )
    assert proc.stdout is not None and proc.stdout.read(1) == b"a"  # algo = "ppo": the spec
    time.sleep(after)  # the moment of the first signal, not a wait for something
    while proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.005)
    _, err = proc.communicate()
    what = "interrupted" if sig == signal.SIGINT else "terminated"
    assert (proc.returncode, err.decode()) in [(0, ""), (128 + sig, f"epochtrain: {what}\n")]
    if after > 0:  # well past the output: the command had returned
        assert (proc.returncode, err.decode()) == (0, "")


def test_ignoring_interrupts_at_the_end_of_the_sigterm_block_outlasts_it() -> None:
    """The end of a command (cli.main) ignores them inside the block: leaving the block
    must not bring back the old handler (a SIGTERM then killed the exiting process)."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        with sigterm_as_interrupt():
            ignore_further_interrupts()
        after = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
    assert after == (signal.SIG_IGN, signal.SIG_IGN)
