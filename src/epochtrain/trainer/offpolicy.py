"""OffpolicyTrainer: learn from minibatches sampled from a replay buffer.

Update step: ``round(update_per_step * n_collected_steps)`` gradient steps, each on a
minibatch of ``batch_size`` sampled uniformly from the buffer. The returned stats cover
all of those gradient steps (mean, std, min, max), not just the last one.
"""

from __future__ import annotations

import time
from typing import ClassVar

from epochtrain.algorithms.base import TrainerKind
from epochtrain.stats import CollectStats, TTrainingStats
from epochtrain.trainer.online import OnlineTrainer
from epochtrain.trainer.params import OffpolicyParams, TrainerParams

__all__ = ["OffpolicyTrainer"]


class OffpolicyTrainer(OnlineTrainer[TTrainingStats]):
    """Trainer for off-policy algorithms (DQN, SAC, TD3, ...); ``params``:
    :class:`OffpolicyParams`.

    ``update_per_step``: gradient steps per collected env step (> 0);
    ``batch_size``: transitions per minibatch; ``warmup_steps``: env steps collected with
    random actions before the first epoch (counted in ``env_step``).
    """

    kind: ClassVar[TrainerKind] = "offpolicy"
    params: OffpolicyParams
    params_cls: ClassVar[type[TrainerParams]] = OffpolicyParams

    def _start(self) -> None:
        super()._start()
        if self.params.warmup_steps > 0:
            self.policy.set_progress(self.state.env_step)
            stat = self.train_collector.collect(n_step=self.params.warmup_steps, random=True)
            self.state.env_step += stat.n_collected_steps
            self.state.train_episode += stat.n_collected_episodes
            self.state.collect_time += stat.collect_time
            self.logger.log_train_data(stat, self.state.env_step)
            if self._ops["batch_process"]:  # e.g. normalisers see the warm-up data too
                self._ops.process("batch_process", self._collected_rows())

    def policy_update_fn(self, collect_stats: CollectStats | None) -> TTrainingStats | None:
        """Run ``round(update_per_step * n_collected_steps)`` sampled gradient steps."""
        start = time.perf_counter()
        assert collect_stats is not None
        buffer = self.train_collector.buffer
        assert buffer is not None
        for _ in range(round(self.params.update_per_step * collect_stats.n_collected_steps)):
            self._learn_sampled(buffer, self.params.batch_size)
        return self._finish_update(time.perf_counter() - start)
