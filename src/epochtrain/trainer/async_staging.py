"""Staging for asynchronous collection: what a collect step in the worker thread writes is
held back until the main thread lands it, in the order of synchronous collection.

Holds :class:`StagedRows` (the replay-buffer rows of the collect step) and the protocol
:class:`StagedActObsTransform` (statistics the policy's observations update, such as an
``ObservationNormalizer``'s). The worker thread and the collect step that use them are
:class:`~epochtrain.trainer.async_collection.AsyncCollection`'s
(:mod:`epochtrain.trainer.async_collection`, which states the contract and re-exports both
names); the training step that lands them is in :mod:`epochtrain.trainer.async_training`.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from epochtrain.data.buffer import ObsArray, ReplayBuffer
from epochtrain.data.collector import ObsTransform

__all__ = ["StagedActObsTransform", "StagedRows"]


class StagedRows(ReplayBuffer):
    """Stands in for the replay buffer while a collect step runs in the worker thread:
    :meth:`add` records its arguments (small arrays copied), :meth:`replay_into` adds them
    to the real buffer in order, in the main thread. Stores nothing else."""

    def __init__(self, num_envs: int) -> None:
        super().__init__(num_envs, num_envs)
        self.staged: list[tuple[Any, ...]] = []
        """The recorded ``add`` calls, oldest first."""

    def add(
        self,
        obs: ObsArray,
        act: np.ndarray,
        rew: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        obs_next: ObsArray,
        extras: dict[str, np.ndarray] | None = None,
        valid: np.ndarray | None = None,
    ) -> None:
        """Record one row; observations are kept as given (the collector never reuses
        them), the other arrays are copied."""
        self.staged.append(
            (
                obs,
                np.array(act),
                np.array(rew),
                np.array(terminated),
                np.array(truncated),
                obs_next,
                None if extras is None else {k: np.array(v) for k, v in extras.items()},
                None if valid is None else np.array(valid),
            )
        )

    def replay_into(self, buffer: ReplayBuffer) -> None:
        """``buffer.add`` every recorded row, oldest first, then forget them."""
        for row in self.staged:
            buffer.add(*row)
        self.staged.clear()


class StagedActObsTransform(Protocol):
    """An ``act_obs_transform`` with state that each new observation updates (the running
    statistics of an ``ObservationNormalizer``), staged like the rows of a collect step: the
    worker's collect step updates a copy, and the main thread keeps or drops the copy when
    the step lands. Between two landings the state the main thread reads (the learner's
    minibatches, a test step, a checkpoint) does not change, and the updates are made in
    the order of synchronous collection."""

    def fork(self) -> ObsTransform:
        """Main thread, before a collect step starts: the transform its collector uses,
        updating a copy of the current state."""
        ...

    def land(self, keep: bool) -> None:
        """Main thread, after that collect step: make its copy the state (``keep``: its
        rows were added to the buffer) or drop it (its rows were dropped)."""
        ...
