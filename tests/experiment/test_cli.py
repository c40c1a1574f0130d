"""Tests of epochtrain.experiment.cli: the sweep and compare subcommands' functions."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from epochtrain.experiment import grid, run_experiment
from epochtrain.experiment.cli import (
    COMPARE_DESCRIPTION,
    SWEEP_DESCRIPTION,
    add_compare_parser,
    add_sweep_parser,
    parse_seeds,
    run_compare,
    run_sweep,
)
from tests.experiment.settings import FAST

FAST_FLAGS = [
    "--max-epoch", "2", "--step-per-epoch", "64", "--step-per-collect", "64",
    "--repeat-per-collect", "1", "--num-envs", "1", "--num-test-envs", "1",
    "--episode-per-test", "1",
]  # fmt: skip


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="epochtrain")
    sub = parser.add_subparsers(dest="command", required=True)
    add_sweep_parser(sub)
    add_compare_parser(sub)
    return parser.parse_args(argv)


@pytest.fixture(scope="module")
def experiment_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exp")
    run_experiment(grid(["ppo", "a2c"], ["CartPole-v1"], [0, 1], **FAST), out, show_progress=False)
    return out


def test_seeds_are_lists_ranges_or_both() -> None:
    assert parse_seeds(["0-3"]) == [0, 1, 2, 3]
    assert parse_seeds(["5", "1,2", "2-3"]) == [5, 1, 2, 3]
    with pytest.raises(ValueError, match="--seeds 'x'"):
        parse_seeds(["x"])
    with pytest.raises(ValueError, match="range is empty"):
        parse_seeds(["3-1"])


def test_sweep_runs_the_grid_its_flags_describe(
    tmp_path: Path, experiment_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse(
        [
            "sweep",
            "--algo",
            "ppo",
            "--seeds",
            "0",
            "--out",
            str(tmp_path),
            "--no-progress",
            *FAST_FLAGS,
        ]
    )
    assert run_sweep(args) == 0
    assert "1/1 runs finished" in capsys.readouterr().out
    made = json.loads((tmp_path / "ppo-CartPole-v1-s0" / "result.json").read_text())
    same = json.loads((experiment_dir / "ppo-CartPole-v1-s0" / "result.json").read_text())
    assert made["test_returns"] == same["test_returns"]  # the flags built the same spec


def test_sweep_reports_bad_input_in_one_line_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse(["sweep", "--algo", "ppo", "--env", "NoSuchEnv-v0", "--out", str(tmp_path)])
    assert run_sweep(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("epochtrain sweep: error: --env NoSuchEnv-v0 ") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workers", "0"], "--workers must be at least 1, got 0"),
        (["--workers", "2"], "--backend lockstep runs every run in this process: drop --workers"),
    ],
)
def test_workers_is_checked_in_the_clis_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    args = parse(["sweep", "--algo", "ppo", "--out", str(tmp_path / "out"), *flags])
    assert run_sweep(args) == 2
    err = capsys.readouterr().err
    assert err == f"epochtrain sweep: error: {err.split('error: ', 1)[1]}" and message in err
    assert not (tmp_path / "out").exists()


def test_compare_prints_the_table_and_writes_the_report(
    tmp_path: Path, experiment_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib", reason="the figures need the optional extra epochtrain[plot]")
    args = parse(
        [
            "compare",
            str(experiment_dir),
            "--reps",
            "200",
            "--out",
            str(tmp_path),
            "--random",
            "CartPole-v1=20",
        ]
    )
    assert run_compare(args) == 0
    out = capsys.readouterr().out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| CartPole-v1 |")]
    assert [row[1] for row in rows] == ["ppo", "a2c", "20.0"]  # two algorithms, then random
    assert rows[0][-1] == "2 |" and rows[2][2] == "475.0 |"  # runs; the reward threshold
    assert "| ppo vs a2c |" in out
    assert (tmp_path / "report.md").read_text().strip() == out.strip()
    for name in ("sample_efficiency", "aggregate_intervals", "performance_profiles"):
        assert (tmp_path / f"{name}.png").stat().st_size > 5_000
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # written whole through temporary files beside them: none is left over
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_compare_refuses_an_empty_or_foreign_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_compare(parse(["compare", str(tmp_path)])) == 2
    assert "is not an experiment directory" in capsys.readouterr().err
    assert run_compare(parse(["compare", str(tmp_path / "missing")])) == 2


def test_a_result_that_cannot_be_written_ends_the_sweep_in_one_line_and_the_same_command_finishes(
    tmp_path: Path,
    experiment_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import errno

    from epochtrain.cli import main
    from epochtrain.experiment import runs

    write_json = runs.write_json

    def disk_full_at_results(path: Path, data: object) -> None:
        if path.name == runs.RESULT_FILE:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        write_json(path, data)

    argv = ["sweep", "--algo", "ppo", "--seeds", "0-1", "--out", str(tmp_path), "--no-progress"]
    with monkeypatch.context() as patch:
        patch.setattr(runs, "write_json", disk_full_at_results)
        assert main([*argv, *FAST_FLAGS]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("epochtrain: error: [Errno 28] No space left on device: "), err
    assert err[-1].endswith(
        "; finished runs and checkpoints are kept; continue with the same command: "
        f"epochtrain sweep --algo ppo --seeds 0-1 --out {tmp_path} --no-progress "
        + " ".join(FAST_FLAGS)
    ), err[-1]
    assert not list(tmp_path.glob("*/result.json")) and list(tmp_path.glob("*/checkpoints/*"))

    assert main([*argv, *FAST_FLAGS]) == 0  # space freed: the same command finishes
    for run_id in ("ppo-CartPole-v1-s0", "ppo-CartPole-v1-s1"):
        made = json.loads((tmp_path / run_id / "result.json").read_text())
        same = json.loads((experiment_dir / run_id / "result.json").read_text())
        assert made["test_returns"] == same["test_returns"]


def _with_a_failed_run(experiment_dir: Path, tmp_path: Path, run_id: str) -> Path:
    import shutil

    out = tmp_path / "exp"
    shutil.copytree(experiment_dir, out)
    path = out / run_id / "result.json"
    result = json.loads(path.read_text())
    path.write_text(json.dumps({**result, "status": "failed", "error": "RuntimeError: boom"}))
    return out


def test_compare_names_a_failed_run_by_its_id_and_the_options_that_leave_it_out(
    tmp_path: Path, experiment_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _with_a_failed_run(experiment_dir, tmp_path, "a2c-CartPole-v1-s1")
    assert run_compare(parse(["compare", str(out), "--reps", "100"])) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "epochtrain compare: error: runs not finished: a2c-CartPole-v1-s1 (failed)"
    )
    assert "--env, --algo or --seeds" in err and "envs=" not in err and err.count("\n") == 1
    common = ["compare", str(out), "--reps", "100", "--random", "CartPole-v1=20"]
    assert run_compare(parse([*common, "--algo", "ppo"])) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| CartPole-v1 |")]
    assert [row.split(" | ")[1] for row in rows] == ["ppo", "20.0"]
    assert run_compare(parse([*common, "--seeds", "0"])) == 0  # seed 0 of both algorithms
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| CartPole-v1 |")]
    assert [row.split(" | ")[1] for row in rows[:2]] == ["ppo", "a2c"]
    assert all(row.endswith("| 1 |") for row in rows[:2])
    assert run_compare(parse([*common, "--algo", "dqn"])) == 2
    assert "--algo ['dqn']: the experiment has ['ppo', 'a2c']" in capsys.readouterr().err


def test_compare_checks_reps_and_out_first_in_one_line_with_status_2(
    tmp_path: Path,
    experiment_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from epochtrain.experiment import report

    def no_bootstrap(*args: object, **kwargs: object) -> None:
        raise AssertionError("the bootstrap started before the input was checked")

    monkeypatch.setattr(report, "summarize_tasks", no_bootstrap)
    afile = tmp_path / "afile"
    afile.write_text("mine")
    for extra, message in (
        (["--reps", "1"], "--reps must be an int of at least 100"),
        (["--out", str(afile)], f"--out {str(afile)!r} is a file"),
        (["--out", str(afile / "r")], f"--out {str(afile / 'r')!r} is under {str(afile)!r}"),
    ):
        assert run_compare(parse(["compare", str(experiment_dir), *extra])) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"epochtrain compare: error: {message}") and err.count("\n") == 1
    assert afile.read_text() == "mine"


@pytest.mark.parametrize("command", ["sweep", "compare"])
def test_sweep_and_compare_help_describe_their_command(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    expected = SWEEP_DESCRIPTION if command == "sweep" else COMPARE_DESCRIPTION
    assert " ".join(expected.split()) in text
    opening = {"sweep": "Run every (algorithm, env, seed) of", "compare": "Compare the finished"}
    assert "[-h] " in text and opening[command] in text
    assert text.index(opening[command]) < text.index("options:")  # the description


def test_a_spec_file_swept_on_another_env_takes_that_envs_tuned_settings_it_leaves_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from epochtrain import RunSpec
    from epochtrain.experiment import cli

    file = tmp_path / "acrobot.toml"
    file.write_text('algo = "ppo"\nenv_id = "Acrobot-v1"\n[config]\nent_coef = 0.02\n')
    swept: list[RunSpec] = []

    def capture(specs: list[RunSpec], *args: object, **kwargs: object) -> None:
        swept.extend(specs)
        raise KeyboardInterrupt  # stops the sweep before it writes anything

    monkeypatch.setattr(cli, "run_experiment", capture)
    argv = ["sweep", "--config", str(file), "--env", "CartPole-v1", "Acrobot-v1"]
    with pytest.raises(KeyboardInterrupt):
        run_sweep(parse([*argv, "--seeds", "0", "--out", str(tmp_path / "out")]))
    cartpole, acrobot = swept
    # the file's own setting on both envs; the rest is each env's tuned spec: CartPole's
    # threshold (475, not Acrobot's -100), its 8 envs and its trainer settings
    assert cartpole.config.to_dict()["ent_coef"] == acrobot.config.to_dict()["ent_coef"] == 0.02
    tuned = RunSpec.tuned("ppo", "CartPole-v1", seed=0)
    assert cartpole.stop_at == tuned.stop_at == 475.0 and acrobot.stop_at == -100.0
    assert cartpole.trainer == tuned.trainer and cartpole.num_envs == tuned.num_envs == 8
    assert acrobot == RunSpec.from_file(file).with_overrides({"seed": 0})


def test_compare_seeds_leaves_out_another_seed_of_other_settings_and_names_unknown_seeds(
    tmp_path: Path, experiment_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from epochtrain.spec import RunSpec

    out = Path(shutil.copytree(experiment_dir, tmp_path / "exp"))
    spec = out / "a2c-CartPole-v1-s1" / "spec.toml"  # a run of 3 epochs copied in by hand
    RunSpec.from_file(spec).with_overrides({"max_epoch": 3}).to_file(spec)
    common = ["compare", str(out), "--reps", "100", "--random", "CartPole-v1=20"]
    assert run_compare(parse(common)) == 2
    assert "different settings (trainer.max_epoch: 2 there, 3 here)" in capsys.readouterr().err
    # before: refused with the same error, as the seeds were chosen after every run was read
    assert run_compare(parse([*common, "--seeds", "0"])) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| CartPole-v1 |")]
    assert [row.split(" | ")[1] for row in rows[:2]] == ["ppo", "a2c"]
    assert all(row.endswith("| 1 |") for row in rows[:2])
    assert run_compare(parse([*common, "--seeds", "0", "4-5"])) == 2
    err = capsys.readouterr().err
    assert (
        err == "epochtrain compare: error: --seeds [4, 5]: the experiment has seeds [0, 1]; "
        "choose among them\n"
    )
