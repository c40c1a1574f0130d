"""OffpolicyTrainer: learn from minibatches sampled from a replay buffer.

Update step: ``update_per_step * n_collected_steps`` gradient steps, each on a minibatch
of ``batch_size`` sampled uniformly from the buffer; a fraction is carried to the next
update step, so ``update_per_step=0.5`` with one env step per collect takes a gradient
step every second collect (a plain ``round`` would take none, ever). The returned stats
cover all of those gradient steps (mean, std, min, max), not just the last one.

With ``async_collection=True`` the next collect step runs in a worker thread while an
update step's gradient steps run (:mod:`epochtrain.trainer.async_collection`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

from torch import Tensor

from epochtrain.algorithms.base import TrainerKind
from epochtrain.data.buffer import ReplayBuffer
from epochtrain.data.collector import Collector
from epochtrain.errors import EnvError, NonFiniteError
from epochtrain.stats import CollectStats, TTrainingStats
from epochtrain.trainer import async_collection as ac
from epochtrain.trainer.checks import check_priority_updates
from epochtrain.trainer.online import OnlineTrainer
from epochtrain.trainer.params import OffpolicyParams, TrainerParams
from epochtrain.trainer.safety import on_nonfinite

__all__ = ["OffpolicyTrainer"]


class OffpolicyTrainer(OnlineTrainer[TTrainingStats]):
    """Trainer for off-policy algorithms (DQN, SAC, TD3, ...); ``params``:
    :class:`OffpolicyParams`.

    ``update_per_step``: gradient steps per collected env step (> 0);
    ``batch_size``: transitions per minibatch; ``warmup_steps``: env steps collected with
    random actions before the first epoch (counted in ``env_step``);
    ``async_collection``: overlap the next collect step with the gradient steps.

    A :class:`~epochtrain.data.PrioritizedReplayBuffer` needs a policy that updates its
    priorities (the :class:`~epochtrain.algorithms.TDPriorities` mixin, or its own
    ``post_learn``); another policy is refused, since it would sample uniformly.
    """

    kind: ClassVar[TrainerKind] = "offpolicy"
    params: OffpolicyParams
    params_cls: ClassVar[type[TrainerParams]] = OffpolicyParams

    def _attach(self, train_collector: Collector | None, buffer: ReplayBuffer | None) -> None:
        super()._attach(train_collector, buffer)
        check_priority_updates(self.policy, self.train_collector.buffer)
        self.async_collection: ac.AsyncCollection | None = None
        """The asynchronous-collection machinery (None unless ``async_collection``)."""
        if self.params.async_collection:
            self.async_collection = ac.AsyncCollection(self.policy, self.train_collector)

    def _init_state(self) -> None:
        super()._init_state()
        if self.async_collection is not None:
            self._actor_rng_state: Tensor = ac.initial_actor_rng_state(
                self.params.seed, self.policy.device
            )
            self._collected_ahead: CollectStats | None = None
            self._epoch_start_env_step = 0
        self.async_overlap_time = 0.0
        """Seconds of training collection that ran while gradient steps ran, in total
        (0 unless ``async_collection``)."""
        self.update_credit = 0.0
        """Gradient steps owed but not taken yet: the fraction in [0, 1) that
        ``update_per_step * n_collected_steps`` left over (saved in checkpoints)."""

    def _stop_workers(self) -> None:
        if self.async_collection is not None:
            self.async_collection.stop()

    def _training_step(self) -> int:
        if self.async_collection is None:
            return super()._training_step()
        try:
            return ac.async_training_step(self)
        except BaseException:  # no collect thread outlives an error (the policy's, ...)
            self.async_collection.stop()
            raise

    def _start(self) -> None:
        """Seed the envs, then collect ``warmup_steps`` env steps with random actions.

        Non-finite data in the warm-up goes through ``on_nonfinite`` as a training collect
        step's does; when that ends the run, the first epoch (no training, no test) reports
        it, as an on-policy run's first epoch does.
        """
        super()._start()
        if self.params.warmup_steps > 0 and not self._finished:
            self.policy.set_progress(self.state.env_step)
            try:
                stat = self.train_collector.collect(n_step=self.params.warmup_steps, random=True)
            except NonFiniteError as exc:  # raises, or ends the run: epoch 1 reports it
                self._warmup_failed(exc)
                return
            except EnvError as exc:  # as any training collect's
                self._collect_failed(exc)
                return
            self.state.env_step += stat.n_collected_steps
            self.state.train_episode += stat.n_collected_episodes
            self.state.collect_time += stat.collect_time
            self.logger.log_train_data(stat, self.state.env_step)
            if self._ops["batch_process"]:  # e.g. normalisers see the warm-up data too
                self._ops.process("batch_process", self._collected_rows())

    def _warmup_failed(self, exc: NonFiniteError) -> None:
        """Apply ``on_nonfinite`` to non-finite data of the warm-up and count the env
        steps it made (as :meth:`_collect_failed` does for a training collect step)."""
        env_step = self.state.env_step + (exc.env_step or 0)
        on_nonfinite(self, exc, f"env step {env_step} of the random warm-up")
        self.state.env_step = env_step

    def policy_update_fn(self, collect_stats: CollectStats | None) -> TTrainingStats | None:
        """Run the whole part of ``update_credit + update_per_step * n_collected_steps``
        sampled gradient steps; the fraction stays in :attr:`update_credit`."""
        start = time.perf_counter()
        assert collect_stats is not None
        buffer = self.train_collector.buffer
        assert buffer is not None
        owed = self.update_credit + self.params.update_per_step * collect_stats.n_collected_steps
        n_steps = int(owed)
        self.update_credit = owed - n_steps
        for _ in range(n_steps):
            if self._finished:  # a hook's request_stop or on_nonfinite="stop"
                break
            self._learn_sampled(buffer, self.params.batch_size)
        return self._finish_update(time.perf_counter() - start)

    def state_dict(self) -> dict[str, Any]:
        """The online trainer's state, plus the update credit and, when collecting
        asynchronously, the actor's random stream."""
        state = super().state_dict()
        state["update_credit"] = self.update_credit
        if self.async_collection is not None:
            state["async_collection"] = ac.save_async_state(self)
        return state

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """The online trainer's checks, plus the ``update_credit`` entry (absent from
        checkpoints older than it: 0) and the ``async_collection`` entry if collecting
        asynchronously."""
        super().check_state_dict(state)
        credit = state.get("update_credit", 0.0)
        if not isinstance(credit, float) or not 0.0 <= credit < 1.0:
            raise ValueError(
                f"the trainer state's update_credit must be a float in [0, 1), got {credit!r}"
            )
        if self.async_collection is not None:
            ac.check_async_state(self, state)

    def _load_parts(self, state: Mapping[str, Any]) -> None:
        super()._load_parts(state)
        self.update_credit = float(state.get("update_credit", 0.0))
        if self.async_collection is not None:
            ac.load_async_state(self, state)
