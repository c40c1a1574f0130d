"""Reading an experiment back: a result or index edited by hand, written by a newer
epochtrain or by someone else is refused naming the file and the entry, before anything
is changed."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochtrain.experiment import grid, load_experiment, run_experiment
from epochtrain.experiment.results import Experiment, RunResult
from epochtrain.experiment.runs import read_test_curve
from epochtrain.spec import RunSpec
from tests.experiment.settings import FAST

CURVE = np.array([1.0]), np.array([5.0])


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("finished")
    run_experiment(grid(["ppo"], ["CartPole-v1"], [0], **FAST), out, show_progress=False)
    return out


@pytest.fixture
def experiment(finished: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "exp"))


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


RESULT_EDITS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("no seed", lambda d: d.pop("seed"), "'seed' must be an int"),
    ("returns as text", lambda d: d.update(test_returns=["abc"]), "'test_returns' must be a list"),
    ("a step too many", lambda d: d.update(steps=[*d["steps"], 1e9]), "steps but 2 test_returns"),
    ("unknown status", lambda d: d.update(status="done"), "'status' must be 'finished' or"),
    ("algo a number", lambda d: d.update(algo=3), "'algo' must be a string"),
    ("newer version", lambda d: d.update(version=2), "format version 2, this epochtrain reads 1"),
    ("another format", lambda d: d.update(format="sb3"), "is not an epochtrain run result"),
    ("a NaN return", lambda d: d.update(test_returns=[1.0, math.nan]), "NaN or infinite .* run"),
    ("steps unsorted", lambda d: d.update(steps=d["steps"][::-1]), "steps do not increase"),
]


@pytest.mark.parametrize(
    ("change", "message"), [(c, m) for _, c, m in RESULT_EDITS], ids=[i for i, _, _ in RESULT_EDITS]
)
def test_a_result_edited_by_hand_or_from_elsewhere_is_refused_naming_the_file(
    experiment: Path, change: Callable[[dict[str, Any]], None], message: str
) -> None:
    result = experiment / "ppo-CartPole-v1-s0" / "result.json"
    _edit(result, change)
    with pytest.raises(ValueError, match=message) as info:
        load_experiment(experiment)
    assert str(result) in str(info.value)


def test_an_index_of_a_newer_epochtrain_is_refused_by_readers_and_left_as_it_is(
    experiment: Path,
) -> None:
    index = experiment / "experiment.json"
    _edit(index, lambda d: d.update(version=2))
    before = index.read_bytes()
    with pytest.raises(ValueError, match="upgrade epochtrain"):
        load_experiment(experiment)
    with pytest.raises(ValueError, match="upgrade epochtrain"):
        run_experiment(grid(["ppo"], ["CartPole-v1"], [0], **FAST), experiment)
    assert index.read_bytes() == before
    _edit(index, lambda d: d.update(version=1, runs="ppo-CartPole-v1-s0"))
    with pytest.raises(ValueError, match="'runs' must be a list of run ids"):
        load_experiment(experiment)


def test_a_log_with_foreign_lines_gives_the_test_curve_of_its_test_records(tmp_path: Path) -> None:
    lines = [
        {"scope": "test", "step": 64, "test/returns_stat/mean": 20.0},
        [1, 2],
        {"scope": "test", "test/returns_stat/mean": 99.0},  # no step
        {"scope": "train", "step": 64, "train/returns_stat/mean": 11.0},
        {"scope": "test", "step": 128, "test/returns_stat/mean": 31.5},
    ]
    text = "\n".join(json.dumps(x) for x in lines) + '\n{"scope": "te'  # a torn last line
    (tmp_path / "log.jsonl").write_text(text)
    assert read_test_curve(tmp_path) == ([64.0, 128.0], [20.0, 31.5])


def test_unfinished_names_every_hole_of_the_score_matrix() -> None:
    def run(algo: str, env: str, seed: int, status: Any = "finished") -> RunResult:
        return RunResult(f"{algo}-{env}-s{seed}", algo, env, seed, status, *CURVE)

    experiment = Experiment(
        (
            run("ppo", "CartPole-v1", 0),
            run("ppo", "CartPole-v1", 1, "failed"),
            run("ppo", "Acrobot-v1", 0),
            run("dqn", "Acrobot-v1", 0),
            run("dqn", "Acrobot-v1", 1, "running"),
        )
    )
    assert experiment.unfinished() == [
        "ppo-CartPole-v1-s1 (failed)",
        "ppo-Acrobot-v1-s1 (no run)",
        "dqn-CartPole-v1-s0 (no run)",
        "dqn-CartPole-v1-s1 (no run)",
        "dqn-Acrobot-v1-s1 (running)",
    ]
    assert experiment.unfinished(["CartPole-v1"]) == [
        "ppo-CartPole-v1-s1 (failed)",
        "dqn (no run on CartPole-v1)",
    ]
    with pytest.raises(ValueError, match=r"runs not finished: ppo-CartPole-v1-s1 \(failed\), "):
        experiment.scores()
    complete = Experiment(tuple(r for r in experiment.runs if r.seed == 0 and r.algo == "ppo"))
    assert complete.unfinished() == []
    scores, envs = complete.scores()
    assert envs == ["CartPole-v1", "Acrobot-v1"] and scores["ppo"].tolist() == [[5.0, 5.0]]


def test_directories_merge_only_runs_that_differ_in_their_seed(tmp_path: Path) -> None:
    run_experiment(grid(["ppo"], ["CartPole-v1"], [0], **FAST), tmp_path / "a", show_progress=False)
    run_experiment(grid(["ppo"], ["CartPole-v1"], [1], **FAST), tmp_path / "b", show_progress=False)
    longer = {**FAST, "max_epoch": 3}
    run_experiment(
        grid(["ppo"], ["CartPole-v1"], [2], **longer), tmp_path / "c", show_progress=False
    )
    merged = load_experiment(tmp_path / "a", tmp_path / "b")
    assert [r.run_id for r in merged.runs] == ["ppo-CartPole-v1-s0", "ppo-CartPole-v1-s1"]
    # before: pooled as one sample of 2 and 3 epochs, without a word
    with pytest.raises(
        ValueError, match=r"with different settings \(trainer.max_epoch: 2 there, 3 here\)"
    ):
        load_experiment(tmp_path / "a", tmp_path / "c")
    with pytest.raises(
        ValueError, match=r"runs ppo-CartPole-v1-s1 in .* and ppo-CartPole-v1-s2 in"
    ):
        load_experiment(tmp_path / "b", tmp_path / "c")


def test_seeds_choose_the_runs_before_they_are_compared_so_another_seeds_settings_do_not_matter(
    tmp_path: Path,
) -> None:
    out = tmp_path / "exp"
    run_experiment(grid(["ppo"], ["CartPole-v1"], [0, 1, 2], **FAST), out, show_progress=False)
    other = out / "ppo-CartPole-v1-s2"  # copied in by hand from a sweep of 3 epochs
    RunSpec.from_file(other / "spec.toml").with_overrides({"max_epoch": 3}).to_file(
        other / "spec.toml"
    )
    with pytest.raises(ValueError, match=r"different settings \(trainer.max_epoch: 2 there, 3"):
        load_experiment(out)
    (other / "result.json").write_text("{damaged")  # a run left out is not read either
    # before: the same error, as every run was read and compared before the seeds were chosen
    chosen = load_experiment(out, seeds=[1, 0])
    assert [(r.run_id, r.status) for r in chosen.runs] == [
        ("ppo-CartPole-v1-s0", "finished"),
        ("ppo-CartPole-v1-s1", "finished"),
    ]
    assert chosen.scores()[0]["ppo"].shape == (2, 1)
    assert [r.seed for r in load_experiment(out, seeds=range(2)).runs] == [0, 1]
    with pytest.raises(ValueError, match=r"^seeds \[7\]: the experiment has seeds \[0, 1, 2\]"):
        load_experiment(out, seeds=[0, 7])
    with pytest.raises(ValueError, match=r"^--seeds \[7\]: the experiment has seeds \[0, 1, 2\]"):
        load_experiment(out, seeds=[7], seeds_name="--seeds")
    not_seeds: list[Any] = [[-1], ["0"], [True], [], 3]
    for bad in not_seeds:
        with pytest.raises(ValueError, match=r"^seeds must be a (non-empty )?list of ints >= 0"):
            load_experiment(out, seeds=bad)
