"""The dataset of an offline ``epochtrain train`` run from the command line: a new run's
``spec.toml`` names its dataset file by an absolute path, a run whose (relative) dataset is
not where its ``--resume`` or ``--config`` looks is told which file it was trained on, and
``collect --algo`` offers only the algorithms that collect their own data."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochtrain.cli import main
from epochtrain.registry import ALGORITHMS
from epochtrain.spec import RunSpec

QUIET = ["--no-progress", "--quiet"]
TINY = ["--max-epoch", "1", "--step-per-epoch", "5", "--episode-per-test", "1"]


def record(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A random CartPole dataset at ``path`` (a short one: 100 env steps)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    argv = ["collect", "--env", "CartPole-v1", "--random", "--steps", "100", "--out", str(path)]
    assert main(argv) == 0
    capsys.readouterr()


def old_run(project: Path) -> Path:
    """The run directory of a 1-epoch BC run started in ``project`` (the working directory)
    with ``--dataset data/random.buf`` by an epochtrain that kept the path relative: its
    spec.toml and its checkpoint's spec say ``dataset = "data/random.buf"``."""
    from epochtrain import make_trainer

    run_dir = Path("runs/CartPole-v1_bc_seed0_old")  # relative, as such a run wrote it
    spec = RunSpec.tuned("bc", "CartPole-v1", seed=0).with_overrides(
        {
            "dataset": "data/random.buf",
            "max_epoch": 1,
            "step_per_epoch": 5,
            "episode_per_test": 1,
            "show_progress": False,
            "logging.logdir": str(run_dir),
            "checkpoint_dir": str(run_dir / "checkpoints"),
        }
    )
    with make_trainer(spec) as trainer:
        trainer.run()
    spec.to_file(run_dir / "spec.toml")
    return project / run_dir


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_new_run_stores_its_dataset_file_absolute_and_a_minari_id_as_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec.toml kept ``--dataset data/random.buf`` as typed: ``--resume`` (or ``--config``)
    of the run from another directory then found no dataset."""
    pytest.importorskip("minari", reason="the minari extra is not installed")
    project = tmp_path / "project"
    record(project / "data" / "random.buf", capsys)
    monkeypatch.chdir(project)
    argv = ["train", "--algo", "bc", *TINY, *QUIET, "--logdir", "runs"]
    assert main([*argv, "--dataset", "data/random.buf"]) == 0
    (run_dir,) = (project / "runs").iterdir()
    spec = RunSpec.from_file(run_dir / "spec.toml")
    assert spec.dataset == str(project / "data" / "random.buf")

    monkeypatch.chdir(tmp_path)  # elsewhere: the run's files are found by their paths
    assert main(["train", "--resume", str(run_dir), "--max-epoch", "2", *QUIET]) == 0
    assert "resumed after epoch 1" in capsys.readouterr().out
    config = ["train", "--config", str(run_dir / "spec.toml"), "--logdir", "", *QUIET]
    assert main([*config, "--checkpoint-dir", "none"]) == 0

    # a Minari dataset is an id in Minari's own folder, not a path: kept as typed
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    collect = ["collect", "--env", "CartPole-v1", "--random", "--steps", "100"]
    assert main([*collect, "--format", "minari", "--out", "cartpole/random-v0"]) == 0
    argv = ["train", "--algo", "bc", *TINY, *QUIET, "--logdir", str(tmp_path / "m")]
    assert main([*argv, "--dataset", "minari:cartpole/random-v0"]) == 0
    (minari_run,) = (tmp_path / "m").iterdir()
    assert RunSpec.from_file(minari_run / "spec.toml").dataset == "minari:cartpole/random-v0"


def test_a_run_whose_relative_dataset_is_not_found_names_the_file_and_dataset_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said "--dataset data/random.buf does not exist: give a file recorded by
    `epochtrain collect ...`": the user typed no --dataset, and had the data already."""
    project = tmp_path / "project"
    record(project / "data" / "random.buf", capsys)
    monkeypatch.chdir(project)
    run_dir = old_run(project)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    before = sorted(p.name for p in (run_dir / "checkpoints").iterdir())

    assert main(["train", "--resume", str(run_dir), "--max-epoch", "2", *QUIET]) == 2
    err = one_error_line(capsys)
    assert f"--resume {run_dir}: the run was trained on the dataset data/random.buf" in err
    assert str(elsewhere / "data" / "random.buf") in err  # where it was looked for
    assert "pass --dataset PATH" in err and "epochtrain collect" not in err
    config = ["train", "--config", str(run_dir / "spec.toml"), "--logdir", "", *QUIET]
    assert main(config) == 2
    err = one_error_line(capsys)
    assert f"--config {run_dir / 'spec.toml'}: the spec names the dataset data/random.buf" in err
    assert "pass --dataset PATH" in err and "epochtrain collect" not in err
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == before

    # --dataset where the file is now continues the run; its spec then names it absolute
    moved = tmp_path / "moved.buf"
    (project / "data" / "random.buf").rename(moved)
    monkeypatch.chdir(tmp_path)
    resume = ["train", "--resume", str(run_dir), "--max-epoch", "2", *QUIET]
    assert main([*resume, "--dataset", "moved.buf"]) == 0
    assert "resumed after epoch 1" in capsys.readouterr().out
    assert RunSpec.from_file(run_dir / "spec.toml").dataset == str(moved)


def test_an_old_run_with_a_relative_dataset_resumes_from_the_directory_it_started_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its relative path is still read from the working directory, and once found is
    stored absolute (a later resume from elsewhere finds it)."""
    project = tmp_path / "project"
    record(project / "data" / "random.buf", capsys)
    monkeypatch.chdir(project)
    run_dir = old_run(project)
    assert main(["train", "--resume", "runs/CartPole-v1_bc_seed0_old", "--max-epoch", "2"]) == 0
    assert "resumed after epoch 1" in capsys.readouterr().out
    assert RunSpec.from_file(run_dir / "spec.toml").dataset == str(project / "data" / "random.buf")
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--resume", str(run_dir), "--max-epoch", "3", *QUIET]) == 0


@pytest.mark.parametrize("algo", ["bc", "cql", "td3bc"])
def test_collect_offers_only_online_algorithms_to_train_first(
    algo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``collect --algo td3bc`` was offered, then failed in the Python API's words ("set
    dataset='path/to/file' ... or pass buffer=")."""
    argv = ["collect", "--env", "Pendulum-v1", "--algo", algo, "--train-steps", "10"]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--steps", "10", "--out", str(tmp_path / "x.buf")])
    assert exited.value.code == 2
    err = one_error_line(capsys)
    assert f"argument --algo: invalid choice: '{algo}'" in err
    online = sorted(name for name, entry in ALGORITHMS.items() if entry.kind != "offline")
    assert "(choose from " + ", ".join(f"'{name}'" for name in online) + ")" in err
    assert "buffer=" not in err and not (tmp_path / "x.buf").exists()
