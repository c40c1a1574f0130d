"""Every policy's ``act`` runs without grad, also when a user calls it outside a trainer:
its actions and extras track no gradient and acting builds no autograd graph."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor, nn

from epochtrain.algorithms.base import Policy
from epochtrain.data.batch import ActResult, Batch, Obs
from epochtrain.registry import ALGORITHMS
from epochtrain.stats import TrainingStats

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def build(algo: str) -> Policy[Any]:
    entry = ALGORITHMS[algo]
    act_space: gym.Space[Any] = (
        gym.spaces.Discrete(3) if algo == "dqn" else gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    )
    torch.manual_seed(0)
    return entry.policy_cls(OBS, act_space, entry.config_cls())


@contextmanager
def saved_for_backward() -> Iterator[list[int]]:
    """Count the tensors autograd saves for a backward pass (one per graph node that
    needs its inputs): none are saved when no graph is built."""
    saved: list[int] = []

    def pack(t: Tensor) -> Tensor:
        saved.append(1)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield saved


def test_every_registered_algorithm_is_checked() -> None:
    assert len(ALGORITHMS) >= 10


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_act_outside_a_trainer_returns_tensors_without_grad_and_builds_no_graph(
    algo: str, deterministic: bool
) -> None:
    policy = build(algo)
    obs = torch.rand(5, 3)
    assert torch.is_grad_enabled()  # as in a user's script
    with saved_for_backward() as saved:
        act, extras = policy.act(obs, deterministic)
    assert not act.requires_grad and act.grad_fn is None
    assert all(not v.requires_grad for v in extras.values())
    assert saved == []  # no graph node was recorded
    assert torch.is_grad_enabled()  # grad mode is back as it was
    torch.manual_seed(1)
    with torch.inference_mode():  # the collector's way: the same actions
        expected, _ = inspect.unwrap(type(policy).act)(policy, obs, deterministic)
    torch.manual_seed(1)
    again, _ = policy.act(obs, deterministic)
    assert torch.equal(again, expected)


class _Linear(Policy[TrainingStats]):
    """A user's policy: ``act`` is a linear layer's output, written without no_grad."""

    def __init__(self) -> None:
        super().__init__(OBS, gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
        self.net = nn.Linear(3, 2)

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        assert isinstance(obs, Tensor)
        return self.net(obs), {"value": self.net(obs).sum(dim=-1)}

    def learn(self, batch: Batch) -> TrainingStats:
        raise NotImplementedError


class _Scaled(_Linear):
    """A subclass whose ``act`` calls its base's: wrapped too, and each wrapped once."""

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        act, extras = super().act(obs, deterministic)
        return act * 2.0, extras


@pytest.mark.parametrize("cls", [_Linear, _Scaled])
def test_a_users_policy_subclass_acts_without_grad_too(cls: type[_Linear]) -> None:
    policy = cls()
    with saved_for_backward() as saved:
        act, extras = policy.act(torch.rand(4, 3))
    assert not act.requires_grad and not extras["value"].requires_grad and saved == []
    own = vars(cls)["act"]
    assert own.__name__ == "act" and not hasattr(own.__wrapped__, "__wrapped__")  # once
    # learning still builds its graph: only act is wrapped
    loss = policy.net(torch.rand(4, 3)).sum()
    assert loss.requires_grad
