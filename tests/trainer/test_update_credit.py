"""Off-policy update steps take update_per_step gradient steps per env step, fractions kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.tiny import build


def _weights(trainer: Any) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.policy.parameters()]


def test_a_fraction_of_a_gradient_step_carries_to_the_next_update_step() -> None:
    # 2 envs x 1 row per collect at 0.25 gradient steps per env step: 0.5 per collect,
    # which round() would make 0 on every collect, so the policy would never learn
    trainer = build("off", step_per_collect=2, update_per_step=0.25, step_per_epoch=10)
    steps = []
    for _ in range(3):
        next(trainer)
        steps.append(trainer.state.gradient_step)
    assert trainer.state.env_step == 30
    assert steps == [2, 5, 7]  # 2.5, 5.0, 7.5 owed: the whole part taken each time
    assert trainer.update_credit == pytest.approx(0.5)


def test_integer_products_are_unchanged() -> None:
    trainer = build("off", step_per_collect=10, update_per_step=0.5, step_per_epoch=40)
    next(trainer)
    assert trainer.state.gradient_step == 20 and trainer.update_credit == 0.0


def test_the_credit_is_checkpointed_and_a_resumed_run_matches(tmp_path: Path) -> None:
    settings: dict[str, Any] = dict(step_per_collect=2, update_per_step=0.25, step_per_epoch=10)
    whole = build("off", **settings)
    whole.run()
    first = build("off", **settings)
    next(first)
    assert first.update_credit == pytest.approx(0.5)
    path = first.save_checkpoint(tmp_path / "epoch_1")
    resumed = build("off", **settings)
    resumed.load_checkpoint(path)
    assert resumed.update_credit == pytest.approx(0.5)
    resumed.run()
    assert resumed.state.gradient_step == whole.state.gradient_step == 7
    for a, b in zip(_weights(resumed), _weights(whole), strict=True):
        assert torch.equal(a, b)


def test_a_checkpoint_without_the_credit_resumes_at_zero(tmp_path: Path) -> None:
    trainer = build("off", step_per_collect=10, update_per_step=0.5, step_per_epoch=40)
    next(trainer)
    state = trainer.state_dict()
    del state["update_credit"]  # as written before the credit existed
    fresh = build("off", step_per_collect=10, update_per_step=0.5, step_per_epoch=40)
    fresh.load_state_dict(state)
    assert fresh.update_credit == 0.0 and fresh.state.gradient_step == 20


@pytest.mark.parametrize("credit", [1.0, -0.1, "0.5"])
def test_a_bad_credit_is_refused_before_anything_changes(credit: object) -> None:
    trainer = build("off", step_per_collect=2, update_per_step=0.25, step_per_epoch=10)
    next(trainer)
    state = {**trainer.state_dict(), "update_credit": credit}
    fresh = build("off", step_per_collect=2, update_per_step=0.25, step_per_epoch=10)
    with pytest.raises(ValueError, match="update_credit"):
        fresh.load_state_dict(state)
    assert fresh.state.gradient_step == 0 and fresh.update_credit == 0.0
