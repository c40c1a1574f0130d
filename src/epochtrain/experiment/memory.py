"""The memory of the replay buffers a sweep holds at once, checked before any run opens.

The ``"lockstep"`` backend builds the trainer of every pending run in one process and keeps
them all open to their end, so their replay buffers add up. Each buffer checks itself when
it is built (:func:`~epochtrain.data.buffer_storage.check_spaces_memory`: at most
:data:`~epochtrain.data.buffer_storage.MEMORY_SHARE` of the memory available), but the
pages are allocated as the buffer fills, so every one of them passes, and the kernel kills
the sweep later, without a word. :func:`check_lockstep_memory` applies that rule to the sum
of the buffers and refuses the sweep, naming the fix, before a trainer is built.

The estimate counts each buffer as the buffer check does: ``obs`` and ``obs_next``, the
action, the reward and three flags per transition. It leaves out the rest of a run (its
networks, envs, logger; tens of MB) and the datasets of offline runs, and a run without a
``buffer_size`` (on-policy: one rollout) counts nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from epochtrain.data import buffer_storage
from epochtrain.data.buffer_storage import size_text
from epochtrain.envs import make_envs
from epochtrain.experiment.runs import spec_of
from epochtrain.spec import RunSpec

__all__ = ["check_lockstep_memory", "replay_buffer_bytes"]


def replay_buffer_bytes(
    spec: RunSpec, observation_space: gym.Space[Any], action_space: gym.Space[Any]
) -> int:
    """Bytes the replay buffer of ``spec``'s run takes once full, on an env with these
    spaces; 0 for a run without a ``buffer_size`` (module docstring)."""
    capacity = spec.buffer.buffer_size
    if capacity is None or spec.entry.kind == "offline" or spec.num_envs < 1:
        return 0
    transitions = capacity // spec.num_envs * spec.num_envs
    per_transition = buffer_storage.spaces_transition_bytes(observation_space, action_space)
    return transitions * (per_transition or 0)


def check_lockstep_memory(run_dirs: Sequence[Path]) -> None:
    """Raise ``ValueError`` naming the fix if the replay buffers of the runs in
    ``run_dirs``, all held at once by the lockstep backend, would take more than
    :data:`~epochtrain.data.buffer_storage.MEMORY_SHARE` of the memory available."""
    if len(run_dirs) < 2:  # one run: its own buffer check is the same rule
        return
    specs = [spec_of(run_dir) for run_dir in run_dirs]
    spaces: dict[str, tuple[gym.Space[Any], gym.Space[Any]]] = {}
    needs = []
    for spec in specs:
        if spec.buffer.buffer_size is None or spec.entry.kind == "offline":
            continue
        if spec.env_id not in spaces:
            envs = make_envs(spec.env_id, 1)
            try:
                spaces[spec.env_id] = (envs.single_observation_space, envs.single_action_space)
            finally:
                envs.close()
        needs.append(replay_buffer_bytes(spec, *spaces[spec.env_id]))
    total = sum(needs)
    available = buffer_storage.available_memory()
    if available is None or total <= buffer_storage.MEMORY_SHARE * available:
        return
    limit = buffer_storage.MEMORY_SHARE * available
    largest = max(needs)
    at_once = int(limit // largest)
    if at_once >= 1:
        workers = min(at_once, os.cpu_count() or 1)
        fix = (
            f"run them in worker processes, one run each at a time, at most {at_once} at once "
            f"here: backend='processes', workers={workers} (`epochtrain sweep ... --backend "
            f"processes --workers {workers}`); or sweep fewer runs at once, or lower buffer_size"
        )
    else:
        fix = f"lower buffer_size: the largest buffer alone needs {size_text(largest)}"
    raise ValueError(
        f"the lockstep backend holds all {len(run_dirs)} pending runs open at once, and "
        f"their replay buffers would take {size_text(total)} ({len(needs)} buffers, the largest "
        f"{size_text(largest)}), more than {buffer_storage.MEMORY_SHARE:.0%} of the "
        f"{size_text(available)} of memory available: {fix}"
    )
