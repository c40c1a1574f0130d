"""RingStorage: the rows of a :class:`~epochtrain.data.buffer.ReplayBuffer`, a ring per env.

Preallocated ``[capacity // num_envs, num_envs]`` storage: the collector writes one row per
vector step (one transition per env, all envs at the same time index), so each env's column
keeps its rollout order. This base class writes rows (:meth:`RingStorage.add`), keeps the
counters (fill level, invalid rows), and saves and restores them
(:meth:`~RingStorage.state_dict`, :meth:`~RingStorage.mark` and
:meth:`~RingStorage.rewind`); :mod:`epochtrain.data.buffer` reads them (sampling, n-step
transitions, rollouts) and holds the buffer files, :mod:`epochtrain.data.buffer_storage`
the arrays and the file format.

A mark makes a later rewind exact, in a full ring too: while it is in use (see
:class:`SavedRows`), each block of rows of older data is copied just before the first
change to it, and a rewind puts the copies back. ``add`` pays one lookup for that, plus
one block copy (:data:`SAVE_BLOCK_BYTES`) per block of rows it overwrites first.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from epochtrain.data.batch import EXTRA_FIELDS
from epochtrain.data.buffer_storage import (
    BUFFER_FORMAT_VERSION,
    ObsArray,
    alloc,
    alloc_obs,
    check_memory,
    check_state,
    copy_rows,
    empty_rows,
    flat_views,
    numpy_views,
    obs_index,
    put_rows,
    write_obs,
)
from epochtrain.data.n_step import NStepTable

__all__ = ["SAVE_BLOCK_BYTES", "SAVE_BLOCK_ROWS", "BufferMark", "RingStorage", "SavedRows"]

SAVE_BLOCK_ROWS = 64
"""The most time rows a mark's recording copies at once (aligned blocks): the collector
overwrites rows in order, so a block is copied with one numpy call per field instead of
one per row, and at most a block more is copied than the rows overwritten."""
SAVE_BLOCK_BYTES = 1 << 20
"""A block holds fewer rows when more would take more bytes than this (at least one row)."""


class RingStorage:
    """Ring storage of transitions from ``num_envs`` parallel envs: writing, counters and
    state (:class:`~epochtrain.data.buffer.ReplayBuffer` adds reading).

    ``capacity`` counts transitions over all envs; each env's ring holds
    ``capacity // num_envs`` of them. ``device`` is where sampled batches go.
    """

    def __init__(self, capacity: int, num_envs: int = 1, *, device: str | torch.device = "cpu"):
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if not isinstance(capacity, int) or capacity < num_envs:
            raise ValueError(
                f"capacity must be an int >= num_envs ({num_envs}), got {capacity!r}: "
                "each env needs room for at least one transition"
            )
        self.capacity = capacity
        self.num_envs = num_envs
        self.rows = capacity // num_envs
        self.device = torch.device(device)
        self.source: str | None = None
        """Where the transitions came from (the file of :meth:`load`, ``minari:<id>`` of
        :meth:`from_minari`), named in errors about the data; None for a buffer filled here."""
        self._cursor = 0  # next time row to write
        self._size = 0  # filled time rows
        self._n_invalid = 0
        self._rows_written = 0  # since construction: lets rewind() tell what was overwritten
        self._clears = 0
        # bumped whenever rows change other than by add() (clear, rewind, a load,
        # end_episodes): the n-step table is then refilled instead of brought up to date
        self._layout = 0
        self._n_step: NStepTable | None = None
        self._storage: dict[str, Any] | None = None
        self._views: dict[str, Any] = {}
        self._flat: dict[str, Any] = {}  # the views as [rows * envs, ...]: sampling gathers
        self._flat_obs = True  # obs are one array (not a dict): written without recursion
        # Invalid transitions per time row, so overwriting a row needs no scan of it; made
        # with the storage, after its memory check (a list of 1e10 rows would not fit)
        self._row_invalid: list[int] = []
        # the recording of the last mark(): held weakly, so it ends with its mark
        self._saving: weakref.ref[SavedRows] | None = None
        self._block_pool: list[dict[str, Any]] = []  # row copies, reused from mark to mark
        self._blocks_used = 0
        self._block_rows = 1  # rows per block, set with the storage

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
        """Write one transition per env at the current time row.

        ``valid`` marks rows that hold a real transition (False for the reset step of a
        NEXT_STEP-autoreset env); those rows are never sampled nor learned from.
        """
        if self._storage is None:
            self._allocate(obs, act, extras or {})
        t = self._cursor
        saving = self._saving
        if saving is not None:  # a mark in use: row t's old content is copied first
            saved = saving()
            if saved is None or not saved.done[t]:
                self._save_before_change(t)
        v = self._views
        if self._flat_obs:
            v["obs"][t] = obs
            v["obs_next"][t] = obs_next
        else:
            write_obs(v["obs"], t, obs)
            write_obs(v["obs_next"], t, obs_next)
        v["act"][t] = act
        v["rew"][t] = rew
        v["terminated"][t] = terminated
        v["truncated"][t] = truncated
        if valid is None:
            v["valid"][t] = True
            n_invalid = 0
        else:
            v["valid"][t] = valid
            n_invalid = self.num_envs - int(np.count_nonzero(valid))
        self._n_invalid += n_invalid - self._row_invalid[t]
        self._row_invalid[t] = n_invalid
        if extras:
            for k, value in extras.items():
                v[k][t] = value
        self._cursor = t + 1 if t + 1 < self.rows else 0
        self._rows_written += 1
        if self._size < self.rows:
            self._size += 1

    def end_episodes(self) -> None:
        """Mark the newest transition of each env truncated, unless it already ends its
        episode (or is an invalid reset step).

        For a collector that abandons the episodes in progress (``Collector.reset``, a
        resume whose envs could not be saved): each env's next row starts a new episode,
        so no n-step window may run on into it. The newest ``obs_next`` is the genuine next
        observation, so the transition still bootstraps from it, as a time-limit cut does.
        """
        if self._storage is None or self._size == 0:
            return
        t = (self._cursor - 1) % self.rows
        if self._saving is not None:
            self._save_before_change(t)
        v = self._views
        v["truncated"][t] |= v["valid"][t] & ~v["terminated"][t]
        self._layout += 1  # the n-step windows that ran through row t are summed anew

    def _allocate(self, obs: ObsArray, act: np.ndarray, extras: dict[str, np.ndarray]) -> None:
        allowed = tuple(k for k in EXTRA_FIELDS if k != "valid")
        unknown = set(extras) - set(allowed)
        if unknown:
            raise ValueError(
                f"extras {sorted(unknown)} are not Batch fields an algorithm may fill; "
                f"allowed: {allowed} (``valid`` is the buffer's own)"
            )
        n, rows = self.num_envs, self.rows
        act_arr = np.asarray(act)
        if act_arr.dtype == np.float64:
            act_arr = act_arr.astype(np.float32)
        check_memory(obs, act_arr, rows, n)
        storage: dict[str, Any] = {
            "obs": alloc_obs(obs, rows, n),
            "obs_next": alloc_obs(obs, rows, n),
            "act": alloc(act_arr, rows, n),
            "rew": torch.zeros((rows, n), dtype=torch.float32),
            "terminated": torch.zeros((rows, n), dtype=torch.bool),
            "truncated": torch.zeros((rows, n), dtype=torch.bool),
            "valid": torch.zeros((rows, n), dtype=torch.bool),
        }
        for k, value in extras.items():
            storage[k] = alloc(np.asarray(value), rows, n)
        self._set_storage(storage)

    def _set_storage(self, storage: dict[str, Any]) -> None:
        self._storage = storage
        self._block_pool, self._blocks_used = [], 0  # shaped as the old storage
        row_bytes = sum(field.nbytes for field in _leaves(storage)) // self.rows
        self._block_rows = max(1, min(SAVE_BLOCK_ROWS, SAVE_BLOCK_BYTES // max(row_bytes, 1)))
        self._row_invalid = [0] * self.rows
        self._views = {k: numpy_views(v) for k, v in storage.items()}
        self._flat = {k: flat_views(v) for k, v in self._views.items()}
        self._flat_obs = isinstance(storage["obs"], Tensor)

    def clear(self) -> None:
        """Forget every transition (storage stays allocated)."""
        self._clears += 1
        self._layout += 1
        self._cursor = 0
        self._size = 0
        self._n_invalid = 0
        self._row_invalid = [0] * len(self._row_invalid)

    # ---------------------------------------------------------------- counters
    @property
    def cursor(self) -> int:
        """The time row the next ``add`` writes (the newest row is the one before it)."""
        return self._cursor

    def __len__(self) -> int:
        """Number of stored transitions over all envs."""
        return self._size * self.num_envs

    @property
    def n_valid(self) -> int:
        """Number of stored transitions that can be sampled."""
        return len(self) - self._n_invalid

    # --------------------------------------------------------------- persisting
    def state_dict(self) -> dict[str, Any]:
        """A copy of the filled rows, the cursor and the fill level, for checkpoints and files.

        Only the ``size`` filled time rows are copied, so a checkpoint's size follows the
        fill level, not the capacity (a ring that has wrapped is full: every row is data).
        """
        storage = None
        if self._storage is not None:
            size = self._size
            storage = {
                k: obs_index(v, lambda t: t[:size].clone()) for k, v in self._storage.items()
            }
        return {
            "format_version": BUFFER_FORMAT_VERSION,
            "capacity": self.capacity,
            "num_envs": self.num_envs,
            "cursor": self._cursor,
            "size": self._size,
            "n_invalid": self._n_invalid,
            "storage": storage,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (capacity and num_envs must match).

        Checked first (:meth:`check_state_dict`): on error the buffer is unchanged. The
        storage is copied, so ``state`` can be loaded again or into several buffers.
        """
        self.check_state_dict(state)
        self._load_state(state, copy=True)

    def check_state_dict(self, state: Any) -> None:
        """Raise ``ValueError`` naming the entry unless :meth:`load_state_dict` can restore
        ``state`` into this buffer (capacity, num_envs, counters, field shapes); changes
        nothing."""
        fields = None if self._storage is None else set(self._storage)
        check_state(state, capacity=self.capacity, num_envs=self.num_envs, fields=fields)

    def _load_state(self, state: dict[str, Any], *, copy: bool) -> None:
        storage = state["storage"]
        if storage is not None:
            rows = self.rows

            def own(t: Tensor) -> Tensor:
                t = t.detach().to("cpu")
                if t.shape[0] == rows:  # a full ring, or a file of the capacity-sized format
                    return t.clone() if copy else t.contiguous()
                full = torch.zeros((rows, *t.shape[1:]), dtype=t.dtype)
                full[: t.shape[0]] = t
                return full

            storage = {k: obs_index(v, own) for k, v in storage.items()}
        self._layout += 1
        self._stop_saving()  # other rows: a rewind past here is not exact
        self._cursor = int(state["cursor"])
        self._size = int(state["size"])
        if storage is None:
            self._storage, self._views, self._flat = None, {}, {}
            self._row_invalid = []
        else:
            self._set_storage(storage)
            # Rows past the fill level may hold stale flags from before a clear().
            invalid = (~storage["valid"][: self._size]).sum(dim=1)
            self._row_invalid[: self._size] = invalid.tolist()
        self._n_invalid = sum(self._row_invalid)

    def mark(self) -> BufferMark:
        """The write position now, for :meth:`rewind`: O(rows) for the per-row counts.

        While the mark is in use (referenced), each row of older data is copied before its
        first change (:class:`SavedRows`), so :meth:`rewind` restores it exactly, even from
        a full ring. One mark records at a time: a new mark ends the recording of the last
        one (a rewind to that one then marks the overwritten rows invalid, as after a load).
        """
        self._stop_saving()
        del self._block_pool[self._blocks_used :]  # keep what the last recording took
        self._blocks_used = 0
        saved = SavedRows(self._size, self.rows)
        self._saving = weakref.ref(saved)
        return BufferMark(
            self._cursor,
            self._size,
            self._rows_written,
            self._clears,
            list(self._row_invalid),
            saved=saved,
        )

    def rewind(self, mark: BufferMark) -> None:
        """Forget the rows written since ``mark`` and put back the rows of older data
        they overwrote, so the buffer is as it was at ``mark``.

        Exact while ``mark`` recorded (the last mark, no load since, see :meth:`mark`), and
        it records on: a second rewind to it is exact too. Otherwise rows of older data
        that were overwritten since are marked invalid (never sampled): their old content
        is gone.
        """
        saved = mark.saved
        exact = saved is not None and saved.complete
        if saved is not None and self._storage is not None:
            for start, stop, block in saved.blocks:
                for name, copies in block.items():
                    put_rows(self._views[name], start, stop, copies)
        written = self._rows_written - mark.rows_written
        rewound = [(mark.cursor + i) % self.rows for i in range(min(written, self.rows))]
        if mark.clears != self._clears:  # cleared since: any old row may have been rewritten
            rewound = list(range(min(written, self.rows)))
            overwritten = list(range(mark.size))
        else:
            overwritten = [row for row in rewound if row < mark.size]
        if exact:
            overwritten = []  # every row changed since was put back
        self._cursor, self._size, self._rows_written = mark.cursor, mark.size, mark.rows_written
        self._clears = mark.clears
        self._layout += 1
        self._row_invalid = list(mark.row_invalid)
        if self._storage is not None and not self._row_invalid:  # marked before the storage
            self._row_invalid = [0] * self.rows
        if overwritten and self._storage is not None:
            self._storage["valid"][overwritten] = False
            for row in overwritten:
                self._row_invalid[row] = self.num_envs
        self._n_invalid = sum(self._row_invalid[: self._size])
        if saved is not None and exact:
            saved.restart()  # the buffer is at the mark again: record anew from here
            self._blocks_used = 0
        else:
            self._stop_saving()
        empty = [row for row in rewound if row >= mark.size]  # rows put back keep theirs
        self._forget_rows(sorted(set(empty) | set(overwritten)))

    def _forget_rows(self, rows: list[int]) -> None:
        """Subclasses drop what they keep about ``rows`` (e.g. sampling priorities): rows
        that were empty at the mark a rewind returned to, or whose content it lost."""

    def _save_before_change(self, t: int) -> None:
        """Copy the block of time row ``t`` for the mark in use, unless it is copied already
        (or was empty at the mark); end a recording whose mark is gone."""
        assert self._saving is not None
        saved = self._saving()
        if saved is None:  # its mark was dropped
            self._saving = None
        elif not saved.done[t] and self._storage is not None:
            block_rows = self._block_rows
            start = t - t % block_rows
            stop = min(start + block_rows, saved.size)
            if self._blocks_used == len(self._block_pool):
                self._block_pool.append(
                    {name: empty_rows(view, block_rows) for name, view in self._views.items()}
                )
            block = self._block_pool[self._blocks_used]
            self._blocks_used += 1
            for name, view in self._views.items():
                copy_rows(view, start, stop, block[name])
            saved.blocks.append((start, stop, block))
            saved.done[start:stop] = b"\x01" * (stop - start)

    def _stop_saving(self) -> None:
        """End the recording in use and drop its copies (their blocks are reused): a rewind
        to its mark marks the rows overwritten since invalid."""
        saved = self._saving() if self._saving is not None else None
        if saved is not None:
            saved.complete = False
            saved.blocks = []
        self._saving = None


def _leaves(storage: dict[str, Any]) -> list[Tensor]:
    """The tensors of a storage dict (dict observations flattened)."""
    found: list[Tensor] = []
    for value in storage.values():
        found += _leaves(value) if isinstance(value, dict) else [value]
    return found


class SavedRows:
    """Which rows of older data a buffer changed since a :class:`BufferMark`, and their
    copies (every field, a block of rows at a time, made before the first change), for
    :meth:`RingStorage.rewind`.

    Held by its mark only (the buffer refers to it weakly): once the mark is dropped (an
    epoch that completes drops its snapshot) the buffer copies no more. The blocks are the
    buffer's, reused by the next mark's recording (fresh memory would cost more in page
    faults than the copying): they take at most the rows the last mark saw overwritten, plus
    a block.
    """

    def __init__(self, size: int, rows: int) -> None:
        self.size = size
        """Filled time rows at the mark: only those hold data to keep."""
        self.rows = rows
        self.done = bytearray(0)
        """Per time row: 1 once copied, or if it was empty at the mark (nothing to keep)."""
        self.blocks: list[tuple[int, int, dict[str, Any]]] = []
        """``(first row, end row, {field: copy})``, in the order they were copied."""
        self.complete = True
        """False once rows may have changed without being copied (another mark, a load)."""
        self.restart()

    def restart(self) -> None:
        """Forget the copies: the buffer is as it was at the mark."""
        self.blocks = []
        self.done = bytearray(self.size) + b"\x01" * (self.rows - self.size)


@dataclass(frozen=True)
class BufferMark:
    """A buffer's write position, from :meth:`ReplayBuffer.mark`."""

    cursor: int
    size: int
    rows_written: int
    clears: int
    row_invalid: list[int]
    extra: dict[str, Any] | None = None
    """What a subclass keeps beside the rows and restores on rewind (e.g. priorities)."""
    saved: SavedRows | None = field(default=None, compare=False, repr=False)
    """The copies of the rows of older data changed since, made while the mark is in use."""
