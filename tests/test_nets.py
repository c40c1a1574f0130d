"""Polyak updates over target pairs: every parameter and buffer once, structure checked;
the flat input size of an observation space and the bounds of a Box of actions; gradient
clipping the same as torch's."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from epochtrain.nets import (
    MLP,
    EnsembleMLP,
    EnsembleQCritic,
    QCritic,
    all_outputs,
    box_bounds,
    clip_grad_norm,
    flat_dim,
    is_uint8_pixels,
    q_value,
    q_values,
    soft_update,
    soft_update_pairs,
)


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


def test_an_ensemble_starts_as_its_members_built_one_by_one_and_computes_as_them() -> None:
    torch.manual_seed(3)
    ensemble = EnsembleQCritic(3, 4, 2, (8, 8))
    torch.manual_seed(3)
    separate = nn.ModuleList(QCritic(4, 2, (8, 8)) for _ in range(3))
    obs, act = torch.randn(5, 4), torch.randn(5, 2)
    together = q_values(ensemble, obs, act)
    assert together.shape == (3, 5)
    torch.testing.assert_close(together, q_values(separate, obs, act))  # the ModuleList way
    for i in range(3):
        torch.testing.assert_close(q_value(ensemble, i, obs, act), together[i])
        torch.testing.assert_close(q_value(separate, i, obs, act), together[i])
    assert len(ensemble) == 3 and len(list(ensemble.parameters())) == 6  # 3 layers x (W, b)


def test_an_ensemble_learns_as_its_members_would_separately() -> None:
    torch.manual_seed(0)
    ensemble = EnsembleMLP(2, 3, 4, (8,))
    torch.manual_seed(0)
    separate = [MLP(3, 4, (8,), nn.ReLU) for _ in range(2)]
    x, y = torch.randn(16, 3), torch.randn(2, 16, 4)
    opt_e = torch.optim.Adam(ensemble.parameters(), lr=0.1)
    opt_s = torch.optim.Adam([p for m in separate for p in m.parameters()], lr=0.1)
    for _ in range(3):
        opt_e.zero_grad()
        ((ensemble(x) - y) ** 2).mean(dim=(1, 2)).sum().backward()
        opt_e.step()
        opt_s.zero_grad()
        loss = ((separate[0](x) - y[0]) ** 2).mean() + ((separate[1](x) - y[1]) ** 2).mean()
        loss.backward()
        opt_s.step()
    torch.testing.assert_close(all_outputs(ensemble, x), all_outputs(nn.ModuleList(separate), x))


def test_an_ensemble_stays_right_when_copied_moved_and_loaded() -> None:
    ensemble = EnsembleQCritic(2, 3, 1, (8,))
    obs, act = torch.randn(4, 3), torch.randn(4, 1)
    clone = copy.deepcopy(ensemble)
    with torch.no_grad():
        for p in clone.parameters():
            p.add_(1.0)  # the copy computes with its own tensors
    assert not torch.equal(clone(obs, act), ensemble(obs, act))
    moved = copy.deepcopy(ensemble).to("meta")  # computes with the moved tensors
    assert moved(obs.to("meta"), act.to("meta")).device.type == "meta"
    ensemble.load_state_dict(clone.state_dict())
    torch.testing.assert_close(ensemble(obs, act), clone(obs, act))


@pytest.mark.parametrize("algo", ["td3", "sac", "sac-discrete"])
def test_loading_separate_critics_into_an_ensemble_says_what_the_file_is(algo: str) -> None:
    import gymnasium as gym

    from epochtrain.algorithms import SAC, TD3

    env = gym.make("CartPole-v1" if algo == "sac-discrete" else "Pendulum-v1")
    spaces = (env.observation_space, env.action_space)
    policy = TD3(*spaces, hidden=(8,)) if algo == "td3" else SAC(*spaces, hidden=(8,))
    old = copy.deepcopy(policy)
    if algo == "sac-discrete":  # the layout of epochtrain's critics before ensembles
        old.critics = nn.ModuleList(MLP(4, 2, (8,), nn.ReLU) for _ in range(2))
    else:
        old.critics = nn.ModuleList(QCritic(3, 1, (8,)) for _ in range(2))
    with pytest.raises(RuntimeError, match=r"separate critic networks.*epochtrain version"):
        policy.load_state_dict(old.state_dict())


def test_critic_helpers_reject_what_is_neither_an_ensemble_nor_a_module_list() -> None:
    with pytest.raises(TypeError, match="ModuleList"):
        q_values(nn.Linear(2, 1), torch.zeros(1, 1), torch.zeros(1, 1))
    with pytest.raises(ValueError, match="n >= 1"):
        EnsembleMLP(0, 2, 1)


@pytest.mark.parametrize("space", [gym.spaces.MultiBinary(3), gym.spaces.MultiDiscrete([2, 3])])
def test_multi_binary_and_multi_discrete_observations_are_refused_naming_the_flattener(
    space: gym.Space[object],
) -> None:
    with pytest.raises(
        ValueError,
        match=r"observation_space Multi.*MultiBinary and MultiDiscrete spaces with "
        r"gymnasium\.wrappers\.FlattenObservation",
    ):
        flat_dim(space)
    assert flat_dim(gym.spaces.flatten_space(space)) == gym.spaces.flatdim(space)


@pytest.mark.parametrize(
    ("space", "inputs"),
    [
        (gym.spaces.Discrete(7), 7),  # one-hot, as gymnasium's flatdim
        (gym.spaces.Discrete(3, start=-5), 3),
        (gym.spaces.Box(0, 255, (4, 5, 3), np.uint8), 60),
    ],
)
def test_a_discrete_observation_takes_one_input_per_value(
    space: gym.Space[object], inputs: int
) -> None:
    assert flat_dim(space) == inputs == gym.spaces.flatdim(space)


@pytest.mark.parametrize(
    ("space", "pixels"),
    [
        (gym.spaces.Box(0, 255, (84, 84, 3), np.uint8), True),
        (gym.spaces.Box(0, 255, (84, 84), np.uint8), True),  # SB3 wants 3-d; an MLP does not
        (gym.spaces.Box(0, 255, (128,), np.uint8), True),  # Atari RAM
        (gym.spaces.Box(0, 10, (7, 7, 3), np.uint8), False),  # codes
        (gym.spaces.Box(np.array([0, 1]), np.array([255, 255]), dtype=np.uint8), False),
        (gym.spaces.Box(0.0, 255.0, (3,), np.float32), False),
        (gym.spaces.Discrete(256), False),
    ],
)
def test_uint8_pixels_are_uint8_boxes_over_the_full_range(
    space: gym.Space[object], pixels: bool
) -> None:
    assert is_uint8_pixels(space) is pixels


def test_box_bounds_are_checked_and_compared_in_float32() -> None:
    center, half = box_bounds(gym.spaces.Box(-1e30, 3e30, (1,), np.float64))
    assert center.dtype == half.dtype == torch.float32
    assert center.item() == pytest.approx(1e30) and half.item() == pytest.approx(2e30)
    with pytest.raises(ValueError, match=r"not finite in float32.*RescaleAction"):
        box_bounds(gym.spaces.Box(-1e300, 1e300, (1,), np.float64))
    # 1 and 1 + 1e-12 differ in float64, not in float32: a half-range of 0
    collapsed = gym.spaces.Box(np.array([0.0, 1.0]), np.array([1.0, 1.0 + 1e-12]), dtype=np.float64)
    with pytest.raises(ValueError, match=r"low >= high in dimension\(s\) \[1\] \(compared in"):
        box_bounds(collapsed)


def _net_with_grads(scale: float, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3), nn.Linear(3, 1))
    (net(torch.randn(32, 4)) * scale).sum().backward()
    return net


def _twin(net: nn.Module) -> nn.Module:
    twin = copy.deepcopy(net)
    for p, q in zip(net.parameters(), twin.parameters(), strict=True):
        q.grad = None if p.grad is None else p.grad.clone()
    return twin


@pytest.mark.parametrize("scale", [1e-4, 0.3, 1.0, 7.0, 1e3, float("nan"), float("inf")])
@pytest.mark.parametrize("max_norm", [0.5, 10.0])
def test_clip_grad_norm_gives_torchs_gradients_and_norm_bitwise(
    scale: float, max_norm: float
) -> None:
    for seed in range(5):
        ours, theirs = _net_with_grads(scale, seed), None
        theirs = _twin(ours)
        norm = clip_grad_norm(ours.parameters(), max_norm)
        expected = nn.utils.clip_grad_norm_(list(theirs.parameters()), max_norm).item()
        assert norm == expected or (np.isnan(norm) and np.isnan(expected))
        for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
            assert p.grad is not None and q.grad is not None
            assert torch.equal(p.grad, q.grad) or (p.grad.isnan().all() and q.grad.isnan().all())


def test_clip_grad_norm_at_the_bound_scales_as_torch() -> None:
    # a total within float32 rounding of max_norm must take torch's own multiplication
    for seed in range(20):
        net = _net_with_grads(1.0, seed)
        total = nn.utils.clip_grad_norm_(list(_twin(net).parameters()), float("inf")).item()
        for max_norm in (total, total * (1 + 1e-7), total * (1 - 1e-7), total + 1e-6):
            ours, theirs = _twin(net), _twin(net)
            assert clip_grad_norm(ours.parameters(), max_norm) == (
                nn.utils.clip_grad_norm_(list(theirs.parameters()), max_norm).item()
            )
            for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
                assert p.grad is not None and q.grad is not None
                assert torch.equal(p.grad, q.grad)


def test_clip_grad_norm_without_gradients_or_of_mixed_dtypes() -> None:
    assert clip_grad_norm(nn.Linear(2, 2).parameters(), 1.0) == 0.0
    # a float32 and a float64 network clipped together: torch's own path
    single, double = _net_with_grads(100.0, 0), _net_with_grads(100.0, 1).double()
    for p in double.parameters():
        assert p.grad is not None
        p.grad = p.grad.double()
    ours = [*single.parameters(), *double.parameters()]
    theirs = [*_twin(single).parameters(), *_twin(double).parameters()]
    norm = clip_grad_norm(iter(ours), 1.0)
    assert norm == nn.utils.clip_grad_norm_(theirs, 1.0).item()
    assert {p.dtype for p in ours} == {torch.float32, torch.float64}
    for p, q in zip(ours, theirs, strict=True):
        assert p.grad is not None and q.grad is not None
        assert torch.equal(p.grad, q.grad)
