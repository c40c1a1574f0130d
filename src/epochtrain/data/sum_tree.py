"""SumTree: a wide sum tree of priorities, searched a whole batch of prefixes at a time.

Built for :class:`~epochtrain.data.prioritized.PrioritizedReplayBuffer`: a leaf holds a
transition's priority, a search turns prefixes of the total into leaves.

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

import numpy as np

__all__ = ["SumTree"]


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
