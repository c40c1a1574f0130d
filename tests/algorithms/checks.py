"""Shared assertions of the per-algorithm tests."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from torch import Tensor

from epochtrain.algorithms.base import Policy
from epochtrain.data import Batch, ReplayBuffer


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


def transition_batch(
    n: int, action_space: gym.Space[Any], seed: int = 0, weight: Tensor | None = None
) -> Batch:
    """``n`` random transitions of 3-d observations and ``action_space`` actions (a Box's
    2 actions drawn over ``[-2, 2] x [0, 1]``), with importance weights ``weight``."""
    gen = torch.Generator().manual_seed(seed)
    if isinstance(action_space, gym.spaces.Discrete):
        act = torch.randint(int(action_space.n), (n,), generator=gen)
    else:
        act = torch.rand(n, 2, generator=gen) * torch.tensor([4.0, 1.0]) - torch.tensor([2.0, 0])
    zeros = torch.zeros(n, dtype=torch.bool)
    return Batch(
        obs=torch.randn(n, 3, generator=gen),
        act=act,
        rew=torch.randn(n, generator=gen),
        terminated=zeros,
        truncated=zeros,
        obs_next=torch.randn(n, 3, generator=gen),
        weight=weight,
    )


def two_updates(policy: Policy[Any], buffer: ReplayBuffer) -> None:
    """Two gradient steps on the whole buffer, prepared as the policy's trainer would."""
    if "onpolicy" in policy.trainer_kinds:
        batch = policy.process_rollout(buffer.rollout()).flatten()
    else:
        batch = policy.process_sample(buffer.rollout().flatten(), buffer)
    torch.manual_seed(1)
    for _ in range(2):  # TD3's delayed actor steps on the second
        policy.learn(batch)
