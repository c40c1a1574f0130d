"""OffpolicyTrainer refuses a prioritized replay buffer that its policy never updates."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from epochtrain.data import Batch, Collector, PrioritizedReplayBuffer, ReplayBuffer
from epochtrain.trainer import OffpolicyParams, OffpolicyTrainer
from tests.trainer.tiny import TinyPolicy, make_envs


class SelfPrioritizing(TinyPolicy):
    """Updates the priorities itself in ``post_learn``, without the TDPriorities mixin."""

    def post_learn(self, batch: Batch, buffer: ReplayBuffer) -> None:
        if isinstance(buffer, PrioritizedReplayBuffer):
            assert batch.index is not None
            buffer.update_priorities(batch.index, torch.arange(1.0, len(batch.index) + 1.0))


def build(policy_cls: type[TinyPolicy], buffer: ReplayBuffer) -> OffpolicyTrainer[Any]:
    torch.manual_seed(0)
    train_envs, test_envs = make_envs(2), make_envs(2)
    policy = policy_cls(train_envs)
    params = OffpolicyParams(
        max_epoch=1, step_per_epoch=40, step_per_collect=10, batch_size=8,
        episode_per_test=1, show_progress=False, seed=0,
    )  # fmt: skip
    try:
        return OffpolicyTrainer(
            policy=policy,
            params=params,
            train_collector=Collector(policy, train_envs, buffer),
            test_collector=Collector(policy, test_envs, exploration=False),
        )
    except ValueError:  # refused: the envs are ours to close
        train_envs.close()
        test_envs.close()
        raise


def test_only_a_policy_that_never_updates_priorities_is_refused_a_prioritized_buffer() -> None:
    with pytest.raises(ValueError) as info:
        build(TinyPolicy, PrioritizedReplayBuffer(100, 2))
    message = str(info.value)
    for words in ("train_collector.buffer", "PrioritizedReplayBuffer", "TinyPolicy",
                  "ReplayBuffer(100, 2)", "TDPriorities", "post_learn"):  # fmt: skip
        assert words in message
    with build(TinyPolicy, ReplayBuffer(100, 2)) as trainer:  # uniform: as before
        assert [stats.epoch for stats in trainer] == [1]
    # its own post_learn updating them is a legitimate use: accepted, and it works
    buffer = PrioritizedReplayBuffer(100, 2, alpha=1.0)
    with build(SelfPrioritizing, buffer) as trainer:
        trainer.run()
    assert len(np.unique(buffer.priorities(np.arange(len(buffer))))) > 1
