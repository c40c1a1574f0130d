"""make_envs: the vector envs a run trains and tests on, built from a gymnasium id."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

__all__ = ["make_envs"]


def make_envs(env_id: str, num_envs: int) -> gym.vector.VectorEnv[Any, Any, Any]:
    """``num_envs`` copies of ``env_id`` in a SyncVectorEnv with SAME_STEP autoreset."""
    envs: gym.vector.VectorEnv[Any, Any, Any] = gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    return envs
