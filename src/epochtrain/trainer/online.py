"""OnlineTrainer: the training step shared by the on- and off-policy trainers.

One training step is: ``train_fn`` → ``policy.set_progress(env_step)`` → one collect step
on the training envs → (``test_in_train``: a test step when the collected episodes
already satisfy ``stop_fn``) → one update step (``policy_update_fn``), framed by the hook
points ``batch_process``, ``pre_steps_log``, ``pre_optim_steps`` before it and
``post_steps``, ``post_steps_log`` after it.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from epochtrain.data.batch import Batch
from epochtrain.data.buffer import ReplayBuffer
from epochtrain.data.collector import Collector
from epochtrain.envs import seed_spaces
from epochtrain.errors import EnvError, NonFiniteError
from epochtrain.logger import BaseLogger
from epochtrain.stats import CollectStats, TTrainingStats
from epochtrain.trainer.base import BaseTrainer
from epochtrain.trainer.hooks import call_callback
from epochtrain.trainer.params import OnlineParams, TrainerParams
from epochtrain.trainer.safety import on_nonfinite, restore_collector, with_run_context

__all__ = ["OnlineTrainer"]

_TRAIN_SPACES = 0x7472
"""The training envs' stream of :func:`~epochtrain.envs.seed_spaces` (the test envs' is
``trainer.epoch``'s ``_TEST_SPACES``)."""


class OnlineTrainer(BaseTrainer[TTrainingStats], ABC):
    """Base of the trainers that collect from envs; ``step_per_epoch`` counts env steps.

    Takes ``train_collector`` (with a buffer, over the policy); ``params`` is an
    :class:`OnlineParams` subclass: exactly one of ``step_per_collect`` (env steps per
    collect step) and ``episode_per_collect``.
    """

    params: OnlineParams
    params_cls: ClassVar[type[TrainerParams]] = OnlineParams
    train_collector: Collector

    def _attach(self, train_collector: Collector | None, buffer: ReplayBuffer | None) -> None:
        if buffer is not None:
            raise TypeError(
                f"{type(self).__name__} takes no buffer: its data comes from train_collector "
                "(an offline dataset goes to OfflineTrainer(buffer=...))"
            )
        if not isinstance(train_collector, Collector):
            raise TypeError(
                f"train_collector must be a Collector, got {type(train_collector).__name__}: "
                "build it with Collector(policy, envs, ReplayBuffer(capacity, num_envs))"
            )
        if train_collector.buffer is None:
            raise ValueError(
                "train_collector has no buffer; build it with "
                "Collector(policy, envs, ReplayBuffer(capacity, num_envs))"
            )
        if train_collector.policy is not self.policy:
            raise ValueError("train_collector.policy must be the trainer's policy")
        if self.test_collector is not None and self.test_collector.policy is not self.policy:
            raise ValueError("test_collector.policy must be the trainer's policy")
        self.train_collector = train_collector
        self.processed_rollout: Batch | None = None
        """During an update step: the collected rows as the ``batch_process`` hooks changed
        them (None when no such hook is registered)."""

    def _collectors(self) -> list[tuple[str, Collector]]:
        return [("train_collector", self.train_collector), *super()._collectors()]

    def _buffer_kind(self) -> str | None:
        return type(self.train_collector.buffer).__name__

    def reset(self, *, logger: BaseLogger | None = None) -> None:
        """Start over (see :meth:`BaseTrainer.reset`); the training envs are reset and the
        buffer cleared on the next step."""
        super().reset(logger=logger)
        assert self.train_collector.buffer is not None
        self.train_collector.buffer.clear()

    def _start(self) -> None:
        """Seed the training envs from the run's seed: their spaces' streams first
        (:func:`~epochtrain.envs.seed_spaces`; a reset may sample them), then their episodes
        by a seeded reset, then the vector action space random warm-up actions come from."""
        seed_spaces(self.train_collector.env, self.params.seed, stream=(_TRAIN_SPACES,))
        try:
            self.train_collector.reset(seed=self.params.seed)
        except (NonFiniteError, EnvError) as exc:  # closes every env, as in a collect
            self._collect_failed(exc)
        self.train_collector.env.action_space.seed(self.params.seed)

    def _collect(self, **kwargs: Any) -> int:
        """One collect step on the training envs; returns env steps collected.

        Non-finite env data goes through ``on_nonfinite`` (0 steps are returned when it
        stops the run); an env error is re-raised with the run's env step and epoch.
        """
        try:
            stat = self.train_collector.collect(**kwargs)
        except (NonFiniteError, EnvError) as exc:
            self._collect_failed(exc)
            return 0
        self._count_collect(stat)
        return stat.n_collected_steps

    def _collect_failed(self, exc: NonFiniteError | EnvError) -> None:
        """Non-finite env data goes to ``on_nonfinite``; an env error is raised again with
        the run's env step and epoch."""
        env_step = self.state.env_step + (exc.env_step or 0)
        if isinstance(exc, NonFiniteError):
            on_nonfinite(self, exc, f"env step {env_step}")
            self.state.env_step = env_step  # the run ends: count the steps the envs made
            return
        raise with_run_context(self, exc, env_step) from exc.__cause__

    def _count_collect(self, stat: CollectStats) -> None:
        """Count a training collect step in the run's state and log it."""
        self.state.env_step += stat.n_collected_steps
        self.state.train_episode += stat.n_collected_episodes
        self.state.collect_time += stat.collect_time
        self._epoch_collects.append(stat)
        self.logger.log_train_data(stat, self.state.env_step)

    def _training_step(self) -> int:
        if self.train_fn is not None:
            call_callback("train_fn", self.train_fn, self.state.epoch, self.state.env_step)
        self.policy.set_progress(self.state.env_step)
        if self.params.step_per_collect is not None:
            steps = self._collect(n_step=self.params.step_per_collect)
        else:
            steps = self._collect(n_episode=self.params.episode_per_collect)
        if self.stop_reason == "nonfinite":
            return steps
        stat = self._epoch_collects[-1]
        if self._should_test_in_train(stat.returns):
            self._test_step()
            if self.stop_reason == "nonfinite":
                return steps
            if self._stop_fn_fired():
                self._finish("stop_fn")
                return steps
        self._update(stat)
        return steps

    def _update(self, stat: CollectStats) -> None:
        """One update step framed by its hook points (the batch is built only if needed)."""
        ops = self._ops
        batch = None
        if ops["batch_process"] or ops["pre_steps_log"] or ops["post_steps_log"]:
            batch = ops.process("batch_process", self._collected_rows())
            self._log_ops("pre_steps_log", "train", self.state.env_step, batch)
        ops.call("pre_optim_steps")
        self.processed_rollout = batch
        try:
            self.policy_update_fn(stat)
        finally:
            self.processed_rollout = None
        ops.call("post_steps")
        if batch is not None:
            self._log_ops("post_steps_log", "train", self.state.env_step, batch)

    def _collected_rows(self) -> Batch:
        """The rows of the last collect step, ``[time, env]``, read back from the buffer."""
        buffer = self.train_collector.buffer
        assert buffer is not None
        n_rows = min(self.train_collector.last_collect_rows, buffer.rows)
        end = buffer.cursor  # the collect step's rows end just before the write position
        rows = (torch.arange(end - n_rows, end) % buffer.rows).unsqueeze(1)
        flat = (rows * buffer.num_envs + torch.arange(buffer.num_envs)).reshape(-1)
        shape = (n_rows, buffer.num_envs)
        return buffer.get(flat).map(lambda t: t.reshape(*shape, *t.shape[1:]))

    def state_dict(self) -> dict[str, Any]:
        """The base trainer's state plus the training collector (envs included) and buffer."""
        state = super().state_dict()
        buffer = self.train_collector.buffer
        assert buffer is not None
        state["train_collector"] = self.train_collector.state_dict(include_env=True)
        state["buffer"] = buffer.state_dict()
        return state

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """The base checks plus the buffer's and the training collector's."""
        super().check_state_dict(state)
        missing = [key for key in ("buffer", "train_collector") if key not in state]
        if missing:
            raise ValueError(f"the trainer state lacks the entries {missing}")
        buffer = self.train_collector.buffer
        assert buffer is not None
        buffer.check_state_dict(state["buffer"])
        self.train_collector.check_state_dict(state["train_collector"])

    def _load_parts(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (the logger aside).

        Envs that could not be saved (``AsyncVectorEnv``) restart their episodes with a
        reset seeded from the run's seed and env step, so the resumed run is deterministic,
        and the hooks are told (:func:`~epochtrain.trainer.safety.restore_collector`).
        """
        super()._load_parts(state)
        buffer = self.train_collector.buffer
        assert buffer is not None
        buffer.load_state_dict(state["buffer"])
        restore_collector(self, self.train_collector, state["train_collector"])

    def _should_test_in_train(self, train_returns: np.ndarray) -> bool:
        return (
            self.params.test_in_train
            and self.stop_fn is not None
            and len(train_returns) > 0
            and bool(call_callback("stop_fn", self.stop_fn, float(train_returns.mean())))
        )
