"""OnpolicyTrainer: learn from each fresh rollout, then throw it away.

Update step: ``policy.process_rollout`` on the whole ``[time, env]`` rollout (returns,
advantages), drop the rows that hold no transition, then ``repeat_per_collect`` shuffled
passes of minibatches of ``batch_size`` (``None``: the whole rollout), one gradient step
each; finally the rollout buffer is cleared.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from epochtrain.algorithms.base import Policy
from epochtrain.data.batch import Batch
from epochtrain.stats import CollectStats, TTrainingStats
from epochtrain.trainer.online import OnlineTrainer
from epochtrain.trainer.params import check_positive_int

__all__ = ["OnpolicyTrainer"]


class OnpolicyTrainer(OnlineTrainer[TTrainingStats]):
    """Trainer for on-policy algorithms (PPO, A2C, PG).

    ``repeat_per_collect``: passes over each rollout; ``batch_size``: transitions per
    minibatch (``None`` = the whole rollout in one gradient step).
    """

    def __init__(
        self,
        *,
        policy: Policy[TTrainingStats],
        repeat_per_collect: int = 1,
        batch_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        check_positive_int("repeat_per_collect", repeat_per_collect)
        if batch_size is not None:
            check_positive_int("batch_size", batch_size)
        super().__init__(policy=policy, **kwargs)
        buffer = self.train_collector.buffer
        assert buffer is not None
        if self.step_per_collect is not None:
            rows = -(-self.step_per_collect // buffer.num_envs)
            if rows > buffer.rows:
                raise ValueError(
                    f"step_per_collect={self.step_per_collect} needs a rollout buffer of "
                    f"capacity >= {rows * buffer.num_envs}, the train_collector's buffer has "
                    f"capacity {buffer.capacity}"
                )
        self.repeat_per_collect = repeat_per_collect
        self.batch_size = batch_size
        self._complete_init()

    def _collected_rows(self) -> Batch:
        """The whole rollout: the buffer holds exactly the last collect step."""
        buffer = self.train_collector.buffer
        assert buffer is not None
        return buffer.rollout()

    def _run_update(self, stat: CollectStats, batch: Batch | None) -> None:
        self._learn_rollout(stat, batch)

    def policy_update_fn(self, collect_stats: CollectStats | None) -> TTrainingStats | None:
        """Learn from the rollout just collected, then clear the buffer."""
        return self._learn_rollout(collect_stats, None)

    def _learn_rollout(
        self, collect_stats: CollectStats | None, rollout: Batch | None
    ) -> TTrainingStats | None:
        """Learn from ``rollout`` (``None``: the buffer's; ``batch_process`` hooks may have
        changed it), then clear the buffer."""
        start = time.perf_counter()
        buffer = self.train_collector.buffer
        assert buffer is not None and collect_stats is not None
        if collect_stats.n_collected_steps > buffer.n_valid:
            raise ValueError(
                f"the collect step gathered {collect_stats.n_collected_steps} env steps but "
                f"the rollout buffer holds {buffer.n_valid}: raise its capacity "
                f"(now {buffer.capacity}) above the largest rollout"
            )
        if rollout is None:
            rollout = buffer.rollout()
        batch = self.policy.process_rollout(rollout).flatten()
        if batch.valid is not None and not bool(batch.valid.all()):
            batch = batch[batch.valid]
        n = len(batch)
        size = self.batch_size or n
        for _ in range(self.repeat_per_collect):
            order = torch.randperm(n, device=batch.rew.device)
            for begin in range(0, n, size):
                self._learn(batch[order[begin : begin + size]])
        buffer.clear()
        return self._finish_update(time.perf_counter() - start)
