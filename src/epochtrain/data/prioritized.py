"""PrioritizedReplayBuffer: proportional prioritized replay over a wide sum tree.

Paper: Schaul, Quan, Antonoglou & Silver 2016, "Prioritized Experience Replay" (ICLR),
the proportional variant. Transition ``i`` is drawn with probability
``P(i) = p_i / sum_j p_j`` where ``p_i = (|delta_i| + eps) ** alpha`` and ``delta_i`` is
its last TD error; new transitions get the largest priority seen so far, so each is
replayed at least once soon. The sampling bias is corrected by importance weights
``w_i = (N * P(i)) ** -beta``, divided by the largest weight of the minibatch (the
paper's Algorithm 1), in ``batch.weight``; ``beta`` grows linearly from ``beta`` to 1
over ``beta_anneal_steps`` transitions added to this buffer.

Data flow: the collector calls :meth:`add` (one row per vector step, as for
:class:`ReplayBuffer`); the written rows are queued and their leaves set at the next
read, so a step costs O(1). :meth:`sample` draws stratified indices from the sum tree and
attaches the weights; the algorithm's ``learn`` multiplies its per-sample loss by them,
and its ``post_learn`` hands the new ``|TD|`` to :meth:`update_priorities`.

Cost: a draw of the whole batch is about a dozen numpy calls up to 131k transitions; why
the tree is wide rather than binary is told in :mod:`epochtrain.data.sum_tree`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from epochtrain.data.batch import Batch
from epochtrain.data.buffer import ObsArray, ReplayBuffer
from epochtrain.data.buffer_ring import BufferMark
from epochtrain.data.sum_tree import SumTree

__all__ = ["PrioritizedReplayBuffer"]


class PrioritizedReplayBuffer(ReplayBuffer):
    """Replay buffer sampling proportionally to ``(|TD error| + eps) ** alpha``.

    ``alpha``: how much prioritization (0 = uniform); ``beta``: the importance-weight
    exponent at the start, raised linearly to 1 over ``beta_anneal_steps`` added
    transitions (0 = 1 from the start); ``eps``: added to ``|TD|`` so no transition
    becomes unreachable. Invalid rows (NEXT_STEP reset steps) get priority 0.
    """

    def __init__(
        self,
        capacity: int,
        num_envs: int = 1,
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_anneal_steps: int = 100_000,
        eps: float = 1e-6,
        device: str | torch.device = "cpu",
    ) -> None:
        if not alpha >= 0.0:
            raise ValueError(f"alpha must be >= 0 (0 = uniform sampling), got {alpha!r}")
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {beta!r}")
        if not isinstance(beta_anneal_steps, int) or beta_anneal_steps < 0:
            raise ValueError(f"beta_anneal_steps must be an int >= 0, got {beta_anneal_steps!r}")
        if not eps > 0.0:
            raise ValueError(f"eps must be > 0 so every transition stays reachable, got {eps!r}")
        super().__init__(capacity, num_envs, device=device)
        self.alpha = alpha
        self.beta_start = beta
        self.beta_anneal_steps = beta_anneal_steps
        self.eps = eps
        self.tree = SumTree(self.rows * num_envs)
        self.max_priority = 1.0
        """Largest ``|TD| + eps`` seen (before ``alpha``): the priority of new transitions."""
        self.n_added = 0
        """Valid transitions added since construction or :meth:`clear` (drives ``beta``)."""
        self._pending: list[int] = []  # rows written since the tree last saw them

    @property
    def beta(self) -> float:
        """The importance-weight exponent now: linear in :attr:`n_added`, then 1."""
        if self.beta_anneal_steps == 0:
            return 1.0
        frac = min(1.0, self.n_added / self.beta_anneal_steps)
        return self.beta_start + frac * (1.0 - self.beta_start)

    # ----------------------------------------------------------------- writing
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
        """Write one row as :meth:`ReplayBuffer.add`; its priority is set at the next read."""
        row = self._cursor
        super().add(obs, act, rew, terminated, truncated, obs_next, extras, valid)
        if len(self._pending) < self.rows:  # a full list means: every row is new
            self._pending.append(row)
        self.n_added += self.num_envs if valid is None else int(np.count_nonzero(valid))

    def _flush(self) -> None:
        """Give the rows written since the last read the maximum priority (0 if invalid)."""
        if not self._pending:
            return
        assert self._storage is not None
        new = self.max_priority**self.alpha
        if len(self._pending) >= self.rows:
            valid = self._storage["valid"].numpy().reshape(-1).copy()
            valid[self._size * self.num_envs :] = False
            self.tree.set_all(np.where(valid, new, 0.0))
        else:
            # a row written twice gets the same value twice: no need to deduplicate
            leaves = np.asarray(self._pending, dtype=np.int64)
            if self.num_envs > 1:
                leaves = (leaves[:, None] * self.num_envs + np.arange(self.num_envs)).reshape(-1)
            self.tree.update(leaves, np.where(self._flat["valid"][leaves], new, 0.0))
        self._pending.clear()

    def clear(self) -> None:
        """Forget every transition, priority and the ``beta`` schedule's progress."""
        super().clear()
        self.tree = SumTree(self.rows * self.num_envs)
        self.max_priority = 1.0
        self.n_added = 0
        self._pending = []

    # ----------------------------------------------------------------- reading
    def sample_indices(self, batch_size: int) -> Tensor:
        """``batch_size`` flat indices drawn with probability proportional to priority.

        Stratified as in the paper: one draw in each of ``batch_size`` equal slices of
        the total priority, using torch's global generator.
        """
        return torch.from_numpy(self._draw(batch_size)[0])

    def _draw(self, batch_size: int) -> tuple[np.ndarray, np.ndarray, float]:
        """:meth:`sample_indices` as numpy, the priorities drawn and the smallest."""
        self._flush()
        return self.tree.stratified(torch.rand(batch_size, dtype=torch.float64).numpy())

    def sample(self, batch_size: int, *, n_step: int = 1, gamma: float = 0.99) -> Batch:
        """A prioritized minibatch; ``weight`` holds its normalised importance weights.

        ``n_step`` and ``gamma`` as in :meth:`ReplayBuffer.sample`.
        """
        self._check_sample(batch_size, n_step)
        index, priority, smallest = self._draw(batch_size)
        batch = self._get(torch.from_numpy(index), n_step, gamma, with_valid=False)
        # (N P(i))^-beta / max_j (N P(j))^-beta = (p_min / p_i)^beta: N and the total
        # cancel; computed in float64, stored in float32
        weight = np.empty(len(priority), dtype=np.float32)
        beta = self.beta
        if beta == 1.0:
            np.divide(smallest, priority, out=weight)
        else:
            np.power(np.divide(smallest, priority), beta, out=weight)
        if self.device.type == "cpu":
            batch.weight = torch.from_numpy(weight)
        else:
            batch.weight = torch.as_tensor(weight, device=self.device)
        return batch

    def update_priorities(self, index: Tensor | np.ndarray, td_abs: Tensor | np.ndarray) -> None:
        """Set the priorities of flat ``index`` from their new absolute TD errors."""
        self._flush()
        if isinstance(index, Tensor):
            index = index.detach().cpu().numpy()
        if isinstance(td_abs, Tensor):
            td_abs = td_abs.detach().cpu()
            if td_abs.dtype not in (torch.float32, torch.float64):
                td_abs = td_abs.double()
            td_abs = td_abs.numpy()
        index = np.asarray(index).reshape(-1)
        priority = np.abs(np.asarray(td_abs).reshape(-1), dtype=np.float64)
        if len(priority) != len(index):
            raise ValueError(
                f"td_abs has {len(priority)} values for {len(index)} indices: "
                "pass one |TD error| per sampled index"
            )
        if not len(priority):
            return
        priority += self.eps
        largest = float(priority.max())  # NaN if any is
        if not largest < math.inf:
            raise ValueError("td_abs holds NaN or inf: the TD errors diverged")
        self.tree.update(index, priority if self.alpha == 1.0 else priority**self.alpha)
        if largest > self.max_priority:
            self.max_priority = largest

    def priorities(self, index: Tensor | np.ndarray) -> np.ndarray:
        """Current sampling priorities ``p_i ** alpha`` of flat ``index`` (for inspection)."""
        self._flush()
        if isinstance(index, Tensor):
            index = index.cpu().numpy()
        result: np.ndarray = self.tree.leaves[np.asarray(index)].copy()
        return result

    # --------------------------------------------------------------- persisting
    def state_dict(self) -> dict[str, Any]:
        """The :class:`ReplayBuffer` state plus the priorities, settings and counters."""
        self._flush()
        state = super().state_dict()
        state["prioritized"] = {
            "alpha": self.alpha,
            "beta": self.beta_start,
            "beta_anneal_steps": self.beta_anneal_steps,
            "eps": self.eps,
            "max_priority": self.max_priority,
            "n_added": self.n_added,
            # the filled rows' priorities only: the file follows the fill level
            "leaves": torch.from_numpy(self.tree.leaves[: self._size * self.num_envs].copy()),
        }
        return state

    def mark(self) -> BufferMark:
        """The write position plus a copy of the priorities (O(capacity)), so a rewind also
        undoes the priority updates and the ``beta`` progress made since (the rows of
        older data overwritten since come back with their priorities)."""
        self._flush()  # nothing pending: no read happens before the next one anyway
        extra = {
            "nodes": self.tree.nodes.copy(),
            "max_priority": self.max_priority,
            "n_added": self.n_added,
        }
        return dataclasses.replace(super().mark(), extra=extra)

    def rewind(self, mark: BufferMark) -> None:
        """Forget the rows written since ``mark`` and restore the priorities, the largest
        priority and ``beta``'s progress of that moment."""
        if mark.extra is not None:
            self.tree.nodes[:] = mark.extra["nodes"]
            self.max_priority = float(mark.extra["max_priority"])
            self.n_added = int(mark.extra["n_added"])
            self._pending = []
        super().rewind(mark)

    def _forget_rows(self, rows: list[int]) -> None:
        """Rows a rewind emptied or could not put back are never sampled: priority 0."""
        self._flush()
        if rows:
            index = (np.asarray(rows)[:, None] * self.num_envs + np.arange(self.num_envs)).ravel()
            self.tree.update(index, np.zeros(len(index)))

    def _load_state(self, state: dict[str, Any], *, copy: bool) -> None:
        super()._load_state(state, copy=copy)
        self._pending = []
        prio = state.get("prioritized")
        self.tree = SumTree(self.rows * self.num_envs)
        if prio is None:  # a plain ReplayBuffer's state: every valid transition at max
            self.max_priority, self.n_added = 1.0, self.n_valid
            if self._storage is not None:
                self._pending = list(range(self._size))
                self._flush()
            return
        self.alpha = float(prio["alpha"])
        self.beta_start = float(prio["beta"])
        self.beta_anneal_steps = int(prio["beta_anneal_steps"])
        self.eps = float(prio["eps"])
        self.max_priority = float(prio["max_priority"])
        self.n_added = int(prio["n_added"])
        leaves = np.zeros(self.rows * self.num_envs)
        saved = prio["leaves"].numpy()
        leaves[: len(saved)] = saved
        self.tree.set_all(leaves)
