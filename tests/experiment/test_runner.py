"""Tests of epochtrain.experiment.runner: grids, run directories, resuming, failures."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochtrain.dataset import record_dataset
from epochtrain.experiment import grid, load_experiment, run_experiment, runner
from epochtrain.spec import RunSpec
from tests.experiment.settings import FAST, results

ALGOS, ENVS, SEEDS = ["ppo", "a2c"], ["CartPole-v1"], [0, 1, 2]


@pytest.fixture(scope="module")
def lockstep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lockstep")
    run_experiment(grid(ALGOS, ENVS, SEEDS, **FAST), out, show_progress=False)
    return out


def test_grid_enumerates_algos_envs_and_seeds_with_the_overrides() -> None:
    specs = grid(["ppo", "a2c"], ["CartPole-v1", "Acrobot-v1"], range(2), max_epoch=3)
    assert [s.run_id for s in specs] == [
        f"{a}-{e}-s{s}"
        for a in ("ppo", "a2c")
        for e in ("CartPole-v1", "Acrobot-v1")
        for s in (0, 1)
    ]
    assert all(s.trainer.max_epoch == 3 for s in specs)
    tuned = RunSpec.tuned("a2c", "Acrobot-v1", seed=1).with_overrides({"max_epoch": 3})
    assert specs[-1] == tuned


@pytest.mark.parametrize(
    ("args", "overrides", "match"),
    [
        ((["nope"], ["CartPole-v1"], [0]), {}, "algo must be one of"),
        ((["ppo"], ["NoSuchEnv-v0"], [0]), {}, "not a registered gymnasium env"),
        ((["ppo"], ["CartPole-v1"], [0, 0]), {}, "seeds must not repeat"),
        ((["ppo"], ["CartPole-v1"], []), {}, "seeds must be a non-empty list"),
        ((["ppo"], ["CartPole-v1"], [-1]), {}, "seeds must be non-negative ints"),
        ((["ppo"], ["CartPole-v1"], [0]), {"lrr": 1.0}, r"grid run ppo-CartPole-v1-s0: unknown"),
    ],
)
def test_bad_grids_raise_value_errors_naming_the_input(
    args: tuple[list[str], list[str], list[int]], overrides: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        grid(*args, **overrides)


def test_each_run_writes_its_directory_and_the_experiment_lists_them(lockstep_dir: Path) -> None:
    index = json.loads((lockstep_dir / "experiment.json").read_text())
    ids = [f"{a}-CartPole-v1-s{s}" for a in ALGOS for s in SEEDS]
    assert index["runs"] == ids
    for run_id in ids:
        run_dir = lockstep_dir / run_id
        spec = RunSpec.from_file(run_dir / "spec.toml")
        assert spec.run_id == run_id and spec.trainer.max_epoch == 2
        assert (run_dir / "log.jsonl").is_file()
        assert sorted(p.name for p in (run_dir / "checkpoints").iterdir())[-1] == "epoch_000002"
        result = json.loads((run_dir / "result.json").read_text())
        tests = [
            json.loads(line)
            for line in (run_dir / "log.jsonl").read_text().splitlines()
            if json.loads(line)["scope"] == "test"
        ]
        assert result["status"] == "finished" and result["stop_reason"] == "max_epoch"
        assert result["steps"] == [float(r["step"]) for r in tests]
        assert result["test_returns"] == [r["test/returns_stat/mean"] for r in tests]


def test_load_experiment_gives_scores_and_curves_as_arrays(lockstep_dir: Path) -> None:
    experiment = load_experiment(lockstep_dir)
    assert experiment.algos == ALGOS and experiment.envs == ENVS
    scores, envs = experiment.scores("final")
    assert envs == ENVS and set(scores) == set(ALGOS)
    for algo in ALGOS:
        finals = [
            json.loads((lockstep_dir / f"{algo}-CartPole-v1-s{s}" / "result.json").read_text())[
                "test_returns"
            ][-1]
            for s in SEEDS
        ]
        np.testing.assert_array_equal(scores[algo][:, 0], finals)
        assert len(experiment.curves("CartPole-v1")[algo]) == len(SEEDS)
    best, _ = experiment.scores("best")
    assert np.all(best["ppo"] >= scores["ppo"])


def test_re_running_skips_finished_runs(lockstep_dir: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in lockstep_dir.glob("*/result.json")}
    run_experiment(grid(ALGOS, ENVS, SEEDS, **FAST), lockstep_dir, show_progress=False)
    assert {p: p.stat().st_mtime_ns for p in lockstep_dir.glob("*/result.json")} == before


def test_a_run_with_other_settings_in_the_same_directory_is_refused(lockstep_dir: Path) -> None:
    changed = grid(["ppo"], ENVS, [0], **{**FAST, "step_per_epoch": 128})
    with pytest.raises(ValueError, match=r"other settings \(trainer.step_per_epoch: 64 there"):
        run_experiment(changed, lockstep_dir, show_progress=False)


def test_a_failing_run_is_recorded_and_the_others_go_on(
    tmp_path: Path, lockstep_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import epochtrain.experiment.runner as runner

    real_open = runner.open_trainer

    def open_or_fail(run_dir: Path) -> object:
        if run_dir.name.endswith("-s1"):
            raise RuntimeError("boom")
        return real_open(run_dir)

    monkeypatch.setattr(runner, "open_trainer", open_or_fail)
    specs = grid(["ppo"], ENVS, SEEDS, **FAST)
    experiment = run_experiment(specs, tmp_path, show_progress=False)
    status = {r.run_id: (r.status, r.error) for r in experiment.runs}
    assert status["ppo-CartPole-v1-s1"] == ("failed", "RuntimeError: boom")
    assert status["ppo-CartPole-v1-s0"][0] == status["ppo-CartPole-v1-s2"][0] == "finished"
    with pytest.raises(ValueError, match=r"runs not finished: ppo-CartPole-v1-s1 \(failed\);"):
        experiment.scores()
    monkeypatch.setattr(runner, "open_trainer", real_open)  # the next attempt succeeds
    run_experiment(specs, tmp_path, show_progress=False)
    ppo = {k: v for k, v in results(lockstep_dir).items() if k.startswith("ppo")}
    assert results(tmp_path) == ppo


def test_load_experiment_refuses_empty_and_foreign_directories(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not an experiment directory"):
        load_experiment(tmp_path)
    (tmp_path / "experiment.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="is not an epochtrain experiment index"):
        load_experiment(tmp_path)


def test_run_experiment_refuses_bad_arguments(tmp_path: Path) -> None:
    specs = grid(["ppo"], ENVS, [0], **FAST)
    with pytest.raises(ValueError, match="backend must be one of"):
        run_experiment(specs, tmp_path, backend="threads")
    with pytest.raises(ValueError, match="workers must be a positive int"):
        run_experiment(specs, tmp_path, workers=0)
    with pytest.raises(ValueError, match="specs must be a non-empty list of RunSpec"):
        run_experiment([], tmp_path)
    with pytest.raises(ValueError, match="distinct run ids"):
        run_experiment(specs * 2, tmp_path)


@pytest.mark.slow
def test_the_process_backend_writes_the_same_results(tmp_path: Path, lockstep_dir: Path) -> None:
    specs = grid(ALGOS, ENVS, SEEDS, **FAST)
    run_experiment(specs, tmp_path, backend="processes", workers=2, show_progress=False)
    assert results(tmp_path) == results(lockstep_dir)


@pytest.mark.parametrize("backend", ["lockstep", "processes"])
def test_offline_runs_finish_on_either_backend(tmp_path: Path, backend: str) -> None:
    # an offline trainer has no train_collector: closing a run's envs must not fail it
    dataset = tmp_path / "random.buf"
    record_dataset(None, "CartPole-v1", 400, dataset, seed=0)
    specs = [
        RunSpec.tuned("bc", "CartPole-v1", seed=s).with_overrides(
            {
                "dataset": str(dataset),
                "max_epoch": 2,
                "step_per_epoch": 20,
                "num_test_envs": 1,
                "episode_per_test": 1,
            }
        )
        for s in (0, 1)
    ]
    out = tmp_path / "runs"
    run_experiment(specs, out, backend=backend, workers=2, show_progress=False)
    found = results(out)
    assert sorted(found) == [spec.run_id for spec in specs]
    for result in found.values():
        assert result["status"] == "finished", result.get("error")
        assert result["epochs"] == 2
        # a test per epoch, at the gradient step it followed (offline: no env steps)
        assert result["step_unit"] == "gradient_step"
        assert result["steps"] == [20.0, 40.0]
        assert isinstance(result["test_returns"], list) and len(result["test_returns"]) == 2


SWEEP_SCRIPT = """
import sys
from epochtrain.experiment import grid, run_experiment
if __name__ == "__main__":
    fast = {fast!r}
    run_experiment(grid({algos!r}, {envs!r}, {seeds!r}, **fast), sys.argv[1], show_progress=False)
"""


@pytest.mark.slow
def test_a_killed_sweep_resumes_to_the_same_results(tmp_path: Path, lockstep_dir: Path) -> None:
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP_SCRIPT.format(fast=FAST, algos=ALGOS, envs=ENVS, seeds=SEEDS))
    out = tmp_path / "exp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(out)], env=env)
    deadline = time.monotonic() + 120
    while not list(out.glob("*/checkpoints/epoch_000001/manifest.json")):
        assert proc.poll() is None, "the sweep ended before it could be killed"
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(list(out.glob("*/result.json"))) < len(ALGOS) * len(SEEDS)  # killed mid-way
    run_experiment(grid(ALGOS, ENVS, SEEDS, **FAST), out, show_progress=False)
    assert results(out) == results(lockstep_dir)


def test_ctrl_c_of_a_lockstep_sweep_closes_every_open_run_and_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from epochtrain.experiment import runner

    opened: list[Any] = []
    closed: list[Any] = []
    real_open = runner.open_trainer

    def open_trainer(run_dir: Path) -> Any:
        trainer = real_open(run_dir)
        opened.append(trainer)
        if len(opened) == 2:  # the second run's first epoch is interrupted
            trainer.register_op("epoch_start", interrupt)
        return trainer

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    def close_envs(trainer: Any) -> None:
        closed.append(trainer)
        real_close(trainer)

    real_close = runner.close_envs
    monkeypatch.setattr(runner, "open_trainer", open_trainer)
    monkeypatch.setattr(runner, "close_envs", close_envs)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(grid(ALGOS, ENVS, SEEDS, **FAST), tmp_path, show_progress=False)
    assert len(opened) == len(ALGOS) * len(SEEDS)  # lockstep opens every run first
    assert sorted(map(id, closed)) == sorted(map(id, opened))
    assert not list(tmp_path.glob("*/result.json"))  # none finished, none marked failed


def hold_lock(run_dir: Path, pid: int) -> str:
    """Write ``run_dir``'s checkpoint lock as process ``pid`` of this host holds it."""
    lock = run_dir / "checkpoints" / ".lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    record = {"pid": pid, "host": socket.gethostname(), "token": "t", "created": "now"}
    lock.write_text(json.dumps(record))
    return lock.read_text()


@pytest.mark.parametrize("backend", ["lockstep", "processes"])
def test_a_run_another_live_sweep_holds_is_skipped_and_left_untouched(
    tmp_path: Path, other_process: Any, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "HOLD_WAIT", 0.5)  # no other sweep will let it go
    held = tmp_path / "ppo-CartPole-v1-s0"
    lock = hold_lock(held, other_process.pid)
    specs = grid(["ppo"], ENVS, [0, 1], **FAST)
    with pytest.warns(
        UserWarning, match=rf"s0: in use by another sweep \(process {other_process.pid}"
    ):
        experiment = run_experiment(
            specs, tmp_path, backend=backend, workers=2, show_progress=False
        )
    assert sorted(p.name for p in held.rglob("*")) == [".lock", "checkpoints", "spec.toml"]
    assert (held / "checkpoints" / ".lock").read_text() == lock
    status = {r.run_id: (r.status, r.error) for r in experiment.runs}
    assert status["ppo-CartPole-v1-s0"] == (
        "running",
        f"in use by another sweep (process {other_process.pid} on host {socket.gethostname()!r})",
    )
    assert status["ppo-CartPole-v1-s1"][0] == "finished"


def test_a_run_another_sweep_locks_while_this_one_opens_it_is_skipped_not_failed(
    tmp_path: Path, other_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from epochtrain.experiment import runner

    real_open = runner.open_trainer

    def lose_the_lock_then_open(run_dir: Path) -> Any:
        # the other sweep takes the run after this one saw it free, before it opened it:
        # opening takes the lock before touching the run's files, and is refused
        hold_lock(run_dir, other_process.pid)
        return real_open(run_dir)

    monkeypatch.setattr(runner, "open_trainer", lose_the_lock_then_open)
    with pytest.warns(UserWarning, match="in use by another sweep"):
        experiment = run_experiment(grid(["ppo"], ENVS, [0], **FAST), tmp_path, show_progress=False)
    assert [r.status for r in experiment.runs] == ["running"]
    assert not (tmp_path / "ppo-CartPole-v1-s0" / "result.json").exists()


def test_the_wall_time_of_a_resumed_run_covers_every_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from epochtrain.experiment import runner

    real_open = runner.open_trainer

    def slow_then_interrupted(epoch: int) -> None:
        if epoch == 1:
            time.sleep(1.0)  # the first session's time, which the second must count too
        else:
            raise KeyboardInterrupt

    def open_trainer(run_dir: Path) -> Any:
        trainer = real_open(run_dir)
        trainer.register_op("epoch_start", slow_then_interrupted)
        return trainer

    specs = grid(["ppo"], ENVS, [0], **FAST)
    monkeypatch.setattr(runner, "open_trainer", open_trainer)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(specs, tmp_path, show_progress=False)
    monkeypatch.setattr(runner, "open_trainer", real_open)
    run_experiment(specs, tmp_path, show_progress=False)
    run_dir = tmp_path / "ppo-CartPole-v1-s0"
    result = json.loads((run_dir / "result.json").read_text())
    records = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    total_time = [r["info/total_time"] for r in records if "info/total_time" in r][-1]
    assert result["epochs"] == 2
    assert result["wall_time"] >= total_time >= 1.0


def test_a_run_whose_holder_dies_within_the_wait_is_run(tmp_path: Path) -> None:
    # the actors of a sweep whose driver was just killed die seconds later
    dying = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    reaper = threading.Thread(target=dying.wait)  # no zombie, which would look alive
    reaper.start()
    hold_lock(tmp_path / "ppo-CartPole-v1-s0", dying.pid)
    experiment = run_experiment(grid(["ppo"], ENVS, [0], **FAST), tmp_path, show_progress=False)
    reaper.join()
    assert [r.status for r in experiment.runs] == ["finished"]


def test_a_run_that_cannot_be_built_is_refused_before_any_run_or_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="action_space"):  # DQN: Discrete only
        specs = grid(["ppo", "dqn"], ["Pendulum-v1"], [0, 1], max_epoch=1)  # by RunSpec.tuned
        run_experiment(specs, tmp_path / "exp", show_progress=False)
    assert not (tmp_path / "exp").exists()  # PPO did not train first
    with pytest.raises(ValueError, match="algo 'bc' needs a dataset"):
        run_experiment(grid(["bc"], ENVS, [0], max_epoch=1), tmp_path / "exp", show_progress=False)
