"""A scripted Pendulum-v1 swing-up controller, made noisy, to record offline datasets in-test.

The learning tests of the offline algorithms need a "medium" dataset (D4RL's sense: a
policy that half works) without training one first. :class:`NoisySwingUp` gives it in
milliseconds: an energy-pumping swing-up with a PD law near the top, which scores about
-155 per episode alone, spoilt by Gaussian noise on every action and/or by uniform random
actions with some probability.
"""

from __future__ import annotations

import torch

from epochtrain.data import ActResult, Collector, Obs, ReplayBuffer
from epochtrain.factory import make_envs


class NoisySwingUp:
    """Scripted Pendulum-v1 controller: energy pumping, then PD control near the top.

    With ``theta_dd = 15 sin(theta) + 3 u``, the energy ``0.5 w^2 + 15 cos(theta)``
    changes at ``3 u w``: pump with full torque in the direction of ``w`` until the
    upright energy 15 is reached; within ``cos(theta) > 0.85`` a PD law holds the top.
    Unless asked for deterministic actions, ``gaussian`` is the std of Gaussian noise
    added to every action, and each action is replaced by a uniform one in [-2, 2] with
    probability ``uniform``; the result is clipped to [-2, 2].
    """

    def __init__(self, gaussian: float = 0.0, uniform: float = 0.0) -> None:
        self.gaussian = gaussian
        self.uniform = uniform

    def to_tensor(self, obs: Obs) -> Obs:
        return obs

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        assert isinstance(obs, torch.Tensor)
        cos, sin, w = obs[:, 0], obs[:, 1], obs[:, 2]
        pump = 2.0 * torch.sign(w * (15.0 - (0.5 * w**2 + 15.0 * cos)))
        hold = -(10.0 * torch.atan2(sin, cos) + 2.0 * w)
        u = torch.where(cos > 0.85, hold, pump)
        if not deterministic:
            u = u + self.gaussian * torch.randn_like(u)
            explore = torch.rand_like(u) < self.uniform
            u = torch.where(explore, torch.rand_like(u) * 4.0 - 2.0, u)
        return u.clamp(-2.0, 2.0).unsqueeze(-1), {}


def record_swing_up(
    n_steps: int, gaussian: float = 0.0, uniform: float = 0.0
) -> tuple[ReplayBuffer, float]:
    """``n_steps`` transitions of :class:`NoisySwingUp` on 10 envs and their mean return."""
    envs = make_envs("Pendulum-v1", 10)
    data = ReplayBuffer(n_steps, 10)
    recorder = Collector(NoisySwingUp(gaussian, uniform), envs, data)
    recorder.reset(seed=0)
    torch.manual_seed(0)
    stats = recorder.collect(n_step=n_steps)
    envs.close()
    return data, float(stats.returns.mean())
