"""Tests of epochtrain.ray: sweeps on a local Ray equal the lockstep backend's, killed
workers and dead drivers resume exactly, PBT clones keep their learning rate, bad input."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'epochtrain[ray]'")

from epochtrain.checkpoint import read_manifest  # noqa: E402
from epochtrain.checkpoint_files import LOCK_FILE  # noqa: E402
from epochtrain.experiment import grid, run_experiment  # noqa: E402
from epochtrain.experiment.cli import add_sweep_parser, run_sweep  # noqa: E402
from epochtrain.experiment.prepare import prepare_runs  # noqa: E402
from epochtrain.experiment.runs import open_trainer  # noqa: E402
from epochtrain.extras import MissingExtraError  # noqa: E402
from epochtrain.spec import RunSpec  # noqa: E402
from tests.experiment.settings import FAST, results  # noqa: E402
from tests.ray_fixtures import (  # noqa: E402
    local_ray,  # noqa: F401  (the fixture, asked for below)
    run_dir_trainable,
    spec_trainable,
    trial_info,
)

pytestmark = pytest.mark.usefixtures("local_ray")  # one local Ray for the whole module


def test_a_two_run_sweep_on_ray_equals_the_lockstep_backend(tmp_path: Path) -> None:
    specs = grid(["ppo"], ["CartPole-v1"], [0, 1], **FAST)
    run_experiment(specs, tmp_path / "lockstep", show_progress=False)
    experiment = run_experiment(specs, tmp_path / "ray", backend="ray", show_progress=False)
    assert [r.status for r in experiment.runs] == ["finished", "finished"]
    assert results(tmp_path / "ray") == results(tmp_path / "lockstep")
    for run_id in ("ppo-CartPole-v1-s0", "ppo-CartPole-v1-s1"):
        run_dir = tmp_path / "ray" / run_id
        assert {p.name for p in run_dir.iterdir()} >= {"spec.toml", "log.jsonl", "checkpoints"}
        lockstep_log = (tmp_path / "lockstep" / run_id / "log.jsonl").read_text()
        assert _without_times(run_dir / "log.jsonl") == _without_times_text(lockstep_log)
    index = json.loads((tmp_path / "ray" / "experiment.json").read_text())
    assert index["runs"] == [s.run_id for s in specs]


def test_runs_one_after_another_on_a_reused_actor_equal_the_lockstep_backend(
    tmp_path: Path,
) -> None:
    # workers=1: the second trial runs on the first one's actor, through reset_config
    specs = grid(["ppo"], ["CartPole-v1"], [2, 3], **FAST)
    run_experiment(specs, tmp_path / "ray", backend="ray", workers=1, show_progress=False)
    run_experiment(specs, tmp_path / "lockstep", show_progress=False)
    assert results(tmp_path / "ray") == results(tmp_path / "lockstep")
    pids = set()
    for trial_result in (tmp_path / "ray" / ".tune").glob("sweep-*/*/result.json"):
        pids |= {json.loads(line)["pid"] for line in trial_result.read_text().splitlines()}
    assert len(pids) == 1, f"the trials ran in {len(pids)} actors, not one reused actor"


def _without_times_text(text: str) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in text.splitlines()]
    return [
        {k: v for k, v in r.items() if not any(w in k for w in ("time", "speed"))} for r in records
    ]


def _without_times(path: Path) -> list[dict[str, Any]]:
    return _without_times_text(path.read_text())


def _kill_worker_after_epoch_2(run_dir: Path, killed: list[int]) -> threading.Thread:
    """A thread that kill -9s the process holding ``run_dir``'s checkpoint lock once the
    run has checkpointed epoch 2 (and not yet finished)."""

    def watch() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not killed:
            lock = run_dir / "checkpoints" / ".lock"
            if (run_dir / "checkpoints" / "epoch_000002").is_dir() and lock.is_file():
                pid = json.loads(lock.read_text())["pid"]
                if not (run_dir / "result.json").exists():
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher


LONGER = {**FAST, "max_epoch": 4, "step_per_epoch": 256}  # killed after epoch 2 of 4


def test_a_trial_whose_worker_is_killed_finishes_equal_to_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    specs = grid(["ppo"], ["CartPole-v1"], [3], **LONGER)
    run_dir = tmp_path / "ray" / specs[0].run_id
    killed: list[int] = []
    watcher = _kill_worker_after_epoch_2(run_dir, killed)
    run_experiment(specs, tmp_path / "ray", backend="ray", max_failures=2, show_progress=False)
    watcher.join()
    assert killed, "the worker finished before it could be killed: lengthen the run"
    run_experiment(specs, tmp_path / "lockstep", show_progress=False)
    assert results(tmp_path / "ray") == results(tmp_path / "lockstep")
    assert results(tmp_path / "ray")[specs[0].run_id]["status"] == "finished"
    assert _without_times(run_dir / "log.jsonl") == _without_times(
        tmp_path / "lockstep" / specs[0].run_id / "log.jsonl"
    )


def test_a_trial_killed_more_often_than_max_failures_is_failed_and_a_rerun_finishes_it(
    tmp_path: Path,
) -> None:
    specs = grid(["ppo"], ["CartPole-v1"], [4], **LONGER)
    run_dir = tmp_path / "ray" / specs[0].run_id
    killed: list[int] = []
    watcher = _kill_worker_after_epoch_2(run_dir, killed)
    experiment = run_experiment(
        specs, tmp_path / "ray", backend="ray", max_failures=0, show_progress=False
    )
    watcher.join()
    assert killed, "the worker finished before it could be killed: lengthen the run"
    assert [r.status for r in experiment.runs] == ["failed"]
    failed = json.loads((run_dir / "result.json").read_text())
    assert failed["status"] == "failed" and failed["error"]
    assert 2 <= failed["epochs"] < LONGER["max_epoch"]  # its curve up to the kill is kept

    rerun = run_experiment(specs, tmp_path / "ray", backend="ray", show_progress=False)
    assert [r.status for r in rerun.runs] == ["finished"]
    run_experiment(specs, tmp_path / "lockstep", show_progress=False)
    assert results(tmp_path / "ray") == results(tmp_path / "lockstep")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill -9", "ctrl-c", "sigterm"])
def test_a_sweep_rerun_after_its_driver_was_killed_continues_from_the_checkpoints(
    tmp_path: Path, how: str
) -> None:
    import subprocess

    out = tmp_path / "ray"
    specs = grid(["ppo"], ["CartPole-v1"], [5], **{**LONGER, "keep_last": 10})
    run_dir = out / specs[0].run_id
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in {**LONGER, "keep_last": 10}.items()]
    argv = ["sweep", "--algo", "ppo", "--env", "CartPole-v1", "--seeds", "5", "--out"]
    stderr = tmp_path / "stderr.txt"
    with stderr.open("wb") as err:
        driver = subprocess.Popen(
            [sys.executable, "-m", "epochtrain", *argv, os.fspath(out), "--backend", "ray", *flags],
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # a process group to send Ctrl-C to, as a terminal does
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:  # stop the driver (kill -9: its own local Ray goes with it) once epoch 2 is saved
        deadline = time.monotonic() + 240
        while not (run_dir / "checkpoints" / "epoch_000002").is_dir():
            assert driver.poll() is None, "the sweep ended before its driver could be killed"
            assert time.monotonic() < deadline, "no checkpoint of epoch 2 within 240 s"
            time.sleep(0.02)
        if how in ("ctrl-c", "sigterm"):  # Tune stops the trials; the driver says how to go on
            if how == "ctrl-c":
                os.killpg(driver.pid, signal.SIGINT)
            else:  # `kill PID`: the driver alone, as a scheduler stops a job
                driver.send_signal(signal.SIGTERM)
            status, what = (130, "interrupted") if how == "ctrl-c" else (143, "terminated")
            assert driver.wait(timeout=120) == status, stderr.read_text()[-3000:]
            last = stderr.read_text().strip().splitlines()[-1]
            assert last.startswith(f"epochtrain: {what}; finished runs and checkpoints"), last
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.wait()
    assert not (run_dir / "result.json").exists()
    saved = {p: p.stat().st_mtime_ns for p in (run_dir / "checkpoints").glob("epoch_000001/*")}
    assert saved

    run_experiment(specs, out, backend="ray", show_progress=False)
    run_experiment(specs, tmp_path / "lockstep", show_progress=False)
    assert results(out) == results(tmp_path / "lockstep")
    # epoch 1 was not run again: its checkpoint is the one the killed driver wrote
    assert {p: p.stat().st_mtime_ns for p in saved} == saved


# ----------------------------------------------------------------------- trainable
def _lrs(trainable: Any) -> list[float]:
    opts = trainable.trainer.policy.optimizers.values()
    return [g["lr"] for opt in opts for g in opt.param_groups]


PPO = RunSpec.tuned("ppo", "CartPole-v1", seed=0).with_overrides(
    {**FAST, "max_epoch": 4, "lr_anneal_steps": None}
)


def test_a_step_returns_the_epoch_under_the_documented_tags_and_done_at_the_end() -> None:
    trainable = spec_trainable(PPO.with_overrides({"max_epoch": 2}), "t0")
    first, second = trainable.train(), trainable.train()
    assert first["done"] is False and second["done"] is True
    for tag in ("test/returns_stat/mean", "train/n_collected_steps", "info/env_step"):
        assert tag in first
    assert first["info/env_step"] == 64 and second["epoch"] == 2
    trainable.stop()


def test_an_actor_set_up_for_a_run_going_on_elsewhere_leaves_its_files_alone(
    tmp_path: Path,
) -> None:
    # Tune sets an actor up with the config of the trial it was started for, then may run
    # that trial on a cached actor: the idle actor must not rewind the live run's log.
    from epochtrain.ray import EpochTrainable

    specs = grid(["ppo"], ["CartPole-v1"], [0], **{**FAST, "max_epoch": 4, "checkpoint_every": 2})
    run_dir = prepare_runs(specs, tmp_path)[0]
    live = open_trainer(run_dir)
    list(islice(live, 3))  # checkpoint at epoch 2, epoch 3 logged after it
    written = (run_dir / "log.jsonl").read_text()
    config = {"run_dir": os.fspath(run_dir), **trial_info("idle")}
    idle = EpochTrainable(config)
    assert (run_dir / "log.jsonl").read_text() == written
    list(live)  # the live run finishes; the actor, used now, sees it finished
    del live
    assert idle.train()["done"] is True
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "finished" and result["steps"] == [64.0, 128.0, 192.0, 256.0]
    idle.stop()


def test_a_run_that_raises_is_failed_once_with_its_own_error_and_nothing_to_save(
    tmp_path: Path,
) -> None:
    # before: Tune saved the broken trainer after the failed step, the save raised, and
    # the trial was retried max_failures times with the save's error recorded instead
    specs = grid(["ppo"], ["CartPole-v1"], [0], **{**FAST, "max_epoch": 3, "lr": 1e30})
    run_dir = prepare_runs(specs, tmp_path)[0]
    trainable = run_dir_trainable(run_dir, "bad")
    results = [trainable.train() for _ in range(2)]  # epoch 1, then the NaN of epoch 2
    assert results[-1]["done"] is True and results[-1]["failed"] == 1.0
    trainable.save()  # nothing to save, and no error: the trial ends as done
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "failed" and result["error"].startswith("NonFiniteError")
    trainable.stop()


def test_a_run_another_sweep_is_running_is_left_to_it_not_failed(tmp_path: Path) -> None:
    # before: the lock's refusal came from building the trainer, outside the step's
    # handling, so Tune retried the trial and recorded the other sweep's run as failed
    specs = grid(["ppo"], ["CartPole-v1"], [0], **FAST)
    run_dir = prepare_runs(specs, tmp_path)[0]
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # the other sweep's process, before its run's first checkpoint
        lock = {"pid": other.pid, "host": socket.gethostname(), "token": "x", "created": "then"}
        (run_dir / "checkpoints").mkdir(exist_ok=True)
        (run_dir / "checkpoints" / LOCK_FILE).write_text(json.dumps(lock))
        (run_dir / "log.jsonl").write_text('{"scope": "train", "step": 64}\n')
        trainable = run_dir_trainable(run_dir, "second")
        with pytest.warns(UserWarning, match="in use by another sweep"):
            result = trainable.train()
        assert result["done"] is True and result["failed"] == 0.0
        trainable.save()
        assert not (run_dir / "result.json").exists()  # not recorded as failed
        assert (run_dir / "log.jsonl").read_text() == '{"scope": "train", "step": 64}\n'
        trainable.stop()
    finally:
        other.kill()
        other.wait()


def test_reset_config_applies_the_new_learning_rate_after_the_donors_checkpoint(
    tmp_path: Path,
) -> None:
    donor = spec_trainable(PPO, "donor", lr=1e-3)
    donor.train()
    donor.save_checkpoint(os.fspath(tmp_path))
    assert _lrs(donor) == [1e-3]

    clone = spec_trainable(PPO, "clone", lr=1e-3)
    assert clone.reset_config({**clone.config, "lr": 5e-4}) is True
    clone.load_checkpoint(os.fspath(tmp_path))
    assert _lrs(clone) == [5e-4]  # not the donor's 1e-3 from the optimizer state
    donor_weights = donor.trainer.policy.state_dict()
    for name, tensor in clone.trainer.policy.state_dict().items():
        if hasattr(tensor, "shape"):
            assert (tensor == donor_weights[name]).all(), name
    assert clone.trainer.spec["config"]["lr"] == 5e-4  # its checkpoints record its own lr

    # The same trial restored replays exactly; the clone draws streams of its own.
    restored = spec_trainable(PPO, "donor", lr=1e-3)
    restored.load_checkpoint(os.fspath(tmp_path))
    after_donor, after_restore = donor.train(), restored.train()
    assert after_restore["test/returns_stat/mean"] == after_donor["test/returns_stat/mean"]
    assert after_restore["update/loss/actor"] == after_donor["update/loss/actor"]
    clone_rng = clone.trainer._rng_state["numpy"][1]
    assert not (clone_rng == restored.trainer._rng_state["numpy"][1]).all()
    spaces = [t.trainer.train_collector.env.envs[0].observation_space for t in (clone, restored)]
    assert spaces[0].sample().tolist() != spaces[1].sample().tolist()  # its spaces draw anew
    for trainable in (donor, clone, restored):
        trainable.stop()


# ----------------------------------------------------------------------- bad input
def test_a_search_space_naming_an_unknown_setting_is_one_line_naming_close_matches() -> None:
    from epochtrain.ray import param_space, spec_from_config

    with pytest.raises(ValueError, match=r"search space: unknown setting 'lrr'.*'lr'") as info:
        param_space(PPO, {"lrr": 1e-3})
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"search space: unknown setting 'lrr'"):
        spec_from_config({"spec": PPO.to_dict(), "lrr": 1e-3})
    with pytest.raises(ValueError, match="cannot be searched over"):
        param_space(PPO, {"env_id": "Acrobot-v1"})


def test_a_trial_whose_search_space_leaves_a_setting_ignored_runs_with_a_warning() -> None:
    """A search space crosses settings, so some trials leave one ignored (``alpha_lr`` with
    ``auto_alpha`` off); such a trial warns and builds, where a spec built in code is refused."""
    from epochtrain.ray import spec_from_config

    sac = RunSpec.tuned("sac", "Pendulum-v1")
    config = {"spec": sac.to_dict(), "auto_alpha": False, "alpha_lr": 1e-3}
    with pytest.warns(UserWarning, match=r"search space: config\.alpha_lr = 0\.001 is ignored"):
        spec = spec_from_config(config)
    assert spec.config.alpha_lr == 1e-3 and not spec.config.auto_alpha
    with pytest.raises(ValueError, match=r"alpha_lr=0\.001 has no effect: auto_alpha is off"):
        sac.with_overrides({"auto_alpha": False, "alpha_lr": 1e-3})


def _sweep(tmp_path: Path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_sweep_parser(parser.add_subparsers())
    argv = ["sweep", "--algo", "ppo", "--out", os.fspath(tmp_path / "exp"), "--no-progress"]
    return parser.parse_args([*argv, "--backend", "ray", "--max-epoch", "1", *extra])


def test_an_unreachable_address_is_one_line_naming_ray_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_sweep(_sweep(tmp_path, "--address", "127.0.0.1:1")) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith("epochtrain sweep: error: cannot connect to a Ray cluster at")
    assert "ray start --head" in err
    # before any work: no experiment.json, lock or run directory
    assert not (tmp_path / "exp").exists()
    with pytest.raises(ConnectionError, match="cannot connect to a Ray cluster at"):
        run_experiment(
            grid(["ppo"], ["CartPole-v1"], [0]), tmp_path / "py", backend="ray",
            address="127.0.0.1:1",
        )  # fmt: skip
    assert not (tmp_path / "py").exists()  # from Python too


def test_more_gpus_per_run_than_the_cluster_has_is_refused_not_waited_for(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match=r"gpus_per_run=1 but the Ray cluster has 0 GPUs"):
        run_experiment(
            grid(["ppo"], ["CartPole-v1"], [0], **FAST), tmp_path, backend="ray",
            gpus_per_run=1.0, show_progress=False,
        )  # fmt: skip
    assert not list(tmp_path.glob("*/result.json"))


def test_ray_not_installed_is_one_line_naming_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = ("epochtrain.ray", "epochtrain.experiment.ray_backend")
    for name in [m for m in sys.modules if m == "ray" or m.startswith(("ray.", *ours))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(MissingExtraError, match=r"pip install 'epochtrain\[ray\]'"):
        run_experiment(grid(["ppo"], ["CartPole-v1"], [0]), tmp_path, backend="ray")
    assert not list(tmp_path.iterdir())  # refused before any run directory is written
    assert run_sweep(_sweep(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "epochtrain sweep: error: ray is not installed: pip install 'epochtrain[ray]' "
        "(import of ray halted; None in sys.modules)"
    )


# ----------------------------------------------------------------------- examples
def _run_example(name: str, cwd: Path) -> str:
    import subprocess

    example = Path(__file__).resolve().parents[1] / "examples" / name
    result = subprocess.run(
        [sys.executable, os.fspath(example)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1800,  # a hang guard: the PBT example takes 120 s on a quiet 2-core VM
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.slow
def test_tune_asha_ppo_example_runs_its_trials_and_names_the_best_lr(tmp_path: Path) -> None:
    out = _run_example("tune_asha_ppo.py", tmp_path)
    assert len([ln for ln in out.splitlines() if ln.startswith("trial lr=")]) == 4, out
    assert "best lr" in out


@pytest.mark.slow
def test_pbt_sac_example_runs_a_population_of_two(tmp_path: Path) -> None:
    out = _run_example("pbt_sac.py", tmp_path)
    assert len([ln for ln in out.splitlines() if ln.startswith("trial seed")]) == 2, out
    assert "best test return" in out


def test_ctrl_c_before_the_first_epoch_ends_the_sweep_with_130_and_the_continue_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tune's results of trials stopped before their first result carry no config
    from epochtrain.cli import main
    from epochtrain.experiment import ray_backend

    class CtrlCAtTrialStart(ray_backend._ProgressCallback):
        def on_trial_start(
            self, iteration: int, trials: list[Any], trial: Any, **info: Any
        ) -> None:
            os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C, before any epoch

    monkeypatch.setattr(ray_backend, "_ProgressCallback", CtrlCAtTrialStart)
    out = tmp_path / "exp"
    argv = ["sweep", "--algo", "ppo", "--seeds", "0-1", "--out", os.fspath(out)]
    argv += ["--backend", "ray", "--max-epoch", "2", "--step-per-epoch", "512"]
    assert main(argv) == 130
    captured = capsys.readouterr()
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith("epochtrain: interrupted; finished runs and checkpoints are kept"), last
    assert last.endswith("continue with the same command: epochtrain " + " ".join(argv)), last
    assert not list(out.glob("*/result.json"))  # stopped, not recorded as failed
    # nor shown as failed: a stopped run gets no progress line, as with the other backends
    assert "ppo-CartPole-v1-s" not in captured.out, captured.out


def test_a_trial_reopening_a_run_counts_the_time_of_its_earlier_sessions(tmp_path: Path) -> None:
    specs = grid(["ppo"], ["CartPole-v1"], [0], **{**FAST, "max_epoch": 3})
    run_dir = prepare_runs(specs, tmp_path)[0]
    first = open_trainer(run_dir)
    list(islice(first, 2))  # a driver killed after epoch 2's checkpoint
    earlier = first.state.total_time  # with epoch 2's save, which its checkpoint cannot hold
    assert first.last_checkpoint is not None
    saved = read_manifest(first.last_checkpoint)["total_time"]
    first.close()
    del first
    trainable = run_dir_trainable(run_dir, "t")
    assert trainable.trainer.state.epoch == 2 and trainable.wall_time == pytest.approx(saved)
    assert 0 < saved <= earlier
    assert trainable.train()["done"] is True
    result = json.loads((run_dir / "result.json").read_text())
    assert result["wall_time"] > earlier
    trainable.stop()


def test_a_spec_trial_started_over_in_its_directory_replaces_the_failed_attempts_records(
    tmp_path: Path,
) -> None:
    # Tune retries a trial that failed before its first checkpoint from scratch, in the
    # trial's directory: the new attempt's log replaces the failed one's, not refused by it
    from epochtrain.ray import EpochTrainable, param_space

    class InTrialDir(EpochTrainable):  # Tune gives a retried trial the same directory
        @property
        def logdir(self) -> str:
            return str(tmp_path / "t")

    spec = PPO.with_overrides(
        {"max_epoch": 2, "logging.logdir": str(tmp_path / "runs"), "logging.loggers": ["jsonl"]}
    )

    def attempt() -> Any:
        return InTrialDir({**param_space(spec), **trial_info("t")})

    failed = attempt()
    failed.train()  # epoch 1 logged, then the attempt dies before any checkpoint
    failed.stop()
    retried = attempt()
    assert retried.train()["done"] is False and retried.train()["done"] is True
    retried.stop()
    (log,) = (tmp_path / "t").rglob("log.jsonl")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in records if r["scope"] == "info"] == [1, 2]
