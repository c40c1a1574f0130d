"""A Ctrl-C inside an epoch whose replay ring has wrapped: continuing gives the uninterrupted run.

The interrupted epoch overwrote rows of older data; the roll-back puts them back (with their
priorities), so the redone epoch samples what the uninterrupted one sampled.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch

from epochtrain import make_trainer
from epochtrain.trainer import OffpolicyTrainer
from tests.trainer.test_base import comparable

SETTINGS: dict[str, Any] = {
    "max_epoch": 3,
    "num_envs": 2,
    "step_per_epoch": 32,
    "step_per_collect": 8,
    "update_per_step": 0.5,
    "batch_size": 8,
    "warmup_steps": 16,
    "num_test_envs": 1,
    "episode_per_test": 1,
    "seed": 1,
    "stop_fn": None,
    "show_progress": False,
}
"""Rows (vector steps): 8 of warm-up, then 16 per epoch; 4 gradient steps per collect step."""

CASES = {
    # ring of 20 rows: full after epoch 1, and epoch 2 overwrites all of it before the
    # interrupt at its 12th gradient step (the third collect step)
    "dqn": ("dqn", "CartPole-v1", {"buffer_size": 40}, 12),
    # ring of 30 rows: epoch 2 wraps, and is interrupted after overwriting part of it;
    # the interrupted epoch also changed the priorities of older rows
    "dqn-prioritized-n-step": (
        "dqn",
        "CartPole-v1",
        {"buffer_size": 60, "prioritized_replay": True, "n_step": 3},
        9,
    ),
    "sac": ("sac", "Pendulum-v1", {"buffer_size": 44}, 5),
}


def _trainer(algo: str, env_id: str, overrides: dict[str, Any]) -> OffpolicyTrainer[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = make_trainer(algo, env_id, **SETTINGS, **overrides)
    assert isinstance(trainer, OffpolicyTrainer)
    return trainer


def _assert_same(a: Any, b: Any, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b) or torch.equal(a.nan_to_num(), b.nan_to_num()), where
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for key in a:
            _assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("case", list(CASES))
def test_ctrl_c_with_a_wrapped_ring_then_continuing_gives_the_uninterrupted_run(
    case: str,
) -> None:
    algo, env_id, overrides, at_gradient_step = CASES[case]
    full = _trainer(algo, env_id, overrides)
    full_stats = [comparable(s) for s in full]

    trainer = _trainer(algo, env_id, overrides)
    buffer = trainer.train_collector.buffer
    assert buffer is not None
    stats = [comparable(next(trainer))]
    free_rows = buffer.rows - len(buffer) // buffer.num_envs
    written_before = buffer._rows_written
    calls, written = [0], [0]

    def interrupt(*args: Any) -> Any:
        calls[0] += 1
        if calls[0] == at_gradient_step:
            written[0] = buffer._rows_written - written_before
            raise KeyboardInterrupt
        return args[0] if args else None

    trainer.register_op("post_optim", interrupt)
    with pytest.raises(KeyboardInterrupt):
        next(trainer)
    assert trainer.state.epoch == 1
    calls[0] = -(10**9)  # no second interrupt
    stats += [comparable(s) for s in trainer]

    _assert_same(full_stats, stats, "stats")
    _assert_same(full.policy.state_dict(), trainer.policy.state_dict(), "policy")
    full_buffer = full.train_collector.buffer
    assert full_buffer is not None
    _assert_same(full_buffer.state_dict(), buffer.state_dict(), "buffer")
    assert written[0] > free_rows  # the interrupted epoch had overwritten rows of older data
