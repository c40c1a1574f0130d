"""What a resume restores and what it may leave out (epochtrain.trainer.state)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from epochtrain import make_trainer
from tests.trainer.test_base import comparable
from tests.trainer.tiny import build

SMALL = dict(
    max_epoch=2, step_per_epoch=64, warmup_steps=32, stop_fn=None, show_progress=False, seed=0
)


@pytest.mark.parametrize("change", [{"num_test_envs": 2}, {"episode_per_test": 2}])
def test_a_resume_with_fewer_test_envs_trains_as_the_uninterrupted_run(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    tests = dict(num_test_envs=3, episode_per_test=3)
    full = [comparable(s) for s in make_trainer("dqn", "CartPole-v1", **SMALL, **tests)]
    first = make_trainer(
        "dqn", "CartPole-v1", **{**SMALL, "max_epoch": 1}, **tests, checkpoint_dir=str(tmp_path)
    )
    first.run()
    del first  # lets go of the checkpoint_dir, as a finished process does
    gc.collect()
    with pytest.warns(UserWarning, match="changed settings"):
        resumed = make_trainer(
            "dqn", "CartPole-v1", **SMALL, **{**tests, **change}, resume_from=str(tmp_path)
        )
    assert resumed.test_collector is not None and resumed.test_collector.num_envs == 2
    (epoch_2,) = [comparable(s) for s in resumed]
    # the test envs are reset by every test step: training is the uninterrupted run's
    for part in ("epoch", "train_collect_stat", "training_stat"):
        assert epoch_2[part] == full[1][part]
    tested = epoch_2["test_collect_stat"]["n_collected_episodes"]
    assert tested == resumed.params.episode_per_test


def test_a_resume_with_the_same_test_envs_restores_their_collector_state(tmp_path: Path) -> None:
    trainer = build("off", max_epoch=3)
    next(trainer)
    path = trainer.save_checkpoint(tmp_path / "ckpt")
    resumed = build("off", max_epoch=3, resume_from=path)
    assert resumed.test_collector is not None and trainer.test_collector is not None
    saved, restored = trainer.test_collector.state_dict(), resumed.test_collector.state_dict()
    assert saved["ep_return"].tolist() == restored["ep_return"].tolist()
    assert saved["ep_len"].tolist() == restored["ep_len"].tolist()


def _stopped_by_stop_fn(tmp_path: Path) -> None:
    first = build("off", max_epoch=3, checkpoint_dir=tmp_path, stop_fn=lambda best: True)
    assert [s.epoch for s in first] == [1] and first.stop_reason == "stop_fn"
    del first
    gc.collect()


@pytest.mark.parametrize("stop_fn", [None, lambda best: best > 1e9])
def test_a_run_ended_by_stop_fn_goes_on_when_the_resumed_goal_is_not_reached(
    tmp_path: Path, stop_fn: Any
) -> None:
    full = [comparable(s) for s in build("off", max_epoch=3)]
    _stopped_by_stop_fn(tmp_path)
    resumed = build(
        "off", max_epoch=3, checkpoint_dir=tmp_path, resume_from=tmp_path, stop_fn=stop_fn
    )
    assert not resumed.finished and resumed.stop_reason is None
    assert [comparable(s) for s in resumed] == full[1:]
    assert resumed.stop_reason == "max_epoch"


@pytest.mark.parametrize(
    "settings",
    [
        {"max_epoch": 3, "stop_fn": lambda best: best >= 0},  # the goal still holds
        {"max_epoch": 1, "stop_fn": None},  # no epoch left
    ],
)
def test_a_run_ended_by_stop_fn_stays_finished_otherwise(
    tmp_path: Path, settings: dict[str, Any]
) -> None:
    _stopped_by_stop_fn(tmp_path)
    resumed = build("off", checkpoint_dir=tmp_path, resume_from=tmp_path, **settings)
    assert resumed.finished and list(resumed) == [] and resumed.stop_reason == "stop_fn"
