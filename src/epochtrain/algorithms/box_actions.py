"""The clamp that keeps tanh-squashed actions inside their Box (SAC, DDPG, TD3, TD3+BC).

Those policies map ``u`` in ``[-1, 1]`` to ``center + half_range * u`` in float32, and the
collector does not clip their actions (``Policy.bounded_actions``). Once ``tanh``
saturates (``u == 1`` for pre-squash values above about 9) the fused multiply-add can
round one ulp past ``high`` (or ``low``) when the bounds are not symmetric (about one
saturated action in six for random bounds), and a float32 bound may lie outside a float64
Box. Symmetric float32 bounds map exactly (``0 + high * u`` never passes ``high``), so
only the other Boxes pay for the clamp (a microsecond or two per ``act``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

__all__ = ["squashed_action_bounds"]


def squashed_action_bounds(space: gym.Space[Any], center: Tensor) -> tuple[Tensor, Tensor, bool]:
    """``(low, high, clamp)`` for a 1-d float Box ``space`` whose float32 centre is
    ``center`` (:func:`~epochtrain.nets.box_bounds`).

    ``low`` and ``high`` are the float32 bounds rounded inwards (every float32 value
    between them lies in ``space``); ``clamp`` says whether scaled actions must be clamped
    to them: False only for symmetric bounds exact in float32, whose scaling cannot leave
    the Box.
    """
    assert isinstance(space, gym.spaces.Box)  # box_bounds refused any other space
    low64 = np.asarray(space.low, dtype=np.float64).reshape(-1)
    high64 = np.asarray(space.high, dtype=np.float64).reshape(-1)
    low = low64.astype(np.float32)
    high = high64.astype(np.float32)
    low = np.where(low < low64, np.nextafter(low, np.float32(np.inf)), low)
    high = np.where(high > high64, np.nextafter(high, np.float32(-np.inf)), high)
    exact = bool((low == low64).all() and (high == high64).all())
    clamp = not exact or bool((center != 0).any())
    return torch.as_tensor(low), torch.as_tensor(high), clamp
