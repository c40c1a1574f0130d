"""Reading an experiment back checks what its files say about themselves: the run ids of
``experiment.json`` are names inside the directory, a ``result.json`` belongs to the run of
its directory and has the field types epochtrain writes, and the runs of an algorithm on an
env differ only in their seed (also within one directory). Each refusal is one line naming
the file, what it says and the fix. The runs are set up without running (``prepare_runs``)
and given hand-written results."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from epochtrain.experiment import grid, load_experiment
from epochtrain.experiment.prepare import prepare_runs
from epochtrain.spec import RunSpec

ONE = {"max_epoch": 2, "step_per_epoch": 64}


def _result(spec: RunSpec, **changes: Any) -> dict[str, Any]:
    """The result.json epochtrain writes for a finished ``spec``, with ``changes``."""
    return {
        "format": "epochtrain-experiment",
        "version": 1,
        "run_id": spec.run_id,
        "algo": spec.algo,
        "env_id": spec.env_id,
        "seed": spec.seed,
        "step_unit": "env_step",
        "status": "finished",
        "stop_reason": "max_epoch",
        "epochs": 2,
        "steps": [64, 128],
        "test_returns": [10.0 + spec.seed, 20.0 + spec.seed],
        "error": None,
        "wall_time": 1.5,
        **changes,
    }


def _finished(out: Path, algos: list[str], envs: list[str], seeds: list[int], **over: Any) -> Path:
    """``out`` as a sweep of these runs leaves it, each run finished (hand-written result)."""
    for spec in grid(algos, envs, seeds, **{**ONE, **over}):
        prepare_runs([spec], out)
        (out / spec.run_id / "result.json").write_text(json.dumps(_result(spec)))
    return out


def _edit_index(out: Path, runs: list[str]) -> None:
    index = out / "experiment.json"
    index.write_text(json.dumps({**json.loads(index.read_text()), "runs": runs}))


def _refusal(*paths: Path) -> str:
    with pytest.raises(ValueError) as info:
        load_experiment(*paths)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_one_directory_holding_a_run_with_other_settings_is_refused(tmp_path: Path) -> None:
    algos, envs = ["ppo", "a2c"], ["CartPole-v1", "Acrobot-v1"]
    out = _finished(tmp_path / "exp", algos, envs, [0, 1])
    other = _finished(tmp_path / "other", ["ppo"], ["CartPole-v1"], [2], lr=0.01)
    shutil.copytree(other / "ppo-CartPole-v1-s2", out / "ppo-CartPole-v1-s2")
    runs = [spec.run_id for spec in grid(algos, envs, [0, 1])]
    _edit_index(out, [*runs, "ppo-CartPole-v1-s2"])
    # before: pooled as one sample of 3 seeds, without a word
    message = _refusal(out)
    assert "ppo-CartPole-v1-s0 and ppo-CartPole-v1-s2" in message
    assert "config.lr: 0.001 there, 0.01 here" in message
    assert repr(str(out)) in message and "delete the run directories" in message
    # the algos and envs of a sweep differ by design: without the stray run it loads
    _edit_index(out, runs)
    experiment = load_experiment(out)
    assert len(experiment.runs) == 8
    scores, loaded_envs = experiment.scores()
    assert loaded_envs == envs and scores["a2c"].tolist() == [[20.0, 20.0], [21.0, 21.0]]


@pytest.mark.parametrize(
    "entry", ["../other/ppo-CartPole-v1-s2", "/abs/ppo-CartPole-v1-s2", "..", ".", "", "a\\b"]
)
def test_an_index_entry_that_is_not_a_plain_run_id_is_refused(tmp_path: Path, entry: str) -> None:
    _finished(tmp_path / "other", ["ppo"], ["CartPole-v1"], [2])
    out = _finished(tmp_path / "exp", ["ppo"], ["CartPole-v1"], [0, 1])
    _edit_index(out, ["ppo-CartPole-v1-s0", "ppo-CartPole-v1-s1", entry])
    message = _refusal(out)
    assert repr(str(out / "experiment.json")) in message
    assert f"lists run {entry!r}" in message and "plain directory name" in message
    # a sweep into it (which would advise deleting that run) is refused alike
    with pytest.raises(ValueError, match="plain directory name"):
        prepare_runs(grid(["ppo"], ["CartPole-v1"], [0], **ONE), out)


def test_a_run_id_listed_twice_is_named_as_such(tmp_path: Path) -> None:
    out = _finished(tmp_path / "exp", ["ppo"], ["CartPole-v1"], [0, 1])
    _edit_index(out, ["ppo-CartPole-v1-s0", "ppo-CartPole-v1-s1", "ppo-CartPole-v1-s0"])
    message = _refusal(out)
    assert "more than one experiment directory" not in message
    assert "lists run 'ppo-CartPole-v1-s0' twice" in message and "remove the repeated" in message


def test_one_directory_given_twice_is_named_as_such(tmp_path: Path) -> None:
    out = _finished(tmp_path / "exp", ["ppo"], ["CartPole-v1"], [0])
    message = _refusal(out, out)
    assert "more than one experiment directory" not in message
    assert "given more than once" in message


IDENTITY_EDITS: list[tuple[str, dict[str, Any], str]] = [
    ("another algo", {"algo": "a2c", "run_id": "a2c-CartPole-v1-s1"}, "algo 'a2c'"),
    ("another seed", {"seed": 0, "run_id": "ppo-CartPole-v1-s0"}, "seed 0"),
    ("another env", {"env_id": "Acrobot-v1"}, "env_id 'Acrobot-v1'"),
    ("another run id", {"run_id": "ppo-CartPole-v1-s7"}, "run_id 'ppo-CartPole-v1-s7'"),
]


@pytest.mark.parametrize(
    ("change", "says"),
    [(c, s) for _, c, s in IDENTITY_EDITS],
    ids=[i for i, _, _ in IDENTITY_EDITS],
)
def test_a_result_of_another_run_is_refused_naming_its_file_and_directory(
    tmp_path: Path, change: dict[str, Any], says: str
) -> None:
    out = _finished(tmp_path / "exp", ["ppo"], ["CartPole-v1"], [0, 1])
    run_dir = out / "ppo-CartPole-v1-s1"
    spec = RunSpec.from_file(run_dir / "spec.toml")
    (run_dir / "result.json").write_text(json.dumps(_result(spec, **change)))
    message = _refusal(out)
    assert repr(str(run_dir / "result.json")) in message and says in message
    assert "ppo-CartPole-v1-s1" in message and "delete" in message
    assert "more than one experiment directory" not in message


def test_a_spec_of_another_run_in_a_run_directory_is_refused(tmp_path: Path) -> None:
    out = _finished(tmp_path / "exp", ["ppo"], ["CartPole-v1"], [0, 1])
    for name in ("spec.toml", "result.json"):
        shutil.copy(out / "ppo-CartPole-v1-s0" / name, out / "ppo-CartPole-v1-s1" / name)
    message = _refusal(out)
    assert repr(str(out / "ppo-CartPole-v1-s1" / "spec.toml")) in message
    assert "is the spec of run ppo-CartPole-v1-s0" in message
    assert "more than one experiment directory" not in message


TYPE_EDITS: list[tuple[str, Any, str]] = [
    ("stop_reason", 3, "'stop_reason' must be a string or null"),
    ("epochs", "2", "'epochs' must be an int >= 0"),
    ("epochs", -1, "'epochs' must be an int >= 0"),
    ("epochs", True, "'epochs' must be an int >= 0"),
    ("wall_time", "1.5", "'wall_time' must be a number >= 0 or null"),
    ("wall_time", -2.0, "'wall_time' must be a number >= 0 or null"),
    ("error", ["x"], "'error' must be a string or null"),
    ("step_unit", "steps", "'step_unit' must be 'env_step' or 'gradient_step'"),
]


@pytest.mark.parametrize(("key", "value", "message"), TYPE_EDITS)
def test_a_result_field_of_the_wrong_type_is_refused_naming_file_and_field(
    tmp_path: Path, key: str, value: Any, message: str
) -> None:
    out = _finished(tmp_path / "exp", ["ppo"], ["CartPole-v1"], [0])
    result = out / "ppo-CartPole-v1-s0" / "result.json"
    result.write_text(json.dumps({**json.loads(result.read_text()), key: value}))
    refusal = _refusal(out)
    assert repr(str(result)) in refusal and message in refusal


def test_a_result_field_that_is_missing_is_refused(tmp_path: Path) -> None:
    out = _finished(tmp_path / "exp", ["ppo"], ["CartPole-v1"], [0])
    result = out / "ppo-CartPole-v1-s0" / "result.json"
    data = json.loads(result.read_text())
    data.pop("stop_reason")
    result.write_text(json.dumps(data))
    assert "'stop_reason' must be a string or null" in _refusal(out)
