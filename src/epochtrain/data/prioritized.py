"""PrioritizedReplayBuffer: proportional prioritized replay over a vectorised sum tree.

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
and its ``post_learn`` hands the new ``|TD|`` to :meth:`update_priorities`. Every tree
operation is numpy over the batch, one pass per tree level: O(batch * log capacity).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import Tensor

from epochtrain.data.batch import Batch
from epochtrain.data.buffer import BufferMark, ObsArray, ReplayBuffer

__all__ = ["PrioritizedReplayBuffer", "SumTree"]


class SumTree:
    """Binary tree of non-negative leaf values whose internal nodes hold their sums.

    Stored flat in float64, the root at 1 and the children of node ``i`` at ``2i`` and
    ``2i + 1``; leaf ``j`` is node ``size + j`` where ``size`` is a power of two.
    Each internal node is always ``left + right`` of its current children, so the tree
    is a pure function of its leaves (rebuilding it from them gives the same bits).
    """

    def __init__(self, n_leaves: int) -> None:
        if n_leaves < 1:
            raise ValueError(f"n_leaves must be a positive int, got {n_leaves!r}")
        self.n_leaves = n_leaves
        self.depth = max(1, (n_leaves - 1).bit_length())
        self.size = 1 << self.depth  # at least 2, so the root is never a leaf
        self.nodes = np.zeros(2 * self.size, dtype=np.float64)

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self.nodes[1])

    @property
    def leaves(self) -> np.ndarray:
        """The leaf values (a view: do not write to it, use :meth:`update`)."""
        return self.nodes[self.size : self.size + self.n_leaves]

    def update(self, index: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``index`` to ``values`` (the last wins on repeats) and fix the sums."""
        nodes = np.asarray(index, dtype=np.int64) + self.size
        self.nodes[nodes] = values
        tree = self.nodes
        for _ in range(self.depth):
            # repeated parents all get the same sum of the already updated children
            nodes >>= 1
            left = nodes << 1
            tree[nodes] = tree[left] + tree[left + 1]

    def set_all(self, values: np.ndarray) -> None:
        """Replace every leaf and rebuild all sums, level by level."""
        self.nodes[:] = 0.0
        self.nodes[self.size : self.size + self.n_leaves] = values
        level = self.size
        while level > 1:
            parents = np.arange(level // 2, level)
            self.nodes[parents] = self.nodes[2 * parents] + self.nodes[2 * parents + 1]
            level //= 2

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """Leaf indices where the running sum of the leaves first exceeds each ``prefix``.

        ``prefix`` values are in ``[0, total)``. The descent never enters a zero subtree,
        so rounding cannot select a leaf whose value is 0.
        """
        value = np.array(prefix, dtype=np.float64)
        node = np.ones(value.shape, dtype=np.int64)
        tree = self.nodes
        for _ in range(self.depth):
            node <<= 1  # the left child
            left = tree[node]
            go_right = (value >= left) & (tree[node + 1] > 0)
            value -= left * go_right
            node += go_right
        return node - self.size


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
            rows = np.unique(np.asarray(self._pending, dtype=np.int64))
            valid = self._storage["valid"].numpy()[rows].reshape(-1)
            leaves = (rows[:, None] * self.num_envs + np.arange(self.num_envs)).reshape(-1)
            self.tree.update(leaves, np.where(valid, new, 0.0))
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
        self._flush()
        total = self.tree.total
        u = (torch.arange(batch_size, dtype=torch.float64) + torch.rand(batch_size)) / batch_size
        prefix = np.minimum(u.numpy() * total, np.nextafter(total, 0.0))
        return torch.from_numpy(self.tree.find(prefix))

    def sample(self, batch_size: int) -> Batch:
        """A prioritized minibatch; ``weight`` holds its normalised importance weights."""
        batch = super().sample(batch_size)
        assert batch.index is not None
        priority = self.tree.leaves[batch.index.numpy()]
        # (N P(i))^-beta / max_j (N P(j))^-beta: N and the total cancel out
        weight = (priority / priority.min()) ** -self.beta
        batch.weight = torch.as_tensor(weight, dtype=torch.float32, device=self.device)
        return batch

    def update_priorities(self, index: Tensor | np.ndarray, td_abs: Tensor | np.ndarray) -> None:
        """Set the priorities of flat ``index`` from their new absolute TD errors."""
        self._flush()
        if isinstance(index, Tensor):
            index = index.detach().cpu().numpy()
        if isinstance(td_abs, Tensor):
            td_abs = td_abs.detach().cpu().double().numpy()
        priority = np.abs(np.asarray(td_abs, dtype=np.float64)).reshape(-1) + self.eps
        if len(priority) != len(np.asarray(index).reshape(-1)):
            raise ValueError(
                f"td_abs has {len(priority)} values for {np.asarray(index).size} indices: "
                "pass one |TD error| per sampled index"
            )
        if not np.all(np.isfinite(priority)):
            raise ValueError("td_abs holds NaN or inf: the TD errors diverged")
        self.tree.update(np.asarray(index).reshape(-1), priority**self.alpha)
        self.max_priority = max(self.max_priority, float(priority.max()))

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
        undoes the priority updates and the ``beta`` progress made since."""
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
        """Rewound rows are never sampled again: their priorities become 0."""
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
