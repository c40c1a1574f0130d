"""OnpolicyTrainer: learn from each fresh rollout, then throw it away.

Update step: ``policy.process_rollout`` on the whole ``[time, env]`` rollout (returns,
advantages), drop the rows that hold no transition, then ``repeat_per_collect`` shuffled
passes of minibatches of ``batch_size`` (``None``: the whole rollout), one gradient step
each; finally the rollout buffer is cleared.
"""

from __future__ import annotations

import time
from typing import ClassVar

import torch

from epochtrain.algorithms.base import TrainerKind
from epochtrain.data.batch import Batch
from epochtrain.data.buffer import ReplayBuffer, rollout_rows
from epochtrain.data.collector import Collector
from epochtrain.errors import NonFiniteError
from epochtrain.stats import CollectStats, TTrainingStats
from epochtrain.trainer.online import OnlineTrainer
from epochtrain.trainer.params import OnpolicyParams, TrainerParams
from epochtrain.trainer.safety import on_nonfinite

__all__ = ["OnpolicyTrainer"]


class OnpolicyTrainer(OnlineTrainer[TTrainingStats]):
    """Trainer for on-policy algorithms (PPO, A2C, PG); ``params``: :class:`OnpolicyParams`.

    ``repeat_per_collect``: passes over each rollout; ``batch_size``: transitions per
    minibatch (``None`` = the whole rollout in one gradient step).
    """

    kind: ClassVar[TrainerKind] = "onpolicy"
    params: OnpolicyParams
    params_cls: ClassVar[type[TrainerParams]] = OnpolicyParams

    def _attach(self, train_collector: Collector | None, buffer: ReplayBuffer | None) -> None:
        super()._attach(train_collector, buffer)
        rollout = self.train_collector.buffer
        assert rollout is not None
        step_per_collect = self.params.step_per_collect
        if step_per_collect is not None:
            same_step = self.train_collector.same_step
            rows = rollout_rows(step_per_collect, rollout.num_envs, same_step=same_step)
            if rows > rollout.rows:
                why = (
                    ""
                    if same_step
                    else " (the train envs autoreset on the next step, as gymnasium's "
                    "default and EnvPool do: the step after an episode's end only resets the "
                    "env and takes a row of its own, so a rollout can take up to twice the "
                    "rows; envs built with autoreset_mode=SAME_STEP need half)"
                )
                raise ValueError(
                    f"params.step_per_collect={step_per_collect} needs a rollout buffer of "
                    f"capacity >= {rows * rollout.num_envs}{why}, the train_collector's buffer "
                    f"has capacity {rollout.capacity}: raise the capacity or lower "
                    "step_per_collect"
                )

    def _collected_rows(self) -> Batch:
        """The whole rollout: the buffer holds exactly the last collect step."""
        buffer = self.train_collector.buffer
        assert buffer is not None
        return buffer.rollout()

    def policy_update_fn(self, collect_stats: CollectStats | None) -> TTrainingStats | None:
        """Learn from the rollout just collected (as the ``batch_process`` hooks changed it,
        if any: :attr:`processed_rollout`), then clear the buffer."""
        start = time.perf_counter()
        buffer = self.train_collector.buffer
        assert buffer is not None and collect_stats is not None
        if collect_stats.n_collected_steps > buffer.n_valid:
            raise ValueError(
                f"the collect step gathered {collect_stats.n_collected_steps} env steps but "
                f"the rollout buffer holds {buffer.n_valid}: raise its capacity "
                f"(now {buffer.capacity}) above the largest rollout"
            )
        rollout = self.processed_rollout
        if rollout is None:
            # no collected-batch op is registered, so none was built: an op that returns
            # no Batch (a forgotten `return batch`) is refused by HookTable.process instead
            assert not self._ops["batch_process"], "batch_process ops ran but left no rollout"
            rollout = buffer.rollout()
        try:
            batch = self.policy.process_rollout(rollout).flatten()
        except NonFiniteError as exc:  # the policy's logp of the rollout (PPO): no step on it
            # the rollout, not one gradient step, is at fault: "skip" stops here too
            step = f"the update after env step {self.state.env_step}"
            on_nonfinite(self, exc, step, skippable=False)
            buffer.clear()
            return self._finish_update(time.perf_counter() - start)
        if batch.valid is not None and not bool(batch.valid.all()):
            batch = batch[batch.valid]
        n = len(batch)
        size = self.params.batch_size or n
        for _ in range(self.params.repeat_per_collect):
            if self._finished:  # a hook's request_stop or on_nonfinite="stop"
                break
            order = torch.randperm(n, device=batch.rew.device)
            # one gather per field per pass, then minibatches are slices (views): the same
            # rows in the same order as gathering each minibatch, in fewer ops
            shuffled = batch[order]
            if size >= n:
                self._learn(shuffled)
                continue
            for begin in range(0, n, size):
                self._learn(shuffled[begin : begin + size])
        buffer.clear()
        return self._finish_update(time.perf_counter() - start)
