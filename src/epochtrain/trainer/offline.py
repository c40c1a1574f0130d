"""OfflineTrainer: learn from a fixed buffer; no training envs.

A training step is one gradient step on a minibatch of ``batch_size`` sampled from
``buffer``; ``step_per_epoch`` therefore counts gradient steps here.
"""

from __future__ import annotations

import time
from typing import Any

from epochtrain.algorithms.base import Policy
from epochtrain.data.buffer import ReplayBuffer
from epochtrain.stats import CollectStats, TTrainingStats
from epochtrain.trainer.base import BaseTrainer
from epochtrain.trainer.params import check_positive_int

__all__ = ["OfflineTrainer"]


class OfflineTrainer(BaseTrainer[TTrainingStats]):
    """Trainer for offline algorithms (BC, TD3+BC, CQL) on a fixed dataset ``buffer``.

    The dataset is an input, not part of the run's state: checkpoints do not hold it, so
    resume with the same ``buffer``.
    """

    def __init__(
        self,
        *,
        policy: Policy[TTrainingStats],
        buffer: ReplayBuffer,
        batch_size: int = 256,
        **kwargs: Any,
    ) -> None:
        if not isinstance(buffer, ReplayBuffer):
            raise TypeError(f"buffer must be a ReplayBuffer, got {type(buffer).__name__}")
        if buffer.n_valid == 0:
            raise ValueError(
                "buffer is empty: fill it (e.g. ReplayBuffer.load(path)) before offline training"
            )
        check_positive_int("batch_size", batch_size)
        super().__init__(policy=policy, **kwargs)
        self.buffer = buffer
        self.batch_size = batch_size
        self._complete_init()

    def _training_step(self) -> int:
        if self.train_fn is not None:
            self.train_fn(self.epoch, self.env_step)
        self._ops.call("pre_optim_steps")
        self.policy_update_fn(None)
        self._ops.call("post_steps")
        return 1

    def policy_update_fn(self, collect_stats: CollectStats | None) -> TTrainingStats | None:
        """One gradient step on a sampled minibatch."""
        start = time.perf_counter()
        self._learn_sampled(self.buffer, self.batch_size)
        return self._finish_update(time.perf_counter() - start)
