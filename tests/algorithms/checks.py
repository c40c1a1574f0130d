"""Shared assertions of the per-algorithm tests."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from epochtrain.algorithms.base import Policy


def assert_same_state(a: Policy[Any], b: Policy[Any], *, stepped: bool = True) -> None:
    """``a`` and ``b`` hold equal tensors: module state and every optimizer's state.

    With ``stepped`` every optimizer must also have a non-empty state (it has taken a
    step), so the comparison covers its moments and not only empty dicts.
    """
    state_a, state_b = a.state_dict(), b.state_dict()
    assert state_a.keys() == state_b.keys()
    for key, value in state_a.items():
        if isinstance(value, Tensor):
            assert torch.equal(value, state_b[key]), key
    assert a.optimizers.keys() == b.optimizers.keys()
    for name, optimizer in a.optimizers.items():
        opt_a, opt_b = optimizer.state_dict(), b.optimizers[name].state_dict()
        assert opt_a["param_groups"] == opt_b["param_groups"], name
        assert opt_a["state"].keys() == opt_b["state"].keys(), name
        assert len(opt_a["state"]) > 0 or not stepped, f"optimizer {name!r} never stepped"
        for index, entries in opt_a["state"].items():
            for field, value in entries.items():
                other = opt_b["state"][index][field]
                if isinstance(value, Tensor):
                    assert torch.equal(value, other), (name, index, field)
                else:
                    assert value == other, (name, index, field)
