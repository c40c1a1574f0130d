"""N-step sums of a replay buffer's transitions, kept in a table between minibatches.

For transition ``(t, env)`` of a ring buffer the n-step sum is ``sum_k gamma**k * r[t + k]``
over the ``m <= n_step`` steps up to and including the first that ends the episode
(terminated or truncated), never past the newest written row; ``last`` is the flat index
of step ``m - 1`` (whose ``obs_next``, ``terminated`` and ``truncated`` the n-step
transition takes) and ``discount`` is ``gamma**m``, or 0 when that step terminated.

:class:`NStepTable` holds the three for every flat index (``time * num_envs + env``) and
:func:`refresh` brings it up to date: a write of row ``t`` changes only the rows whose
window reaches ``t``, the ``n_step - 1`` rows before it and itself, so a refresh after ``w``
new rows recomputes ``w + n_step - 1`` rows per env instead of the buffer. The buffer reads
the table with a few gathers per minibatch (:meth:`ReplayBuffer.n_step_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["NStepTable", "RingView", "refresh"]

SCALAR_ROWS = 16
"""Up to this many transitions a refresh loops over numpy scalars, not arrays."""


@dataclass(frozen=True)
class RingView:
    """What a refresh reads of a buffer: flat ``rew``/``terminated``/``truncated`` views
    (``[rows * num_envs]``) and the ring's shape and write position."""

    rew: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    rows: int
    num_envs: int
    cursor: int
    """The time row the next write goes to (the newest row is the one before)."""


@dataclass
class NStepTable:
    """Per-transition n-step sums of a buffer for one ``(n_step, gamma)``, flat-indexed."""

    n_step: int
    gamma: float
    layout: int
    """The buffer's layout counter when the table was filled (a change refills it)."""
    rows_written: int
    """The buffer's rows written when the table was last brought up to date."""
    ret: np.ndarray
    last: np.ndarray
    discount: np.ndarray

    @classmethod
    def empty(cls, n_step: int, gamma: float, size: int, layout: int) -> NStepTable:
        """A table of ``size`` zeroed transitions (16 bytes each)."""
        return cls(
            n_step,
            gamma,
            layout,
            0,
            np.zeros(size, dtype=np.float32),
            np.zeros(size, dtype=np.int64),
            np.zeros(size, dtype=np.float32),
        )


def refresh(
    table: NStepTable | None,
    ring: RingView,
    *,
    n_step: int,
    gamma: float,
    rows_written: int,
    layout: int,
) -> NStepTable:
    """``table`` brought up to date with ``ring``, or a new table filled anew.

    Filled anew when there is none yet, it is of another ``(n_step, gamma)`` or
    ``layout`` (rows changed other than by writes: a clear, a rewind, a load), or more rows
    were written since than the ring holds; else only the rows whose windows reach the
    ``rows_written - table.rows_written`` new rows are recomputed.
    """
    n, rows = ring.num_envs, ring.rows
    new = rows_written - (table.rows_written if table is not None else 0)
    if (
        table is None
        or (table.n_step, table.gamma) != (n_step, gamma)
        or table.layout != layout
        or new + n_step - 1 >= rows
    ):
        table = NStepTable.empty(n_step, gamma, rows * n, layout)
        flat: list[int] | np.ndarray = np.arange(rows * n)
    elif new:
        # rows t whose window t .. t + n_step - 1 holds a row written since: the new
        # rows and the n_step - 1 before them (no other row's window or end changed)
        count = new + n_step - 1
        first = ring.cursor - count
        if count * n <= SCALAR_ROWS:  # a gradient step per env step: Python ints, no arrays
            flat = [(first + j) % rows * n + e for j in range(count) for e in range(n)]
        else:
            t = (first + np.arange(count)) % rows
            flat = (t[:, None] * n + np.arange(n)).reshape(-1)
    else:
        return table
    if len(flat) <= SCALAR_ROWS:
        for i in flat if isinstance(flat, list) else flat.tolist():
            table.ret[i], table.last[i], table.discount[i] = _sum_one(ring, i, n_step, gamma)
    else:
        assert isinstance(flat, np.ndarray)
        ret, last, discount = _sum_many(ring, flat, n_step, gamma)
        table.ret[flat], table.last[flat], table.discount[flat] = ret, last, discount
    table.rows_written = rows_written
    return table


def _sum_many(
    ring: RingView, index: np.ndarray, n_step: int, gamma: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sums, flat index of the last step used, and bootstrap factors at flat ``index``."""
    rew, term, trunc, n = ring.rew, ring.terminated, ring.truncated, ring.num_envs
    total = ring.rows * n
    # rows from t to the newest written one (cursor - 1), t included
    available = (ring.cursor - 1 - index // n) % ring.rows + 1
    ret = rew[index]  # k = 0, always used (a new array)
    steps = np.ones(index.shape, dtype=np.int64)
    active = ~(term[index] | trunc[index]) & (available > 1)
    for k in range(1, n_step):  # numpy: a few microseconds per op
        flat = (index + k * n) % total  # row t + k of the same env, wrapped
        ret += np.where(active, gamma**k * rew[flat], np.float32(0.0))
        steps += active
        if k + 1 < n_step:  # the last step's end flags decide nothing
            active &= ~(term[flat] | trunc[flat]) & (k + 1 < available)
    last = (index + (steps - 1) * n) % total
    discount = np.where(term[last], 0.0, np.power(gamma, steps, dtype=np.float64))
    return ret, last, discount.astype(np.float32)


def _sum_one(ring: RingView, i: int, n_step: int, gamma: float) -> tuple[np.float32, int, float]:
    """:func:`_sum_many` for one flat index, with numpy scalars: the same float32 operations
    in the same order (so the same bits), without an array op's overhead (an env step of
    one env refreshes ``n_step`` rows)."""
    rew, term, trunc, n = ring.rew, ring.terminated, ring.truncated, ring.num_envs
    total = ring.rows * n
    available = (ring.cursor - 1 - i // n) % ring.rows + 1
    ret = rew[i]
    steps = 1
    active = not (term[i] or trunc[i]) and available > 1
    for k in range(1, n_step):
        flat = (i + k * n) % total
        # an unused step adds +0.0, as the array version's where(): -0.0 becomes 0.0
        ret = ret + (np.float32(gamma**k) * rew[flat] if active else np.float32(0.0))
        steps += active
        if k + 1 < n_step:
            active = active and not (term[flat] or trunc[flat]) and k + 1 < available
    last = (i + (steps - 1) * n) % total
    return ret, last, 0.0 if term[last] else float(np.float32(gamma**steps))
