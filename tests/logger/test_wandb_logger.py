"""WandbLogger, offline: step metrics per scope, config, run id in checkpoints, resume.

Each test runs W&B in offline mode inside ``tmp_path`` and reads the local run files back
(``epochtrain.logger.wandb_files``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("wandb", reason="the wandb extra is not installed")

from epochtrain.extras import MissingExtraError
from epochtrain.logger import WandbLogger
from epochtrain.logger.wandb import STEP_METRICS
from epochtrain.logger.wandb_files import LocalRun, local_run_dirs, read_local_run, wandb_records
from epochtrain.stats import InfoStats
from tests.trainer.tiny import build

MP4 = bytes.fromhex("0000001c667479706973736f6d0000020069736f6d69736f32617663310000000866726565")
"""The first bytes of an mp4 (``ftyp`` box): W&B stores the file, it does not decode it."""


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")


def make(tmp_path: Path, **kwargs: Any) -> WandbLogger:
    return WandbLogger(project="tests", dir=tmp_path, mode="offline", **kwargs)


def finished(run_dir: Path, timeout: float = 20.0) -> LocalRun:
    """The run once its file is complete: W&B's service process may still be writing the
    ``.wandb`` file for a moment after ``run.finish()`` returns."""
    deadline = time.monotonic() + timeout
    while True:
        (path,) = run_dir.glob("run-*.wandb")
        kinds = {record.WhichOneof("record_type") for record in wandb_records(path)}
        if "exit" in kinds or time.monotonic() > deadline:
            return read_local_run(run_dir)
        time.sleep(0.05)


def runs(tmp_path: Path) -> list[LocalRun]:
    return [finished(d) for d in local_run_dirs(tmp_path / "wandb")]


def steps(runs: list[LocalRun], tag: str) -> list[int]:
    metric = STEP_METRICS[tag.split("/", 1)[0]]
    return [row[metric] for run in runs for row in run.history if tag in row]


def test_each_scope_is_plotted_against_its_own_step_metric(tmp_path: Path) -> None:
    with make(tmp_path, config={"algo": "dqn", "trainer": {"max_epoch": 3}}) as logger:
        logger.log_data("train", 1000, {"train/n_collected_steps": 1000.0})
        logger.log_data("update", 50, {"update/loss": 0.5})
        logger.log_data("train", 2000, {"train/n_collected_steps": 1000.0})
        logger.log_info_data(InfoStats(epoch=1, env_step=2000), 1)
    (run,) = runs(tmp_path)
    assert run.run_id == logger.run_id
    assert run.config["algo"] == "dqn" and run.config["trainer"] == {"max_epoch": 3}
    assert run.step_metrics == {f"{scope}/*": metric for scope, metric in STEP_METRICS.items()}
    assert steps([run], "train/n_collected_steps") == [1000, 2000]
    assert steps([run], "update/loss") == [50]
    assert [row["info/env_step"] for row in run.history if "info/env_step" in row] == [2000]
    # W&B's own step only grows, whatever the scopes' steps do
    own = [row["_step"] for row in run.history]
    assert own == sorted(own) and len(set(own)) == len(own)


def test_the_run_id_is_in_the_state_and_a_restored_logger_continues_that_run(
    tmp_path: Path,
) -> None:
    first = make(tmp_path)
    first.log_data("update", 10, {"update/loss": 1.0})
    state = first.state_dict()
    first.close()
    assert state["wandb_run_id"] == first.run_id
    second = make(tmp_path)
    second.load_state_dict(state)
    second.log_data("update", 20, {"update/loss": 2.0})
    second.close()
    assert second.run_id == first.run_id
    assert [r.run_id for r in runs(tmp_path)] == [first.run_id, first.run_id]


def test_a_resumed_trainer_writes_no_step_twice_even_after_a_crash(tmp_path: Path) -> None:
    """2 epochs, a checkpoint, a 3rd epoch that the resumed run repeats, then a 4th."""
    logger = make(tmp_path)
    trainer = build("off", max_epoch=4, logger=logger)
    next(trainer), next(trainer)
    trainer.save_checkpoint(tmp_path / "ckpt")
    next(trainer)  # logged, then the process "dies"
    logger.close()
    runs(tmp_path)  # wait until W&B's service has written the first process's file
    resumed_logger = make(tmp_path)
    resumed = build("off", max_epoch=4, logger=resumed_logger, resume_from=str(tmp_path / "ckpt"))
    resumed.run()
    resumed_logger.close()
    both = runs(tmp_path)
    assert len({run.run_id for run in both}) == 1 and len(both) == 2
    assert steps(both, "info/epoch") == [1, 2, 3, 4]
    assert steps(both[1:], "info/epoch") == [4]  # epoch 3 was already in the first process
    for tag in ("update/loss", "train/n_collected_steps", "test/returns_stat/mean"):
        points = steps(both, tag)
        assert points == sorted(set(points)), tag
        assert points[-1] == (
            resumed.state.gradient_step if tag == "update/loss" else resumed.state.env_step
        )


def test_a_video_is_logged_as_a_wandb_video_at_its_env_step(tmp_path: Path) -> None:
    video = tmp_path / "clip.mp4"
    video.write_bytes(MP4)
    with make(tmp_path) as logger:
        logger.log_video(video, 1000)
    (run,) = runs(tmp_path)
    (row,) = [row for row in run.history if "test/video" in row]
    assert row["test/env_step"] == 1000
    assert row["test/video"]["_type"] == "video-file"
    assert row["test/video"]["path"].endswith(".mp4")
    assert logger.written_step("test") == 1000


def test_a_resumed_logger_skips_a_video_at_a_step_the_run_has(tmp_path: Path) -> None:
    """Before, the re-run epoch's video was logged a second time (scalars were not)."""
    video = tmp_path / "clip.mp4"
    video.write_bytes(MP4)
    first = make(tmp_path)
    first.log_data("test", 500, {"test/returns_stat/mean": 1.0})
    state = first.state_dict()
    first.log_data("test", 1000, {"test/returns_stat/mean": 2.0})
    first.log_video(video, 1000)  # logged, then the process "dies"
    first.close()
    runs(tmp_path)
    second = make(tmp_path)
    second.load_state_dict(state)
    second.log_video(video, 1000)  # the resumed run's epoch again: W&B has it
    second.log_video(video, 1500)
    second.close()
    assert steps(runs(tmp_path), "test/video") == [1000, 1500]


def test_zipped_trainers_log_to_runs_of_their_own(tmp_path: Path) -> None:
    loggers = [make(tmp_path, config={"seed": seed}) for seed in (1, 2)]
    trainers = [
        build("off", max_epoch=2, logger=logger, torch_seed=seed)
        for seed, logger in zip((1, 2), loggers, strict=True)
    ]
    for _ in zip(*trainers, strict=True):
        pass
    for logger in loggers:
        logger.close()
    by_id = {run.run_id: run for run in runs(tmp_path)}
    assert set(by_id) == {logger.run_id for logger in loggers}
    for logger, trainer, seed in zip(loggers, trainers, (1, 2), strict=True):
        run = by_id[logger.run_id]
        assert run.config["seed"] == seed
        assert steps([run], "info/epoch") == [1, 2]
        assert steps([run], "update/loss")[-1] == trainer.info_stat().gradient_step


def test_a_checkpoint_from_another_logger_names_the_problem(tmp_path: Path) -> None:
    logger = make(tmp_path)
    with pytest.raises(ValueError, match="wandb_run_id"):
        logger.load_state_dict({"train": None, "test": None, "update": None, "info": None})
    logger.log_data("info", 1, {"info/epoch": 1.0})
    with pytest.raises(ValueError, match="already started"):
        logger.load_state_dict({**logger.state_dict(), "wandb_run_id": "other"})
    logger.close()


def test_bad_arguments_name_the_parameter(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode must be"):
        WandbLogger(mode="cloud")
    with pytest.raises(TypeError, match="config must be a mapping"):
        WandbLogger(config=[("a", 1)])


def test_without_wandb_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'epochtrain\[wandb\]'"):
        WandbLogger()


@pytest.mark.parametrize(("key", "mode"), [(None, None), ("short", None), (None, "offline")])
def test_online_without_a_valid_api_key_is_refused_at_construction(
    tmp_path: Path, key: str | None, mode: str | None
) -> None:
    # a process of its own: W&B keeps the mode it was first set up with for the process
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env |= {"HOME": str(tmp_path), "NETRC": str(tmp_path / "netrc"), "WANDB_SILENT": "true"}
    if key is not None:
        env["WANDB_API_KEY"] = key
    script = (
        "from epochtrain.logger import WandbLogger\n"
        f"WandbLogger(project='tests', dir={str(tmp_path)!r}, mode={mode!r})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    if mode == "offline":
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 1
    assert "ValueError: mode 'online' (WANDB_MODE or the default) needs a valid W&B API key" in (
        done.stderr
    )
    assert "`wandb login`, set WANDB_API_KEY, or pass mode='offline'" in done.stderr
    assert not (tmp_path / "wandb").exists()  # refused before anything was written


def test_a_process_set_up_offline_needs_no_key_unless_online_is_asked_for(
    tmp_path: Path,
) -> None:
    # A process of its own: W&B reads its mode from the environment once per process, when
    # it is first set up. In the test runner's process that may have happened in an earlier
    # test, or not at all (then this test set W&B up online, with no key, and failed alone).
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env |= {"HOME": str(tmp_path), "NETRC": str(tmp_path / "netrc"), "WANDB_SILENT": "true"}
    env |= {"WANDB_MODE": "offline", "WANDB_CONSOLE": "off"}
    script = f"""
import os
from epochtrain.logger import WandbLogger
with WandbLogger(project="tests", dir={str(tmp_path)!r}) as first:
    first.log_data("info", 1, {{"info/epoch": 1.0}})  # starts a run: W&B is set up offline
del os.environ["WANDB_MODE"]
WandbLogger(project="tests", dir={str(tmp_path)!r}).close()  # runs offline, as W&B would
try:
    WandbLogger(project="tests", dir={str(tmp_path)!r}, mode="online")
except ValueError as exc:
    print("refused:", exc)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "refused: mode 'online'" in done.stdout
    assert "set up offline in this process" in done.stdout
