"""Lookup-table networks for hand-computed loss tests: outputs indexed by an observation id.

Every observation of these tests is 4-d with an integer id in its first entry, so a
network's output for it can be set by hand and the expected loss computed on paper.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Table(nn.Module):
    """Output rows (logits, Q values per action, ...) looked up by the observation's id."""

    def __init__(self, table: list[list[float]]) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.tensor(table))

    def forward(self, obs: Tensor) -> Tensor:
        return self.table[obs[:, 0].long()]


class TableV(nn.Module):
    """A state value per observation id, shaped ``[batch, 1]``."""

    def __init__(self, table: list[float]) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.tensor(table))

    def forward(self, obs: Tensor) -> Tensor:
        return self.table[obs[:, 0].long()].unsqueeze(-1)


def obs_ids(ids: list[list[int]]) -> Tensor:
    """``[time, env, 4]`` observations whose first entry is the given id."""
    out = torch.zeros(len(ids), len(ids[0]), 4)
    out[..., 0] = torch.tensor(ids, dtype=torch.float32)
    return out
