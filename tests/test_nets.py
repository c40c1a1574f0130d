"""Polyak updates over target pairs: every parameter and buffer once, structure checked."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from epochtrain.nets import MLP, soft_update, soft_update_pairs


class Shared(nn.Module):
    """Two heads over one shared trunk, plus a running-statistics buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Linear(3, 4)
        self.heads = nn.ModuleList([nn.Sequential(self.trunk, nn.Linear(4, 1)) for _ in "ab"])
        self.register_buffer("count", torch.zeros(()))


def test_shared_parameters_move_once_and_buffers_are_copied() -> None:
    torch.manual_seed(0)
    online = Shared()
    target = copy.deepcopy(online)
    with torch.no_grad():
        for p in online.parameters():
            p.add_(1.0)
    online.count.fill_(5.0)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    soft_update(target, online, 0.25)
    # the trunk is shared by both heads: moved once (twice would give 0.5625 * before ...)
    for name, p in online.named_parameters():  # named_parameters lists the trunk once
        expected = 0.75 * before[name] + 0.25 * p.detach()
        torch.testing.assert_close(target.get_parameter(name), expected, rtol=0, atol=1e-6)
    assert target.count.item() == 5.0


def test_pairs_of_several_networks_and_tau_one_is_a_copy() -> None:
    torch.manual_seed(1)
    nets = [MLP(3, 2, (8,), nn.ReLU) for _ in range(4)]
    soft_update_pairs([(nets[0], nets[1]), (nets[2], nets[3])], 1.0)
    for online, target in ((nets[0], nets[1]), (nets[2], nets[3])):
        for a, b in zip(online.parameters(), target.parameters(), strict=True):
            assert torch.equal(a, b)


def test_networks_of_different_shapes_are_refused_naming_both() -> None:
    with pytest.raises(ValueError, match="target MLP and the online Linear differ"):
        soft_update(MLP(3, 2, (8,), nn.ReLU), nn.Linear(3, 2), 0.5)


def test_a_policys_target_update_follows_weights_loaded_in_place_and_networks_replaced() -> None:
    import gymnasium as gym

    from epochtrain.algorithms import TD3

    env = gym.make("Pendulum-v1")
    policy = TD3(env.observation_space, env.action_space, hidden=(8,), tau=0.5)
    policy.soft_update_targets(0.5)  # builds the cached lists
    # weights loaded in place (a checkpoint) reach the cached lists
    loaded = copy.deepcopy(policy.actor)
    with torch.no_grad():
        for p in loaded.parameters():
            p.fill_(2.0)
    policy.actor.load_state_dict(loaded.state_dict())
    before = [p.clone() for p in policy.actor_target.parameters()]
    policy.soft_update_targets(0.5)
    for b, t in zip(before, policy.actor_target.parameters(), strict=True):
        torch.testing.assert_close(t, 0.5 * b + 1.0, rtol=0, atol=1e-6)
    # a network replaced by assignment is walked anew: its target follows the new one
    policy.actor = MLP(3, 1, (8,))
    with torch.no_grad():
        for p in policy.actor.parameters():
            p.fill_(-4.0)
    before = [p.clone() for p in policy.actor_target.parameters()]
    policy.soft_update_targets(0.5)
    for b, t in zip(before, policy.actor_target.parameters(), strict=True):
        torch.testing.assert_close(t, 0.5 * b - 2.0, rtol=0, atol=1e-6)


def test_an_actor_copy_updates_its_own_targets_not_the_learners() -> None:
    import gymnasium as gym

    from epochtrain.algorithms import SAC

    env = gym.make("Pendulum-v1")
    policy = SAC(env.observation_space, env.action_space, hidden=(8,))
    policy.soft_update_targets(0.1)
    clone = copy.deepcopy(policy)  # as the async collector's actor copy, cache included
    learner_targets = [p.clone() for p in policy.critics_target.parameters()]
    with torch.no_grad():
        for p in clone.critics.parameters():
            p.add_(1.0)
    clone.soft_update_targets(1.0)
    for b, t in zip(learner_targets, policy.critics_target.parameters(), strict=True):
        assert torch.equal(b, t)
    for o, t in zip(clone.critics.parameters(), clone.critics_target.parameters(), strict=True):
        assert torch.equal(o, t)
