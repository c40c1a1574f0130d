"""OffpolicyTrainer: learn from minibatches sampled from a replay buffer.

Update step: ``round(update_per_step * n_collected_steps)`` gradient steps, each on a
minibatch of ``batch_size`` sampled uniformly from the buffer. The returned stats cover
all of those gradient steps (mean, std, min, max), not just the last one.
"""

from __future__ import annotations

import time
from typing import Any

from epochtrain.algorithms.base import Policy
from epochtrain.stats import CollectStats, TTrainingStats
from epochtrain.trainer.online import OnlineTrainer
from epochtrain.trainer.params import check_positive_int

__all__ = ["OffpolicyTrainer"]


class OffpolicyTrainer(OnlineTrainer[TTrainingStats]):
    """Trainer for off-policy algorithms (DQN, SAC, TD3, ...).

    ``update_per_step``: gradient steps per collected env step (> 0);
    ``batch_size``: transitions per minibatch; ``warmup_steps``: env steps collected with
    random actions before the first epoch (counted in ``env_step``).
    """

    def __init__(
        self,
        *,
        policy: Policy[TTrainingStats],
        update_per_step: float = 1.0,
        batch_size: int = 64,
        warmup_steps: int = 0,
        **kwargs: Any,
    ) -> None:
        if isinstance(update_per_step, bool) or not isinstance(update_per_step, int | float):
            raise ValueError(f"update_per_step must be a number > 0, got {update_per_step!r}")
        if not update_per_step > 0:
            raise ValueError(f"update_per_step must be a number > 0, got {update_per_step!r}")
        check_positive_int("batch_size", batch_size)
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an int >= 0, got {warmup_steps!r}")
        super().__init__(policy=policy, **kwargs)
        self.update_per_step = float(update_per_step)
        self.batch_size = batch_size
        self.warmup_steps = warmup_steps
        self._complete_init()

    def _start(self) -> None:
        super()._start()
        if self.warmup_steps > 0:
            self.policy.set_progress(self.env_step)
            stat = self.train_collector.collect(n_step=self.warmup_steps, random=True)
            self.env_step += stat.n_collected_steps
            self.train_episode += stat.n_collected_episodes
            self.collect_time += stat.collect_time
            self.logger.log_train_data(stat, self.env_step)
            if self._ops["batch_process"]:  # e.g. normalisers see the warm-up data too
                self._ops.process("batch_process", self._collected_rows())

    def policy_update_fn(self, collect_stats: CollectStats | None) -> TTrainingStats | None:
        """Run ``round(update_per_step * n_collected_steps)`` sampled gradient steps."""
        start = time.perf_counter()
        assert collect_stats is not None
        buffer = self.train_collector.buffer
        assert buffer is not None
        for _ in range(round(self.update_per_step * collect_stats.n_collected_steps)):
            self._learn_sampled(buffer, self.batch_size)
        return self._finish_update(time.perf_counter() - start)
