"""ReplayBuffer: preallocated ``[capacity // num_envs, num_envs]`` storage, a ring per env.

The collector writes one row per vector step (one transition per env, all envs at the
same time index), so each env's column keeps its rollout order and GAE or n-step returns
vectorise over the time axis. Storage is allocated on the first ``add`` from the shapes
and dtypes it sees, lives in CPU memory (writes go through numpy views, so a row costs a
few microseconds), and sampled batches are moved to ``device``.

This module reads the buffer (uniform sampling, n-step transitions, rollouts) and holds
its files (:meth:`ReplayBuffer.save`, :meth:`ReplayBuffer.load`) and :func:`rollout_rows`;
writing rows, the counters, ``state_dict`` and ``mark``/``rewind`` are in its base class,
:class:`~epochtrain.data.buffer_ring.RingStorage` (``BufferMark`` is re-exported here).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from epochtrain.data.batch import EXTRA_FIELDS, Batch
from epochtrain.data.buffer_ring import BufferMark, RingStorage
from epochtrain.data.buffer_storage import (
    BUFFER_FORMAT_VERSION,
    ObsArray,
    check_n_step,
    flags_as_bool,
    gather,
    obs_index,
    read_state_file,
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


class ReplayBuffer(RingStorage):
    """Ring buffer of transitions from ``num_envs`` parallel envs.

    ``capacity`` counts transitions over all envs; each env's ring holds
    ``capacity // num_envs`` of them. ``device`` is where sampled batches go.
    """

    # ----------------------------------------------------------------- reading
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

    def nonfinite_fields(self) -> dict[str, int]:
        """The float fields holding NaN or inf at a valid stored transition, each with the
        flat index (``time * num_envs + env``, as :meth:`get` takes) of its first such
        transition; ``{}`` when every value is finite. Fields of dict observations are
        named ``"obs.<key>"``. One vectorised ``isfinite`` per field (a 1M-transition
        Pendulum dataset takes a few milliseconds): for a dataset's check at load, never
        per step."""
        if self._storage is None or self._size == 0:
            return {}
        size = self._size
        valid = self._storage["valid"][:size]
        found: dict[str, int] = {}
        for name, values in _float_leaves("", self._storage):
            finite = torch.isfinite(values[:size])
            if bool(finite.all()):
                continue
            bad = ~finite.reshape(size, self.num_envs, -1).all(dim=2) & valid
            where = bad.reshape(-1).nonzero()
            if len(where):  # else only rows that cannot be sampled hold them
                found[name] = int(where[0, 0])
        return found

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

    # -------------------------------------------------------------------- files
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


def _float_leaves(prefix: str, fields: dict[str, Any]) -> list[tuple[str, Tensor]]:
    """The float tensors of a storage dict, named by their path (``obs.pixels``)."""
    leaves: list[tuple[str, Tensor]] = []
    for key, value in fields.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            leaves += _float_leaves(f"{name}.", value)
        elif isinstance(value, Tensor) and (value.is_floating_point() or value.is_complex()):
            leaves.append((name, value))
    return leaves
