"""Settings a run cannot use (a buffer size for an offline algorithm, a priority exponent
without prioritized replay, a test-in-train for an offline algorithm): refused when given in
code or on the command line, a warning when a spec file or dict holds them (it may have run
before: it still loads and runs as it did)."""

from __future__ import annotations

import re
import tomllib
import warnings
from pathlib import Path
from typing import Any

import pytest

from epochtrain import ALGORITHMS, PRESETS, OfflineParams, RunSpec, make_trainer, spec_data
from epochtrain.cli import main
from epochtrain.dataset import record_dataset
from epochtrain.spec import BufferSpec
from tests.test_spec_defaults import older_toml

OFFLINE = sorted(name for name, entry in ALGORITHMS.items() if entry.kind == "offline")
NOT_OFFLINE = sorted(name for name, entry in ALGORITHMS.items() if entry.kind != "offline")
ENV_OF = {"bc": "CartPole-v1", "td3bc": "Pendulum-v1", "cql": "Pendulum-v1"}
"""An env each offline algorithm can act on (td3bc: Box actions only)."""

IGNORED_OFFLINE = [("buffer_size", 1000), ("test_in_train", True)]
"""Settings of no use to an offline algorithm, each with a value away from its default."""
PRIORITY = [("priority_alpha", 0.3), ("priority_beta", 0.9)]
"""Prioritized-replay settings away from their defaults (0.6, 0.4)."""


def env_of(algo: str) -> str:
    return ENV_OF.get(algo, "CartPole-v1")


# ------------------------------------------------------------------ refused in code
@pytest.mark.parametrize("algo", OFFLINE)
@pytest.mark.parametrize(("name", "value"), IGNORED_OFFLINE)
def test_a_setting_an_offline_algorithm_cannot_use_is_refused_naming_it_and_the_fix(
    algo: str, name: str, value: Any
) -> None:
    spec = RunSpec.tuned(algo, env_of(algo))
    with pytest.raises(ValueError, match=rf"\.{name}={value!r} has no effect: '{algo}' is an"):
        spec.with_overrides({name: value})
    with pytest.raises(ValueError, match=rf"offline algorithm.*; drop {name}$"):
        make_trainer(algo, env_of(algo), **{name: value})


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
@pytest.mark.parametrize(("name", "value"), PRIORITY)
def test_a_priority_setting_without_prioritized_replay_is_refused_for_every_algorithm(
    algo: str, name: str, value: float
) -> None:
    spec = RunSpec.tuned(algo, env_of(algo))
    assert not spec.buffer.prioritized_replay
    fix = "turn prioritized_replay on" if spec.entry.kind == "offpolicy" else "drop"
    with pytest.raises(ValueError, match=rf"buffer\.{name}={value} has no effect: .*{fix}"):
        spec.with_overrides({name: value})


def test_priority_settings_apply_with_prioritized_replay_and_their_defaults_never_count() -> None:
    spec = RunSpec.tuned("dqn", "CartPole-v1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        per = spec.with_overrides(
            {"prioritized_replay": True, "priority_alpha": 0.3, "priority_beta": 0.9}
        )
        assert per.buffer.priority_alpha == 0.3 and spec_data.ignored_settings(per) == []
        # a default given explicitly changes nothing, so it is no mistake
        spec.with_overrides({"priority_alpha": 0.6, "priority_beta": 0.4})
        RunSpec.tuned("bc", "CartPole-v1").with_overrides(
            {"buffer_size": None, "test_in_train": False}
        )
    with pytest.raises(ValueError, match=r"priority_alpha=0\.3"):
        spec.with_overrides({"priority_alpha": 0.3})


def test_a_spec_built_with_a_section_that_holds_an_ignored_setting_is_refused() -> None:
    with pytest.raises(ValueError, match=r"buffer\.buffer_size=1000 has no effect: 'bc'"):
        RunSpec(algo="bc", env_id="CartPole-v1", buffer=BufferSpec(buffer_size=1000))
    with pytest.raises(ValueError, match=r"trainer\.test_in_train=True has no effect: 'cql'"):
        RunSpec(algo="cql", env_id="Pendulum-v1", trainer=OfflineParams(test_in_train=True))
    both = BufferSpec(buffer_size=10, priority_alpha=0.1, priority_beta=1.0)
    with pytest.raises(ValueError, match=r"priority_alpha=0\.1 .*; also, .*priority_beta=1\.0"):
        RunSpec(algo="ppo", env_id="CartPole-v1", buffer=both)


def test_turning_prioritized_replay_off_warns_of_the_priority_settings_left_behind() -> None:
    per = RunSpec.tuned("dqn", "CartPole-v1").with_overrides(
        {"prioritized_replay": True, "priority_alpha": 0.3}
    )
    with pytest.warns(
        UserWarning,
        match=r"priority_alpha=0\.3 is ignored from now on: .*; set priority_alpha to its default",
    ):
        off = per.with_overrides({"prioritized_replay": False})
    assert off.buffer.priority_alpha == 0.3


@pytest.mark.parametrize(
    ("algo", "env_id"), sorted({*PRESETS, *((a, env_of(a)) for a in ALGORITHMS)})
)
def test_no_default_or_tuned_spec_holds_an_ignored_setting(algo: str, env_id: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for spec in (RunSpec.default(algo, env_id), RunSpec.tuned(algo, env_id)):
            assert spec_data.ignored_settings(spec) == []
            assert RunSpec.from_dict(tomllib.loads(spec.to_toml())) == spec  # no warning


# ------------------------------------------------------------------ a warning in a file
def file_with(text: str, section: str, line: str) -> str:
    """A spec file's ``text`` with ``line`` (``name = value``) as that setting of ``section``
    (replacing the one there, or added if the file left it out)."""
    head, _, rest = text.partition(f"[{section}]\n")
    name = line.partition(" =")[0]
    lines = [old for old in rest.split("\n") if not old.startswith(f"{name} =")]
    return head + f"[{section}]\n" + "\n".join([line, *lines])


@pytest.mark.parametrize("older", [False, True], ids=["to_toml", "older_to_toml"])
@pytest.mark.parametrize(
    ("algo", "section", "line", "name"),
    [
        ("bc", "buffer", "buffer_size = 1000", "buffer.buffer_size"),
        ("cql", "trainer", "test_in_train = true", "trainer.test_in_train"),
        ("dqn", "buffer", "priority_alpha = 0.3", "buffer.priority_alpha"),
        ("ppo", "buffer", "priority_beta = 0.9", "buffer.priority_beta"),
    ],
)
def test_a_saved_spec_holding_an_ignored_setting_loads_with_a_warning_and_keeps_it(
    algo: str, section: str, line: str, name: str, older: bool, tmp_path: Path
) -> None:
    spec = RunSpec.tuned(algo, env_of(algo))
    written = file_with(spec.to_toml(), section, line)
    # the to_toml of earlier versions left its Nones out (buffer_size too, for bc)
    path = tmp_path / "spec.toml"
    path.write_text(file_with(older_toml(spec), section, line) if older else written)
    with pytest.warns(
        UserWarning, match=rf"^{re.escape(str(path))}: {name} = .* is ignored"
    ) as record:
        loaded = RunSpec.from_file(path)
    assert len(record) == 1
    assert tomllib.loads(loaded.to_toml()) == tomllib.loads(written)  # as it was written
    with warnings.catch_warnings():  # changing other settings neither warns nor refuses
        warnings.simplefilter("error")
        moved = loaded.with_overrides({"seed": 3, "checkpoint_dir": str(tmp_path)})
        assert loaded.replace(device="cpu") == loaded
    assert spec_data.ignored_settings(moved)[0].name == name


def test_a_bc_run_saved_with_a_buffer_size_still_runs_and_resumes_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = tmp_path / "data.buf"
    record_dataset(None, "CartPole-v1", 300, dataset, seed=0)
    short = {"max_epoch": 2, "step_per_epoch": 20, "episode_per_test": 2, "stop_at": None}
    plain = RunSpec.tuned("bc", "CartPole-v1").with_overrides(
        {**short, "dataset": str(dataset), "show_progress": False}
    )
    saved = tmp_path / "old.toml"
    saved.write_text(file_with(plain.to_toml(), "buffer", "buffer_size = 1000"))
    with pytest.warns(UserWarning, match="buffer_size = 1000 is ignored"):
        old = RunSpec.from_file(saved)

    def returns(spec: RunSpec) -> list[float]:
        with make_trainer(spec) as trainer:
            tests = [stats.test_collect_stat for stats in trainer]
        return [float(t.returns.mean()) for t in tests if t is not None]

    assert returns(old) == returns(plain)
    # the command line runs it, saves it as it was and resumes it, each warning on one line
    logs = tmp_path / "runs"
    quiet = ["--logdir", str(logs), "--no-progress", "--quiet"]
    assert main(["train", "--config", str(saved), "--max-epoch", "1", *quiet]) == 0
    err = capsys.readouterr().err
    assert err.count("epochtrain: warning: ") == 1 and len(err.strip().splitlines()) == 1
    assert "buffer.buffer_size = 1000 is ignored" in err
    (run_dir,) = logs.iterdir()
    assert "buffer_size = 1000" in (run_dir / "spec.toml").read_text()
    assert main(["train", "--resume", str(run_dir), "--max-epoch", "2", *quiet]) == 0
    captured = capsys.readouterr()
    assert "buffer.buffer_size = 1000 is ignored" in captured.err and "error" not in captured.err
    assert "Finished (max_epoch) after 2 epochs" in captured.out


# ------------------------------------------------------------------ the command line
@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (
            ["--algo", "bc", "--buffer-size", "1000"],
            ["buffer.buffer_size=1000 has no effect: 'bc' is an offline", "(--buffer-size)"],
        ),
        (
            ["--algo", "dqn", "--priority-alpha", "0.3"],
            ["priority_alpha=0.3 has no effect", "(--prioritized-replay)", "(--priority-alpha)"],
        ),
        (
            ["--algo", "ppo", "--set", "priority_beta=0.9"],
            ["priority_beta=0.9 has no effect: 'ppo' is an on-policy", "drop priority_beta"],
        ),
        (
            ["--algo", "cql", "--env", "Pendulum-v1", "--test-in-train"],
            ["test_in_train=True has no effect", "drop test_in_train (--test-in-train)"],
        ),
    ],
)
@pytest.mark.parametrize("command", ["train", "config"])
def test_a_flag_the_run_would_ignore_exits_2_with_one_line(
    command: str,
    argv: list[str],
    fragments: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    extra = ["--logdir", str(tmp_path), "--no-progress"] if command == "train" else []
    assert main([command, *argv, *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith("epochtrain: error: ")
    for fragment in fragments:
        assert fragment in captured.err, captured.err
    assert not list(tmp_path.iterdir())


def test_the_flags_that_make_a_priority_setting_count_are_accepted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["config", "--algo", "dqn", "--prioritized-replay", "--priority-alpha", "0.3"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and RunSpec.from_dict(tomllib.loads(captured.out)).buffer == (
        BufferSpec(buffer_size=100_000, prioritized_replay=True, priority_alpha=0.3)
    )
    assert main(["config", "--algo", "dqn", "--priority-alpha", "0.3"]) == 2
