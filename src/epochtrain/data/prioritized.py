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

Cost: between two gradient steps the caches go cold and each numpy call costs a few
microseconds whatever its size, so the tree is built for few calls, not few operations.
:class:`SumTree` has 32 children per node and a top level of up to 4,096 nodes, so up to
131k transitions a draw is one cumulative sum over the top level with a binary search
into it, then one ``[batch, 32]`` gather with a cumulative sum along it to pick the leaf
(about a dozen numpy calls for the whole batch); writing priorities back sets the leaves
and recomputes each touched parent as the sum of its 32 children. A binary tree takes 17
levels of several numpy calls each for 100k transitions.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from epochtrain.data.batch import Batch
from epochtrain.data.buffer import BufferMark, ObsArray, ReplayBuffer

__all__ = ["PrioritizedReplayBuffer", "SumTree"]


class SumTree:
    """Wide sum tree of non-negative leaf values whose internal nodes hold their sums.

    Level 0 is the leaves; node ``i`` of level ``d + 1`` holds the sum of the
    ``branching`` nodes ``i * branching ... (i + 1) * branching - 1`` of level ``d`` (a
    "row" of siblings). Levels are added until one has at most ``top_width`` nodes. A
    search of a batch of prefixes takes one cumulative sum of that top level and a binary
    search into it, then per level below one ``[batch, branching]`` gather of the rows
    and a cumulative sum along them (with the defaults: no level below the top up to
    4,096 leaves, one up to 131k, two up to 4M), a few numpy calls each. Every level but
    the top is zero-padded to whole rows; the levels live in the flat :attr:`nodes`,
    leaves first. A parent is always ``sum(row)`` of its current children (the same numpy
    reduction whether one row or all are summed), so the tree is a pure function of its
    leaves: rebuilding it from them gives the same bits. Searches reuse arrays kept per
    batch size: one search at a time.
    """

    def __init__(self, n_leaves: int, *, branching: int = 32, top_width: int = 4096) -> None:
        if isinstance(n_leaves, bool) or not isinstance(n_leaves, int) or n_leaves < 1:
            raise ValueError(f"n_leaves must be a positive int, got {n_leaves!r}")
        if branching < 2 or branching & (branching - 1):
            raise ValueError(f"branching must be a power of two >= 2, got {branching!r}")
        if top_width < 1:
            raise ValueError(f"top_width must be >= 1, got {top_width!r}")
        self.n_leaves = n_leaves
        self.branching = branching
        self._shift = branching.bit_length() - 1
        sizes = [n_leaves]  # nodes per level, the leaves first
        while sizes[-1] > top_width:
            sizes.append(-(-sizes[-1] // branching))
        self.depth = len(sizes) - 1
        """Levels below the top one (0: the leaves are the top)."""
        padded = [-(-s // branching) * branching for s in sizes[:-1]] + [sizes[-1]]
        self.nodes = np.zeros(sum(padded), dtype=np.float64)
        """Every level, leaves first, in one array (copy it to snapshot the tree)."""
        ends = np.cumsum(padded).tolist()
        self._levels = [self.nodes[end - n : end] for n, end in zip(padded, ends, strict=True)]
        # the levels below the top as rows of siblings: row i sums to node i one level up
        self._rows = [level.reshape(-1, branching) for level in self._levels[:-1]]
        self._top = self._levels[-1]
        self._top_cum = np.zeros(len(self._top) + 1)  # [0, cumsum(top)], refilled per search
        self._scratch: dict[int, _Scratch] = {}

    @property
    def total(self) -> float:
        """Sum of all leaves (the top level summed in order, as a search sums it)."""
        return float(np.cumsum(self._top)[-1])

    @property
    def leaves(self) -> np.ndarray:
        """The leaf values (a view: do not write to it, use :meth:`update`)."""
        return self._levels[0][: self.n_leaves]

    def update(self, index: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``index`` to ``values`` (the last wins on repeats) and fix the sums."""
        node = np.asarray(index, dtype=np.int64)
        self._levels[0][node] = values
        shift = self._shift
        for rows, parents in zip(self._rows, self._levels[1:], strict=True):
            # repeated parents all get the same sum of the already updated children
            node = node >> shift
            parents[node] = rows[node].sum(axis=1)

    def set_all(self, values: np.ndarray) -> None:
        """Replace every leaf and rebuild all sums, level by level."""
        self.nodes[:] = 0.0
        self._levels[0][: self.n_leaves] = values
        for rows, parents in zip(self._rows, self._levels[1:], strict=True):
            parents[: len(rows)] = rows.sum(axis=1)

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """Leaf indices where the running sum of the leaves first exceeds each ``prefix``.

        ``prefix`` values are in ``[0, total)`` (larger ones are taken just below the
        total). Never a leaf whose value is 0.
        """
        value = np.array(prefix, dtype=np.float64).reshape(-1)
        if not len(value):
            return np.zeros(np.shape(prefix), dtype=np.int64)
        total = self._sum_top()
        np.minimum(value, math.nextafter(total, 0.0), out=value)
        leaf, _, _ = self._search(value)
        return leaf.reshape(np.shape(prefix))

    def stratified(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """Leaves drawn by stratified sampling, their values and the smallest of those.

        Draw ``i`` of ``n = len(u)`` is the leaf at the prefix ``(i + u[i]) / n * total``:
        one draw in each of ``n`` equal slices of the total, for ``u`` uniform in
        ``[0, 1)``. ``u`` (float64) is overwritten: pass an array you own.
        """
        n = len(u)
        total = self._sum_top()
        u += self._batch_scratch(n).strata
        u *= total / n
        if u[-1] >= total:  # the largest prefix, rounded up to the total
            u[-1] = math.nextafter(total, 0.0)
        return self._search(u)

    def _sum_top(self) -> float:
        """Fill the top level's running sums; the total (which must be > 0 and finite)."""
        cum = self._top_cum
        np.cumsum(self._top, out=cum[1:])
        total = float(cum[-1])
        if not 0.0 < total < math.inf:
            raise ValueError(
                f"the sum tree's leaves add up to {total}: there is nothing to draw from"
            )
        return total

    def _search(
        self, prefix: np.ndarray, *, clamp: bool = False
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """The leaves at ``prefix`` (in ``[0, total)``, after :meth:`_sum_top`), their
        values and the smallest of those; ``prefix`` is kept.

        Each level picks, in the node's row of children, the first whose running sum
        exceeds the value left: a child > 0 while the value is below the row's sum. A
        value within rounding of its node's end (``value - siblings before`` rounded up,
        or a parent summed in another order than the row's running sum) can reach the
        row's sum; without ``clamp`` such a draw takes the row's first child, and if a
        drawn leaf is then 0 the whole search is redone with ``clamp``, which keeps every
        value below its row's sum (two more numpy calls per level).
        """
        cum = self._top_cum
        # cum[node] <= prefix < cum[node + 1] (cum[0] = 0): top node `node` is > 0
        node = np.searchsorted(cum[1:], prefix, side="right")
        if self.depth:
            value = prefix - cum[node]
            s = self._batch_scratch(len(prefix))
            row_cum, row_total, shift = s.buf[:, 1:], s.buf[:, -1], self._shift
            for level in range(self.depth - 1, -1, -1):
                if not level:  # the leaves: only the child is needed, from a contiguous sum
                    row_cum, row_total = s.leaf_cum, s.leaf_cum[:, -1]
                np.cumsum(self._rows[level][node], axis=1, out=row_cum)
                if clamp:
                    np.minimum(value, np.nextafter(row_total, 0.0), out=value)
                # the first child whose running sum exceeds the value
                child = (row_cum > value[:, None]).argmax(axis=1)
                if level:
                    value -= s.flat[s.start + child]  # buf[i, child]: the siblings before
                node <<= shift
                node += child
        found = self._levels[0][node]
        smallest = float(found.min())
        if not smallest > 0.0:  # only after rounding at a row's end: search again, safely
            if clamp:
                raise RuntimeError("the sum tree drew a leaf of value 0 (a bug)")
            return self._search(prefix, clamp=True)
        return node, found, smallest

    def _batch_scratch(self, n: int) -> _Scratch:
        """The arrays a search of ``n`` prefixes reuses (made on the first one)."""
        scratch = self._scratch.get(n)
        if scratch is None:
            buf = np.zeros((n, self.branching + 1))
            start = np.arange(n) * (self.branching + 1)
            leaf_cum = np.zeros((n, self.branching))
            strata = np.arange(n, dtype=np.float64)
            scratch = _Scratch(buf, buf.reshape(-1), start, leaf_cum, strata)
            self._scratch[n] = scratch
        return scratch


@dataclasses.dataclass(frozen=True)
class _Scratch:
    """Arrays a search of ``n`` prefixes reuses (never shared between two searches)."""

    buf: np.ndarray
    """``[n, branching + 1]``: column 0 stays 0, the rest takes a row's cumulative sums."""
    flat: np.ndarray
    """``buf`` as one flat view."""
    start: np.ndarray
    """``arange(n) * (branching + 1)``: ``flat[start + j]`` is ``buf[:, j]``."""
    leaf_cum: np.ndarray
    """``[n, branching]``: a leaf row's cumulative sums (contiguous: compared faster)."""
    strata: np.ndarray
    """``arange(n)`` as float64: the stratum of each draw."""


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
