"""An offline ``batch_size`` larger than the dataset warns once, when the trainer is built:
every minibatch then draws each transition several times (sampling is with replacement)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from epochtrain import make_trainer
from epochtrain.data import ReplayBuffer

TINY: dict[str, Any] = dict(max_epoch=1, step_per_epoch=2, episode_per_test=1, show_progress=False)


def cartpole_dataset(n: int) -> ReplayBuffer:
    """``n`` CartPole-shaped transitions (zeros, action 0)."""
    buffer = ReplayBuffer(n, 1)
    for _ in range(n):
        buffer.add(
            obs=np.zeros((1, 4), np.float32),
            act=np.array([0]),
            rew=np.ones(1, np.float32),
            terminated=np.zeros(1, bool),
            truncated=np.zeros(1, bool),
            obs_next=np.zeros((1, 4), np.float32),
        )
    return buffer


@pytest.mark.parametrize("algo", ["bc", "cql"])
def test_a_batch_larger_than_the_dataset_warns_naming_both_sizes_and_the_fix(algo: str) -> None:
    with pytest.warns(UserWarning) as record:
        trainer = make_trainer(
            algo, "CartPole-v1", buffer=cartpole_dataset(30), batch_size=1_000, **TINY
        )
    notes = [str(w.message) for w in record if "batch_size" in str(w.message)]
    assert notes == [
        "batch_size=1,000 is larger than the dataset (buffer=) of 30 transitions: each "
        "minibatch samples every transition about 33 times (with replacement), so a gradient "
        "step costs 33 times one on the whole dataset and learns nothing more. Lower "
        "batch_size to at most 30"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the run itself warns no more
        trainer.run()


@pytest.mark.parametrize("batch_size", [30, 16])
def test_a_batch_no_larger_than_the_dataset_does_not_warn(batch_size: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_trainer(
            "bc", "CartPole-v1", buffer=cartpole_dataset(30), batch_size=batch_size, **TINY
        )
