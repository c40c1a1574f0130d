"""Settings of the tiny runs the experiment and Ray tests sweep (2 epochs of 64 env steps)."""

from __future__ import annotations

FAST = {
    "max_epoch": 2,
    "step_per_epoch": 64,
    "step_per_collect": 64,
    "repeat_per_collect": 1,
    "num_envs": 1,
    "num_test_envs": 1,
    "episode_per_test": 1,
}
