"""The ``epochtrain`` command: help, errors with status 2, and a short real run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from epochtrain.cli import main


def test_help_lists_every_option_with_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["train", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in ["--algo", "--env", "--seed", "--max-epoch", "--logdir", "--no-progress"]:
        assert option in out
    assert "default: CartPole-v1" in out and "default: runs" in out


@pytest.mark.parametrize("command", ["train", "collect", "eval"])
def test_help_states_each_default_once_and_never_none(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())  # undo the help's line wrapping
    assert "(default: None)" not in out
    assert "(default: the algo's tuned value) (default" not in out
    for entry in out.split(" --")[1:]:
        assert entry.count("(default:") <= 1, entry


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["train", "--algo", "nope"], "--algo"),
        (["train"], "--algo"),
        (["train", "--algo", "ppo", "--seed", "x"], "--seed"),
        (["train", "--algo", "ppo", "--bogus"], "--bogus"),
        (["fly"], "fly"),
    ],
)
def test_bad_options_exit_2_with_one_line(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and fragment in err


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--algo", "ppo", "--max-epoch", "0"], "max_epoch"),
        (["--algo", "ppo", "--env", "NoSuchEnv-v0"], "--env NoSuchEnv-v0 is not"),
        (["--algo", "dqn", "--env", "Pendulum-v1"], "action_space"),
        (["--algo", "ppo", "--device", "cuda"], "device"),
        (["--algo", "ppo", "--seed", "-1"], "seed"),
    ],
)
def test_bad_option_value_exits_2_before_training(
    extra: list[str], fragment: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["train", *extra, "--logdir", str(tmp_path)])
    assert code == 2
    captured = capsys.readouterr()
    assert len(captured.err.strip().splitlines()) == 1 and fragment in captured.err
    assert "Epoch" not in captured.out
    assert not list(tmp_path.iterdir())  # no run directory is left behind


def test_short_run_writes_tensorboard_logs(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "epochtrain",
            "train",
            "--algo",
            "ppo",
            "--max-epoch",
            "1",
            "--step-per-epoch",
            "512",
            "--logdir",
            str(tmp_path),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Epoch #1:" in result.stdout
    assert "mean test return" in result.stdout
    assert list(tmp_path.rglob("events.out.tfevents.*"))
    assert "Run directory (spec.toml, TensorBoard logs): " in result.stdout


def test_the_closing_line_names_what_the_run_directory_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "--algo", "ppo", "--max-epoch", "1", "--step-per-epoch", "256"]
    quiet = ["--logdir", str(tmp_path), "--no-progress", "--quiet"]
    assert main([*argv, *quiet, "--set", 'loggers=["jsonl", "csv"]']) == 0
    out = capsys.readouterr().out
    (run_dir,) = tmp_path.iterdir()
    assert f"Run directory (spec.toml, log.csv, log.jsonl): {run_dir}\n" in out
    assert "TensorBoard" not in out


def test_config_prints_the_tuned_spec_with_set_applied(capsys: pytest.CaptureFixture[str]) -> None:
    import tomllib

    from epochtrain import RunSpec

    argv = ["config", "--algo", "ppo", "--set", "lr=3e-4", "--set", "trainer.batch_size=128"]
    assert main([*argv, "--seed", "2", "--set", "hidden=[32, 32]"]) == 0
    printed = RunSpec.from_dict(tomllib.loads(capsys.readouterr().out))
    expected = RunSpec.tuned("ppo", "CartPole-v1", seed=2).with_overrides(
        {"lr": 3e-4, "trainer.batch_size": 128, "hidden": (32, 32), "verbose": True}
    )  # verbose: the commands' default (COMMAND_DEFAULTS), which train runs
    assert printed == expected


def test_config_file_is_the_base_and_flags_apply_over_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from epochtrain import RunSpec

    RunSpec.tuned("dqn", "CartPole-v1").with_overrides({"lr": 5e-4}).to_file(tmp_path / "r.toml")
    assert main(["config", "--config", str(tmp_path / "r.toml"), "--max-epoch", "7", "--json"]) == 0
    spec = RunSpec.from_dict(json.loads(capsys.readouterr().out))
    assert spec.algo == "dqn" and spec.config.lr == 5e-4 and spec.trainer.max_epoch == 7


@pytest.mark.parametrize(
    ("setting", "fragment"),
    [
        ("lrr=1", "unknown setting 'lrr'"),
        ("lr=-1", "--set lr=-1: must be float"),
        ("lr", "NAME=VALUE"),
    ],
)
def test_bad_set_exits_2_with_one_line_naming_the_setting(
    setting: str, fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "--algo", "ppo", "--set", setting]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and fragment in err


def test_help_lists_every_setting_from_the_dataclasses(capsys: pytest.CaptureFixture[str]) -> None:
    from epochtrain import ALGORITHMS
    from epochtrain.config import fields_info

    with pytest.raises(SystemExit):
        main(["config", "--help"])
    out = capsys.readouterr().out
    for entry in ALGORITHMS.values():
        for info in fields_info(entry.config_cls):
            assert f"config.{info.name} = " in out, (entry.name, info.name)
    assert "trainer.update_per_step = 1.0" in out and "--batch-size" in out
    # a None default reads as --set writes it, not as the string "none"
    assert "trainer.resume_from = none " in out and "'none'" not in out


def test_help_lists_the_top_level_settings_and_their_flags_state_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from epochtrain import RunSpec
    from epochtrain.config import fields_info

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    sections = {"algo", "env_id", "config", "trainer", "buffer", "logging"}
    top = [info for info in fields_info(RunSpec) if info.name not in sections]
    assert {info.name for info in top} >= {"num_envs", "stop_at", "device", "dataset"}
    for info in top:
        assert f"\n  {info.name} = " in out, info.name
    assert (
        "\n  num_envs = the tuned spec's: 1 for most algorithms" in out
        and "\n  device = 'cpu'  [str]" in out
    )
    threshold = "the env's reward_threshold (none if it has none), as in the tuned spec"
    assert f"\n  stop_at = {threshold}" in out
    flat = " ".join(out.split())  # undo the help's line wrapping
    num_envs = (
        "Training envs (0 for offline algorithms). (int (>= 0); "
        "default: the tuned spec's: 1 for most algorithms"
    )
    assert f"--num-envs NUM_ENVS {num_envs}" in flat
    assert f"(float or None; default: {threshold}" in flat
    assert "(str or None; default: none)" in flat and "(str; default: 'cpu')" in flat


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--episode-per-collect", "2"], "buffer_size (--buffer-size) must be given with"),
        (["--step-per-epoch", "0"], "step_per_epoch (--step-per-epoch) must be int"),
    ],
)
def test_a_refused_setting_names_its_flag(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "--algo", "ppo", *argv, "--max-epoch", "1", "--logdir", ""]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and fragment in err


def test_train_writes_the_resolved_spec_into_the_run_directory(tmp_path: Path) -> None:
    from epochtrain import RunSpec

    argv = ["train", "--algo", "ppo", "--max-epoch", "1", "--step-per-epoch", "256"]
    assert main([*argv, "--set", "num_envs=2", "--logdir", str(tmp_path), "--no-progress"]) == 0
    (spec_file,) = tmp_path.glob("*/spec.toml")
    spec = RunSpec.from_file(spec_file)
    assert spec.num_envs == 2 and spec.trainer.max_epoch == 1
    assert spec.logging.logdir == str(spec_file.parent)


def test_runs_started_in_the_same_second_get_a_directory_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shell loop of ``&`` jobs over learning rates starts its runs within a second: each
    keeps its own directory and spec.toml (they shared one, and its checkpoint lock
    failed the second run)."""
    import time

    from epochtrain import RunSpec

    monkeypatch.setattr(time, "strftime", lambda fmt, *t: "20261126-120000")
    argv = ["train", "--algo", "ppo", "--max-epoch", "1", "--step-per-epoch", "256"]
    for lr in ("0.001", "0.0003", "0.0001"):
        assert main([*argv, "--set", f"lr={lr}", "--logdir", str(tmp_path), "--quiet"]) == 0
    name = "CartPole-v1_ppo_seed0_20261126-120000"
    dirs = sorted(tmp_path.iterdir(), key=lambda p: (len(p.name), p.name))
    assert [d.name for d in dirs] == [name, f"{name}-2", f"{name}-3"]
    specs = [RunSpec.from_file(d / "spec.toml") for d in dirs]
    assert [s.config.lr for s in specs] == [0.001, 0.0003, 0.0001]
    assert [s.trainer.checkpoint_dir for s in specs] == [str(d / "checkpoints") for d in dirs]


@pytest.mark.parametrize(
    ("setting", "fragment"),
    [("algo=dqn", "choose it with --algo dqn"), ("env_id=Acrobot-v1", "with --env Acrobot-v1")],
)
@pytest.mark.parametrize("command", ["train", "config"])
def test_set_of_algo_or_env_names_the_cli_option_not_the_python_api(
    command: str, setting: str, fragment: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    logdir = ["--logdir", str(tmp_path)] if command == "train" else []
    assert main([command, "--algo", "ppo", "--set", setting, *logdir]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and fragment in err
    assert "RunSpec" not in err
    assert not list(tmp_path.iterdir())


def test_set_with_an_sb3_name_suggests_the_epochtrain_setting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["config", "--algo", "ppo", "--set", "n_epochs=4"]) == 2
    err = capsys.readouterr().err
    assert "unknown setting 'n_epochs'" in err and "(did you mean 'repeat_per_collect'?)" in err


@pytest.mark.parametrize("option", ["--logdir", "--checkpoint-dir"])
def test_a_directory_under_a_file_exits_2_with_one_line_naming_the_option(
    option: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("x")
    code = main(["train", "--algo", "ppo", option, str(tmp_path / "file" / "x")])
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert f"{option} '{tmp_path / 'file' / 'x'}' is under" in err


SHORT = ["--algo", "ppo", "--step-per-epoch", "64", "--set", "step_per_collect=64"]


def one_epoch_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[list[str], Path]:
    """The quiet options logging to ``tmp_path`` and the run directory of a 1-epoch run."""
    quiet = ["--logdir", str(tmp_path), "--no-progress", "--quiet"]
    assert main(["train", *SHORT, "--max-epoch", "1", *quiet]) == 0
    (run_dir,) = tmp_path.iterdir()
    capsys.readouterr()
    return quiet, run_dir


def test_a_warning_is_one_line_for_the_user_of_a_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    quiet, run_dir = one_epoch_run(tmp_path, capsys)
    short = SHORT
    # resuming with more epochs warns that a setting changed
    assert main(["train", *short, "--max-epoch", "2", *quiet, "--resume", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert "epochtrain: warning: resuming" in err and "max_epoch" in err
    assert "UserWarning" not in err and ".py:" not in err


def test_resuming_with_a_changed_setting_names_the_flags_to_drop(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from epochtrain.cli_train import _changeable_on_resume

    quiet, run_dir = one_epoch_run(tmp_path, capsys)
    changed = ["--algo", "ppo", "--step-per-epoch", "128", "--set", "lr=5e-4"]
    assert main(["train", *changed, "--max-epoch", "2", *quiet, "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "trainer.step_per_epoch: saved 64, now 128" in err
    assert "drop --set lr=5e-4, --step-per-epoch (a resumed run may change only " in err
    assert "RunSpec" not in err and "manifest" not in err
    # the options a resume may change are those the trainer accepts as changed
    allowed = _changeable_on_resume()
    assert f"may change only {', '.join(allowed)});" in err
    assert {"--max-epoch", "--stop-at", "--on-nonfinite", "--device", "--num-test-envs"} <= set(
        allowed
    )
    assert "--step-per-epoch" not in allowed and "--checkpoint-dir" in allowed


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (["--set", "repeat_per_collect=3"], "drop --set repeat_per_collect=3 ("),
        (["--set", "trainer.repeat_per_collect=3"], "drop --set trainer.repeat_per_collect=3 ("),
        (["--repeat-per-collect", "3"], "drop --repeat-per-collect ("),
        (["--set", "normalize_advantage=false"], "drop --set normalize_advantage=false ("),
        (["--test-in-train"], "drop --test-in-train ("),
        (["--config", "changed.toml"], "drop --config {dir}/changed.toml ("),
    ],
)
def test_a_refused_resume_names_the_option_as_the_user_typed_it(
    change: list[str], named: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from epochtrain import RunSpec

    quiet, run_dir = one_epoch_run(tmp_path / "runs", capsys)
    (saved,) = run_dir.glob("spec.toml")
    RunSpec.from_file(saved).with_overrides({"repeat_per_collect": 3}).to_file(
        tmp_path / "changed.toml"
    )
    change = [word.replace("changed.toml", str(tmp_path / "changed.toml")) for word in change]
    code = main(["train", "--algo", "ppo", *change, *quiet, "--resume", str(run_dir)])
    assert code == 2
    err = capsys.readouterr().err
    assert named.format(dir=tmp_path) in err, err


def test_the_docs_list_the_options_a_resume_may_change() -> None:
    from epochtrain.cli_train import _changeable_on_resume

    page = Path(__file__).resolve().parents[1] / "docs" / "checkpointing.md"
    text = " ".join(page.read_text().split())
    start = text.index("a resumed run may change only")
    listed = text[start : text.index(")", start)]
    for option in _changeable_on_resume():
        assert f"`{option}`" in listed, option


def test_none_on_a_flag_sets_none_and_is_not_taken_for_an_absent_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["config", "--algo", "ppo", "--stop-at", "None", "--keep-last", "none"]) == 0
    printed = capsys.readouterr().out
    # written, not left out: a spec file without stop_at stops at the env's threshold, 475.0
    assert 'stop_at = "none"' in printed and 'keep_last = "none"' in printed
    assert main(["config", "--algo", "ppo", "--checkpoint-dir", "None"]) == 0
    assert "checkpoint_dir" not in capsys.readouterr().out  # not a directory named None
    assert main(["config", "--algo", "ppo"]) == 0
    printed = capsys.readouterr().out
    assert "stop_at = 475.0" in printed and "keep_last = 3" in printed


def test_an_off_policy_run_without_a_replay_capacity_exits_2_naming_buffer_size(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["config", "--algo", "dqn", "--buffer-size", "none"]) == 2
    err = capsys.readouterr().err
    assert "buffer.buffer_size (--buffer-size) must be set for the off-policy algo 'dqn'" in err


def test_no_verbose_hides_the_epoch_lines(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--no-verbose`` was overwritten by ``verbose = not --quiet``: the lines were printed."""
    argv = ["train", *SHORT, "--max-epoch", "1", "--logdir", "", "--no-progress", "--no-verbose"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Epoch #1:" not in out and "Finished (max_epoch)" in out


def test_checkpoint_dir_none_writes_no_checkpoints(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--checkpoint-dir none`` (help: "None: never") wrote the run directory's checkpoints."""
    quiet = ["--logdir", str(tmp_path), "--no-progress", "--quiet"]
    assert main(["train", *SHORT, "--max-epoch", "1", *quiet, "--checkpoint-dir", "none"]) == 0
    (run_dir,) = tmp_path.iterdir()
    assert not (run_dir / "checkpoints").exists()
    assert "Checkpoints:" not in capsys.readouterr().out


def test_a_run_directorys_spec_as_config_starts_a_new_run_with_checkpoints_of_its_own(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The spec.toml of a run directory names that run's checkpoint_dir: a new run from it
    (``--config RUN/spec.toml --seed 1``) was refused at its first epoch with exit status 1,
    leaving a run directory behind."""
    from epochtrain.checkpoint import find_checkpoints

    quiet, run_dir = one_epoch_run(tmp_path, capsys)
    before = {p.name: p.stat().st_mtime_ns for p in (run_dir / "checkpoints").iterdir()}
    assert main(["train", "--config", str(run_dir / "spec.toml"), "--seed", "1", *quiet]) == 0
    (new_run,) = set(tmp_path.iterdir()) - {run_dir}
    assert [p.name for p in find_checkpoints(new_run / "checkpoints")] == ["epoch_000001"]
    assert {p.name: p.stat().st_mtime_ns for p in (run_dir / "checkpoints").iterdir()} == before


def test_the_spec_of_a_resumed_run_as_config_starts_a_new_run_not_a_resume(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A resumed run's spec.toml holds its resume_from: ``--config`` of it resumed the old
    run again, writing into the old run's checkpoints and logging into the new directory."""
    quiet, run_dir = one_epoch_run(tmp_path, capsys)
    assert main(["train", *SHORT, "--max-epoch", "2", *quiet, "--resume", str(run_dir)]) == 0
    old = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    capsys.readouterr()
    config = ["train", "--config", str(run_dir / "spec.toml"), "--max-epoch", "1"]
    assert main([*config, "--logdir", str(tmp_path), "--no-progress"]) == 0
    first = capsys.readouterr().out.splitlines()[0]  # the file's verbose = false: no epoch line
    assert "1 epochs x" in first and "resumed after" not in first  # from scratch
    (new_run,) = set(tmp_path.iterdir()) - {run_dir}
    assert sorted(p.name for p in (new_run / "checkpoints").iterdir()) == ["epoch_000001"]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == old


def test_a_new_run_into_a_checkpoint_dir_holding_checkpoints_exits_2_before_any_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It was refused by the trainer at its first epoch: exit status 1, and the run
    directory with its spec.toml was left behind."""
    ckpts = str(tmp_path / "ck")
    quiet = ["--logdir", str(tmp_path / "runs"), "--no-progress", "--quiet"]
    argv = ["train", *SHORT, "--max-epoch", "1", *quiet, "--checkpoint-dir", ckpts]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert f"'{ckpts}' (--checkpoint-dir) holds the checkpoints of another run" in err
    assert f"epochtrain train --resume {ckpts}" in err
    assert len(list((tmp_path / "runs").iterdir())) == 1  # no second run directory


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_resume_of_a_path_that_is_no_directory_says_so(
    kind: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A typo in ``--resume`` was told that its run stopped before its first checkpoint."""
    path = tmp_path / "nope"
    if kind == "file":
        path.write_text("x")
    assert main(["train", "--resume", str(path), "--logdir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    what = "does not exist" if kind == "missing" else "is a file"
    assert len(err.strip().splitlines()) == 1 and f"--resume {path} {what}: pass" in err
    assert "stopped before" not in err


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ([], "--algo bc learns from a dataset: give --dataset FILE"),
        (["--dataset", "nope.buf"], "--dataset nope.buf does not exist"),
    ],
)
def test_an_offline_algo_without_its_dataset_names_the_option(
    extra: list[str], fragment: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The error was the Python API's: "set dataset='path/to/file' ... or pass
    buffer=ReplayBuffer.load(path)"."""
    assert main(["train", "--algo", "bc", *extra, "--logdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and fragment in err
    assert "epochtrain collect --env CartPole-v1" in err and "buffer=" not in err
    assert not list(tmp_path.iterdir())


def test_resuming_a_run_that_has_ended_warns_that_nothing_was_trained(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It printed "Finished" as if it had trained on."""
    quiet, run_dir = one_epoch_run(tmp_path, capsys)
    assert main(["train", *quiet, "--resume", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert "epochtrain: warning: the checkpoint's run had already ended at epoch 1" in err
    assert "pass a larger --max-epoch" in err
    assert main(["train", *quiet, "--max-epoch", "2", "--resume", str(run_dir)]) == 0
    assert "already ended" not in capsys.readouterr().err


def test_the_commands_help_shows_no_docstring_markup(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "The epochtrain command (also python -m epochtrain)" in out


@pytest.mark.parametrize("command", ["eval", "collect"])
def test_a_seed_out_of_range_exits_2_naming_seed(
    command: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``eval --seed -1`` ended in a traceback from the env's reset; ``collect --seed -1``
    printed gymnasium's words without the option."""
    if command == "eval":
        _, run_dir = one_epoch_run(tmp_path, capsys)
        argv = ["eval", str(run_dir), "--episodes", "1"]
    else:
        argv = ["collect", "--env", "CartPole-v1", "--random", "--steps", "10"]
        argv += ["--out", str(tmp_path / "d.buf")]
    assert main([*argv, "--seed", "-1"]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.strip().splitlines()) == 1 and "--seed" in captured.err
    assert "mean return" not in captured.out


def test_collect_on_an_unknown_env_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It ended in gymnasium's traceback."""
    argv = ["collect", "--env", "NoSuchEnv-v0", "--random", "--steps", "10"]
    assert main([*argv, "--out", str(tmp_path / "d.buf")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--env NoSuchEnv-v0 is not a registered" in err


def test_collect_to_a_path_under_a_file_exits_2_before_recording(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It recorded first, then failed with "[Errno 17] File exists"."""
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "d.buf"
    argv = ["collect", "--env", "CartPole-v1", "--random", "--steps", "10", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert f"--out '{out}' is under '{tmp_path / 'afile'}', a file" in err


def test_collect_to_a_folder_that_cannot_be_written_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as for a user not root
    argv = ["collect", "--env", "CartPole-v1", "--random", "--steps", "10"]
    assert main([*argv, "--out", str(tmp_path / "d.buf")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--out" in err and "not writable" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["logdir", "logging.logdir"])
def test_set_logdir_on_train_exits_2_naming_the_logdir_option(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It was replaced by the run directory under --logdir without a word."""
    mine = tmp_path / "mine"
    argv = ["train", *SHORT, "--max-epoch", "1", "--logdir", str(tmp_path / "runs")]
    assert main([*argv, "--no-progress", "--set", f"{name}={mine}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"--set {name}={mine}" in err
    assert "--logdir DIR" in err and "--logdir '' for no logs" in err
    assert not list(tmp_path.iterdir())  # before any work: no run directory


def test_set_logdir_on_a_resumed_run_exits_2_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    quiet, run_dir = one_epoch_run(tmp_path, capsys)
    resume = ["train", *quiet, "--max-epoch", "2", "--resume", str(run_dir)]
    assert main([*resume, "--set", f"logdir={tmp_path / 'mine'}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "logs into its own run directory" in err
    assert not (tmp_path / "mine").exists()


@pytest.mark.parametrize("name", ["resume_from", "trainer.resume_from"])
def test_resume_with_set_resume_from_exits_2_asking_for_one(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--resume silently won over --set resume_from=CKPT (of another run): it continued
    the --resume run's directory."""
    quiet, run_dir = one_epoch_run(tmp_path, capsys)
    before = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    resume = ["train", *quiet, "--max-epoch", "2", "--resume", str(run_dir)]
    assert main([*resume, "--set", f"{name}={run_dir / 'checkpoints' / before[-1]}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--set resume_from both name" in err
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == before


def test_td3bc_on_discrete_actions_is_refused_for_its_actions_before_asking_for_a_dataset(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It asked for --dataset first, which the user would record only to be refused."""
    argv = ["train", "--algo", "td3bc", "--env", "CartPole-v1", "--logdir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "td3bc is for continuous actions" in err
    assert "--dataset" not in err
    assert not list(tmp_path.iterdir())


def test_an_algo_in_capitals_suggests_its_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["train", "--algo", "PPO"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.rstrip().endswith("(did you mean 'ppo'?)")


@pytest.mark.parametrize(
    ("env", "fragments"),
    [
        ("ALE/Pong-v5", ["pip install ale-py", "'ale_py:ALE/Pong-v5'", "import ale_py"]),
        ("Nowhere/Thing-v0", ["namespace 'Nowhere'", "'<its module>:Nowhere/Thing-v0'"]),
    ],
)
def test_an_env_in_a_namespace_not_registered_names_its_package_and_the_module_form(
    env: str, fragments: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It said "Namespace ALE not found ... use an id such as 'CartPole-v1'"."""
    assert main(["train", "--algo", "ppo", "--env", env, "--logdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert all(fragment in err for fragment in fragments), err
    assert "CartPole-v1" not in err


@pytest.mark.parametrize("command", ["train", "config", "collect", "eval"])
def test_help_is_plain_text_without_docstring_markup(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    for markup in ["``", ":func:", ":class:", ":data:", ":mod:", ":meth:", "`"]:
        assert markup not in out, markup


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["train", "--algo", "ppo", "--device", "tpu"],
            "epochtrain: error: --device must be a torch device such as 'cpu' or 'cuda:0', "
            "got 'tpu'",
        ),
        (
            ["train", "--algo", "ppo", "--env", "NoSuchEnv-v0"],
            "epochtrain: error: --env NoSuchEnv-v0 is not a registered gymnasium env",
        ),
        (
            ["train", "--algo", "ppo", "--env", "no_such_module:Foo-v0"],
            "epochtrain: error: --env no_such_module:Foo-v0: the module 'no_such_module'",
        ),
        (
            ["train", "--algo", "ppo", "--seed", "-1"],
            "epochtrain: error: --seed must be int (>= 0 and <= 4294967295), got -1: give "
            "--seed within",
        ),
        (
            ["train", "--algo", "ppo", "--set", "device=tpu"],
            "epochtrain: error: --device must be a torch device",
        ),
        (
            [
                "collect",
                "--env",
                "NoSuchEnv-v0",
                "--random",
                "--steps",
                "10",
                "--out",
                "{tmp}/x.buf",
            ],
            "epochtrain: error: --env NoSuchEnv-v0 is not a registered gymnasium env",
        ),
    ],
)
def test_errors_name_the_options_not_the_python_parameters(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = [word.replace("{tmp}", str(tmp_path)) for word in argv]
    assert main([*argv, *(["--logdir", str(tmp_path)] if argv[0] == "train" else [])]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line), err
    assert "device=" not in err and "env_id" not in err and "Params.seed" not in err
    assert list(tmp_path.iterdir()) == []  # refused before any run directory


def test_a_reader_that_closes_stdout_early_ends_the_command_quietly() -> None:
    """`epochtrain compare DIR | head` ended in a BrokenPipeError traceback (and a second
    one at the interpreter's exit): now the status a shell gives SIGPIPE, 141, and no
    traceback."""
    argv = [sys.executable, "-m", "epochtrain", "config", "--algo", "ppo", "--env", "CartPole-v1"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the command writes
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err
