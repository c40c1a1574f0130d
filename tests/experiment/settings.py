"""Settings of the tiny runs the experiment and Ray tests sweep (2 epochs of 64 env steps),
and how those tests read the runs' results back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FAST = {
    "max_epoch": 2,
    "step_per_epoch": 64,
    "step_per_collect": 64,
    "repeat_per_collect": 1,
    "num_envs": 1,
    "num_test_envs": 1,
    "episode_per_test": 1,
}


def results(out: Path) -> dict[str, dict[str, Any]]:
    """Every run's result.json under ``out`` without its wall-clock field, by run id: equal
    for two sweeps of the same specs, whichever backend ran them and however often they
    were interrupted."""
    found = {}
    for path in sorted(out.glob("*/result.json")):
        data = json.loads(path.read_text())
        data.pop("wall_time")
        found[path.parent.name] = data
    return found
