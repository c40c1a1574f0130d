"""Every trainer parameter is validated at construction, naming the parameter."""

from __future__ import annotations

from typing import Any

import pytest

from tests.trainer.tiny import build


@pytest.mark.parametrize(
    ("kind", "kwargs", "names"),
    [
        ("off", {"max_epoch": 0}, "max_epoch"),
        ("off", {"step_per_epoch": -5}, "step_per_epoch"),
        ("off", {"batch_size": 0}, "batch_size"),
        ("on", {"batch_size": 0}, "batch_size"),
        ("offline", {"batch_size": 0}, "batch_size"),
        ("off", {"episode_per_collect": 2}, "step_per_collect"),
        ("on", {"step_per_collect": None}, "episode_per_collect"),
        ("off", {"update_per_step": 0}, "update_per_step"),
        ("off", {"warmup_steps": -1}, "warmup_steps"),
        ("on", {"repeat_per_collect": 0}, "repeat_per_collect"),
        ("on", {"step_per_collect": 100}, "step_per_collect"),
        ("off", {"episode_per_test": 0}, "episode_per_test"),
        ("off", {"seed": -1}, "seed"),
        ("off", {"stop_fn": 3}, "stop_fn"),
        ("off", {"test_collector": None, "stop_fn": lambda r: True}, "stop_fn"),
        ("off", {"test_collector": None, "save_best_fn": print}, "save_best_fn"),
        ("off", {"test_collector": None, "test_before_train": True}, "test_before_train"),
    ],
)
def test_bad_parameter_raises_value_error_naming_it(
    kind: str, kwargs: dict[str, Any], names: str
) -> None:
    with pytest.raises(ValueError, match=names):
        build(kind, **kwargs)


def test_exploring_test_collector_is_rejected() -> None:
    trainer = build("off")
    trainer.test_collector.exploration = True
    with pytest.raises(ValueError, match="exploration"):
        build("off", test_collector=trainer.test_collector)


def test_train_collector_without_buffer_is_rejected() -> None:
    from epochtrain.data import Collector

    trainer = build("off")
    with pytest.raises(ValueError, match="buffer"):
        build("off", train_collector=Collector(trainer.policy, trainer.train_collector.env))


def test_no_test_collector_runs_without_tests() -> None:
    trainer = build("off", test_collector=None, max_epoch=2)
    stats = list(trainer)
    assert len(stats) == 2 and all(s.test_collect_stat is None for s in stats)
