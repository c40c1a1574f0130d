"""OnlineTrainer: the training step shared by the on- and off-policy trainers.

One training step is: ``train_fn`` → ``policy.set_progress(env_step)`` → one collect step
on the training envs → (``test_in_train``: a test step when the collected episodes
already satisfy ``stop_fn``) → one update step (``policy_update_fn``).
"""

from __future__ import annotations

from abc import ABC
from typing import Any

import numpy as np

from epochtrain.algorithms.base import Policy
from epochtrain.data.collector import Collector
from epochtrain.stats import TTrainingStats
from epochtrain.trainer.base import BaseTrainer, check_positive_int

__all__ = ["OnlineTrainer"]


class OnlineTrainer(BaseTrainer[TTrainingStats], ABC):
    """Base of the trainers that collect from envs; ``step_per_epoch`` counts env steps.

    Exactly one of ``step_per_collect`` (env steps per collect step) and
    ``episode_per_collect`` must be given.
    """

    def __init__(
        self,
        *,
        policy: Policy[TTrainingStats],
        train_collector: Collector,
        step_per_collect: int | None = None,
        episode_per_collect: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(train_collector, Collector):
            raise TypeError(
                f"train_collector must be a Collector, got {type(train_collector).__name__}"
            )
        if train_collector.buffer is None:
            raise ValueError(
                "train_collector has no buffer; build it with "
                "Collector(policy, envs, ReplayBuffer(capacity, num_envs))"
            )
        if (step_per_collect is None) == (episode_per_collect is None):
            raise ValueError(
                "give exactly one of step_per_collect and episode_per_collect, got "
                f"step_per_collect={step_per_collect!r}, "
                f"episode_per_collect={episode_per_collect!r}"
            )
        if step_per_collect is not None:
            check_positive_int("step_per_collect", step_per_collect)
        if episode_per_collect is not None:
            check_positive_int("episode_per_collect", episode_per_collect)
        super().__init__(policy=policy, **kwargs)
        if train_collector.policy is not self.policy:
            raise ValueError("train_collector.policy must be the trainer's policy")
        if self.test_collector is not None and self.test_collector.policy is not self.policy:
            raise ValueError("test_collector.policy must be the trainer's policy")
        self.train_collector = train_collector
        self.step_per_collect = step_per_collect
        self.episode_per_collect = episode_per_collect

    def reset(self) -> None:
        """Start over; the training envs are reset and the buffer cleared on the next step."""
        super().reset()
        assert self.train_collector.buffer is not None
        self.train_collector.buffer.clear()

    def _start(self) -> None:
        self.train_collector.reset(seed=self.seed)
        self.train_collector.env.action_space.seed(self.seed)

    def _collect(self, **kwargs: Any) -> int:
        """One collect step on the training envs; returns env steps collected."""
        stat = self.train_collector.collect(**kwargs)
        self.env_step += stat.n_collected_steps
        self.train_episode += stat.n_collected_episodes
        self.collect_time += stat.collect_time
        self._epoch_collects.append(stat)
        self.logger.log_train_data(stat, self.env_step)
        return stat.n_collected_steps

    def _training_step(self) -> int:
        if self.train_fn is not None:
            self.train_fn(self.epoch, self.env_step)
        self.policy.set_progress(self.env_step)
        if self.step_per_collect is not None:
            steps = self._collect(n_step=self.step_per_collect)
        else:
            steps = self._collect(n_episode=self.episode_per_collect)
        stat = self._epoch_collects[-1]
        if self._should_test_in_train(stat.returns):
            self._test_step()
            if self._stop_fn_fired():
                self._finish("stop_fn")
                return steps
        self.policy_update_fn(stat)
        return steps

    def _should_test_in_train(self, train_returns: np.ndarray) -> bool:
        return (
            self.test_in_train
            and self.stop_fn is not None
            and len(train_returns) > 0
            and bool(self.stop_fn(float(train_returns.mean())))
        )
