"""ReplayBuffer: preallocated ``[capacity // num_envs, num_envs]`` storage, a ring per env.

The collector writes one row per vector step (one transition per env, all envs at the
same time index), so each env's column keeps its rollout order and GAE or n-step returns
vectorise over the time axis. Storage is allocated on the first ``add`` from the shapes
and dtypes it sees, lives in CPU memory (writes go through numpy views, so a row costs a
few microseconds), and sampled batches are moved to ``device``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from epochtrain.data.batch import EXTRA_FIELDS, Batch
from epochtrain.data.buffer_storage import (
    BUFFER_FORMAT_VERSION,
    ObsArray,
    alloc,
    alloc_obs,
    check_memory,
    check_n_step,
    check_state,
    flags_as_bool,
    flat_views,
    gather,
    numpy_views,
    obs_index,
    read_state_file,
    write_obs,
    write_state_file,
)
from epochtrain.data.n_step import NStepTable, RingView, refresh
from epochtrain.errors import CheckpointError

__all__ = ["BUFFER_FORMAT_VERSION", "BufferMark", "ObsArray", "ReplayBuffer", "rollout_rows"]


def rollout_rows(env_steps: int, num_envs: int, *, same_step: bool) -> int:
    """Buffer rows (vector steps) a rollout of ``env_steps`` env steps over ``num_envs`` envs
    may take. With SAME_STEP autoreset, ``ceil(env_steps / num_envs)``; with NEXT_STEP (EnvPool,
    gymnasium's default) the step after each episode's end only resets its env and takes a
    row of its own, so up to twice that, plus one for an episode that ended on the previous
    rollout's last step."""
    rows = -(-env_steps // num_envs)
    return rows if same_step else 2 * rows + 1


class ReplayBuffer:
    """Ring buffer of transitions from ``num_envs`` parallel envs.

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

    # ----------------------------------------------------------------- reading
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

    def valid_values(self, field: str) -> Tensor:
        """The values of a tensor field (``"act"``, ``"rew"``, ...) at every valid stored
        transition, ``[n_valid, ...]``, in storage order (a copy of that field only), e.g. to
        check a dataset's actions once."""
        if self._storage is None or self._size == 0:
            return torch.zeros(0)
        values = self._storage[field]
        if not isinstance(values, Tensor):
            raise ValueError(f"field {field!r} is a dict of tensors: pass one of its tensors")
        size = self._size
        result: Tensor = values[:size][self._storage["valid"][:size]]
        return result

    def _batch(self, fn: Any) -> Batch:
        assert self._storage is not None
        s = self._storage
        extras = {k: fn(v) for k, v in s.items() if k in EXTRA_FIELDS}
        batch = Batch(
            obs=obs_index(s["obs"], fn),
            act=fn(s["act"]),
            rew=fn(s["rew"]),
            terminated=fn(s["terminated"]),
            truncated=fn(s["truncated"]),
            obs_next=obs_index(s["obs_next"], fn),
            **extras,
        )
        # storage lives in CPU memory: only another device needs a copy
        return batch if self.device.type == "cpu" else batch.to(self.device)

    def sample(self, batch_size: int, *, n_step: int = 1, gamma: float = 0.99) -> Batch:
        """``batch_size`` transitions drawn uniformly (with replacement) from valid rows.

        With ``n_step > 1`` they are ``n_step``-step transitions with discount ``gamma``
        (:meth:`n_step_batch`), each field gathered once. ``valid`` is left ``None``: every
        sampled row is valid. Uses torch's global generator, which the trainer swaps per
        trainer.
        """
        self._check_sample(batch_size, n_step)
        return self._get(self.sample_indices(batch_size), n_step, gamma, with_valid=False)

    def _check_sample(self, batch_size: int, n_step: int = 1) -> None:
        """ValueError unless ``batch_size`` transitions (of ``n_step`` steps) can be
        sampled (the :meth:`sample` of every subclass checks through here)."""
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        check_n_step(n_step)
        if self.n_valid == 0:
            raise ValueError("cannot sample from an empty ReplayBuffer: collect data first")

    def sample_indices(self, batch_size: int) -> Tensor:
        """Flat indices (``time * num_envs + env``) of ``batch_size`` valid transitions."""
        total = len(self)
        idx = torch.randint(total, (batch_size,))
        if self._n_invalid:
            assert self._storage is not None
            valid = self._storage["valid"].reshape(-1)
            bad = ~valid[idx]
            while bool(bad.any()):
                idx[bad] = torch.randint(total, (int(bad.sum()),))
                bad = ~valid[idx]
        return idx

    def get(self, flat_index: Tensor, *, n_step: int = 1, gamma: float = 0.99) -> Batch:
        """The transitions at flat indices ``time * num_envs + env`` (kept in ``index``),
        as ``n_step``-step transitions with discount ``gamma`` when ``n_step > 1``
        (:meth:`n_step_batch`, each field gathered once)."""
        check_n_step(n_step)
        return self._get(flat_index, n_step, gamma, with_valid=True)

    def _get(self, flat_index: Tensor, n_step: int, gamma: float, *, with_valid: bool) -> Batch:
        if self._storage is None:
            raise ValueError("the buffer is empty: collect data before reading it")
        # numpy gathers on flat views: a few microseconds per field where torch indexing
        # takes about three times as long on a minibatch
        i = flat_index.cpu().numpy()
        f = self._flat
        skip = () if with_valid else ("valid",)
        extras = {k: torch.from_numpy(f[k][i]) for k in f if k in EXTRA_FIELDS and k not in skip}
        if n_step == 1:
            step: dict[str, Any] = {
                "rew": torch.from_numpy(f["rew"][i]),
                "terminated": torch.from_numpy(f["terminated"][i]),
                "truncated": torch.from_numpy(f["truncated"][i]),
                "obs_next": gather(f["obs_next"], i),
            }
        else:
            step = self._n_step_fields(i, n_step, gamma)
        batch = Batch(
            obs=gather(f["obs"], i),
            act=torch.from_numpy(f["act"][i]),
            index=flat_index,
            **step,
            **extras,
        )
        return batch if self.device.type == "cpu" else batch.to(self.device)

    def n_step_batch(self, batch: Batch, n_step: int, gamma: float) -> Batch:
        """``batch`` (sampled, with ``index``) turned into ``n_step``-step transitions.

        For each sampled ``(t, env)``: ``rew`` becomes ``sum_k gamma**k * r[t + k]`` over
        the ``m <= n_step`` steps up to and including the first that ends the episode
        (terminated or truncated) and never past the newest written row; ``obs_next``,
        ``terminated`` and ``truncated`` are those of the last step used, and
        ``discount`` is ``gamma**m`` (0 when that step terminated), the factor on the
        bootstrap value of ``obs_next``. ``obs``, ``act`` and the extras are unchanged.

        The sums are kept in a table per ``(n_step, gamma)`` beside the storage and brought
        up to date on each call for the rows written since the last one (and the
        ``n_step - 1`` before them, whose windows reach the new rows), so a call gathers
        instead of summing; the first call, or one after ``clear``, ``rewind``,
        ``end_episodes`` or a load, fills the whole table once. The table takes 16 bytes per
        transition of capacity and is never saved: a loaded buffer fills it anew.
        """
        check_n_step(n_step)
        if batch.index is None:
            raise ValueError("batch.index is None: pass a batch from sample() or get()")
        result = replace(batch, **self._n_step_fields(batch.index.cpu().numpy(), n_step, gamma))
        return result if self.device.type == "cpu" else result.to(self.device)

    def _n_step_fields(self, index: np.ndarray, n_step: int, gamma: float) -> dict[str, Any]:
        """What an n-step window changes of the transitions at flat ``index``: the n-step
        return, the bootstrap discount, and ``terminated``, ``truncated`` and ``obs_next``
        of each window's last step (from the table, brought up to date)."""
        table = self._n_step_table(n_step, gamma)
        f = self._flat
        last = table.last[index]
        return {
            "rew": torch.from_numpy(table.ret[index]),
            "terminated": torch.from_numpy(f["terminated"][last]),
            "truncated": torch.from_numpy(f["truncated"][last]),
            "obs_next": gather(f["obs_next"], last),
            "discount": torch.from_numpy(table.discount[index]),
        }

    def _n_step_table(self, n_step: int, gamma: float) -> NStepTable:
        """The n-step table of ``(n_step, gamma)``, up to date with the storage."""
        if self._storage is None:
            raise ValueError("the buffer is empty: collect data before reading it")
        f = self._flat
        ring = RingView(
            f["rew"], f["terminated"], f["truncated"], self.rows, self.num_envs, self._cursor
        )
        self._n_step = refresh(
            self._n_step,
            ring,
            n_step=n_step,
            gamma=gamma,
            rows_written=self._rows_written,
            layout=self._layout,
        )
        return self._n_step

    def rollout(self) -> Batch:
        """Every stored transition shaped ``[time, env]``, oldest row first."""
        if self._size == 0:
            raise ValueError("the buffer is empty: collect a rollout before reading it")
        if self._size < self.rows:
            return self._batch(lambda t: t[: self._size])
        order = (torch.arange(self.rows) + self._cursor) % self.rows
        return self._batch(lambda t: t[order])

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
        """The write position now, for :meth:`rewind` (O(1) but for the per-row counts)."""
        return BufferMark(
            self._cursor, self._size, self._rows_written, self._clears, list(self._row_invalid)
        )

    def rewind(self, mark: BufferMark) -> None:
        """Forget the rows written since ``mark``.

        Exact while the ring had room; rows of older data that were overwritten since are
        marked invalid (never sampled), since their old content is gone.
        """
        written = self._rows_written - mark.rows_written
        rewound = [(mark.cursor + i) % self.rows for i in range(min(written, self.rows))]
        if mark.clears != self._clears:  # cleared since: any old row may have been rewritten
            rewound = list(range(min(written, self.rows)))
            overwritten = list(range(mark.size))
        else:
            overwritten = [row for row in rewound if row < mark.size]
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
        self._forget_rows(sorted(set(rewound) | set(overwritten)))

    def _forget_rows(self, rows: list[int]) -> None:
        """Subclasses drop what they keep about ``rows`` (e.g. sampling priorities)."""

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the buffer to ``path`` atomically (temporary file, fsync, then rename).

        A failed write (full disk) raises ``CheckpointError`` naming the file; an existing
        file at ``path`` is then untouched.
        """
        write_state_file(self.state_dict(), path)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, device: str | torch.device = "cpu"
    ) -> ReplayBuffer:
        """Read a buffer written by :meth:`save` (``weights_only``: no code runs).

        Raises ``FileNotFoundError`` or ``CheckpointError`` naming the path.
        """
        state = read_state_file(path)
        try:
            state = flags_as_bool(state)  # 0/1 numbers (D4RL's float terminals) lose nothing
            buf = cls(state["capacity"], state["num_envs"], device=device)
            buf.check_state_dict(state)
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"buffer file {str(path)!r} is malformed: {exc}") from exc
        buf._load_state(state, copy=False)  # the loaded tensors are ours alone
        buf.source = os.fspath(path)
        return buf

    @classmethod
    def from_minari(cls, dataset: Any, *, device: str | torch.device = "cpu") -> ReplayBuffer:
        """Every transition of a local Minari dataset (an id or a ``MinariDataset``) in a
        single-env buffer; see :func:`epochtrain.data.minari.load_minari_buffer` (extra
        ``minari``; a dataset not downloaded yet raises naming ``minari download <id>``)."""
        from epochtrain.data.minari import load_minari_buffer  # optional extra, loaded late

        return load_minari_buffer(dataset, device=device)


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
