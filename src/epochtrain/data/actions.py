"""From the policy's actions to the env's: a bounded Box is clipped, a Discrete is shifted.

Policies act in a space of their own: a Gaussian policy (PG, A2C, PPO) samples any real
number, and a categorical or Q-value head picks an index from 0. The env may want less: a
``Box(low, high)`` with finite bounds, or a ``Discrete(n, start=k)`` whose actions are
``k .. k+n-1``. :func:`env_action_map` gives the map applied just before ``env.step``; the
buffer keeps the policy's own action, so a Gaussian policy's log-probability stays the
one of the action it sampled (as in Stable-Baselines3, which clips the same way) and a
discrete head's index stays an index. Random warm-up actions are sampled from the env's
space and mapped back with :func:`policy_action_map`.

A policy whose actions stay in the bounds by construction (``Policy.bounded_actions``: SAC,
DDPG, TD3, whose tanh is scaled to the bounds) is not clipped, which saves the clip's few
microseconds per step. Envs that clip themselves (Pendulum, the MuJoCo envs) see the same
transitions as before:
clipping twice changes nothing. Datasets (:func:`epochtrain.dataset.record_dataset`) store
the clipped actions, as the env applied them.

The collector checks the policy's actions for NaN and inf before they are mapped
(:func:`epochtrain.data.env_faults.check_actions`): a clip keeps a NaN, which the env would
return as NaN observations, and turns an inf into a bound, which the env would accept while
the buffer stored the inf.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["ActionMap", "env_action_map", "policy_action_map"]

ActionMap = Callable[[np.ndarray], np.ndarray]
"""``map(actions) -> actions`` of a batch (leading axis: the envs)."""


def env_action_map(space: gym.Space[Any]) -> ActionMap | None:
    """The map from a batch of the policy's actions to the env's, or None (none needed).

    ``space`` is one env's action space. A Box with a finite bound is clipped to its
    bounds; a ``Discrete(n, start=k)`` is shifted by ``k``.
    """
    if isinstance(space, gym.spaces.Box):
        low, high = space.low, space.high  # an infinite bound clips nothing
        if not (np.isfinite(low).any() or np.isfinite(high).any()):
            return None
        return lambda act: np.clip(act, low, high)
    if isinstance(space, gym.spaces.Discrete) and int(space.start) != 0:
        start = int(space.start)
        return lambda act: act + start
    return None


def policy_action_map(space: gym.Space[Any]) -> ActionMap | None:
    """The map from a batch of the env's actions (random samples of ``space``) to the
    policy's, or None: a ``Discrete(n, start=k)``'s are shifted back to ``0 .. n-1``."""
    if isinstance(space, gym.spaces.Discrete) and int(space.start) != 0:
        start = int(space.start)
        return lambda act: act - start
    return None
