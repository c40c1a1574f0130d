"""The memory a lockstep sweep holds at once, estimated and checked before any run opens.

The ``"lockstep"`` backend builds the trainer of every pending run in one process and keeps
them all open to their end, so their memory adds up. Each replay buffer checks itself when
it is built (:func:`~epochtrain.data.buffer_storage.check_spaces_memory`: at most
:data:`~epochtrain.data.buffer_storage.MEMORY_SHARE` of the memory available), but the
pages are allocated as the buffer fills, so every one of them passes, and the kernel kills
the sweep later, without a word. :func:`check_lockstep_memory` applies that rule to the sum
over the runs and refuses the sweep, naming the fix, before a trainer is built.

What one run counts (:class:`RunMemory`), each part computed, not guessed:

- its buffer, as the buffer check counts it (``obs`` and ``obs_next``, the action, the
  reward and three flags per transition): ``buffer_size`` transitions, or an on-policy
  run's rollout (``step_per_collect`` env steps, as :func:`~epochtrain.make_trainer` sizes
  it);
- an offline run's dataset: the size of its file, which each run loads whole (a
  ``minari:`` dataset counts nothing);
- its networks, when they live on the CPU: the policy's parameters and buffers (target
  networks included), a gradient for each parameter an optimizer steps, and the
  optimizers' state (Adam: two values per parameter; RMSprop: one, plus one for momentum
  and one when centred; SGD: one with momentum; any other optimizer: counted as Adam).

Left out, because they cannot be computed from the spec: the envs' own memory (a
simulator's state; with ``env_backend='async'``, a process per env), the arrays of a
training step's batch, the logger, and the process itself (Python, torch: a few hundred MB
once, not per run).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from epochtrain.data import buffer_storage
from epochtrain.data.buffer import rollout_rows
from epochtrain.data.buffer_storage import size_text
from epochtrain.envs import make_envs
from epochtrain.experiment.runs import spec_of
from epochtrain.spec import RunSpec

__all__ = ["RunMemory", "buffer_bytes", "check_lockstep_memory", "network_bytes", "run_memory"]


@dataclass(frozen=True)
class RunMemory:
    """Bytes one open run holds, by what holds them (module docstring)."""

    buffer: int
    """Its replay buffer or on-policy rollout, once full."""
    dataset: int
    """An offline run's dataset file, loaded whole."""
    networks: int
    """Its networks on the CPU: parameters and buffers, gradients, optimizer state."""

    @property
    def total(self) -> int:
        """Every part together."""
        return self.buffer + self.dataset + self.networks


def buffer_bytes(
    spec: RunSpec, observation_space: gym.Space[Any], action_space: gym.Space[Any]
) -> int:
    """Bytes the training buffer of ``spec``'s run takes once full, on an env with these
    spaces: ``buffer_size`` transitions, or an on-policy run's rollout; 0 offline."""
    if spec.entry.kind == "offline" or spec.num_envs < 1:
        return 0
    capacity = spec.buffer.buffer_size
    if capacity is None:  # on-policy: one rollout, sized as make_trainer sizes it
        step_per_collect = getattr(spec.trainer, "step_per_collect", None)
        if step_per_collect is None:  # episode_per_collect: make_trainer refuses it
            return 0
        same_step = spec.env_backend != "envpool"
        capacity = rollout_rows(int(step_per_collect), spec.num_envs, same_step=same_step)
        capacity *= spec.num_envs
    transitions = capacity // spec.num_envs * spec.num_envs
    per_transition = buffer_storage.spaces_transition_bytes(observation_space, action_space)
    return transitions * (per_transition or 0)


def network_bytes(
    spec: RunSpec, observation_space: gym.Space[Any], action_space: gym.Space[Any]
) -> int:
    """Bytes the networks of ``spec``'s policy take in host memory once it has trained
    (module docstring); 0 when they live on another device. Builds the policy once."""
    if torch.device(spec.device).type != "cpu":
        return 0
    with torch.random.fork_rng():
        policy = spec.entry.policy_cls(
            observation_space, action_space, spec.config, device=spec.device
        )
    tensors = {id(t): t for t in (*policy.parameters(), *policy.buffers())}
    total = sum(_tensor_bytes(t) for t in tensors.values())
    stepped: dict[int, int] = {}  # a parameter's gradient is counted once
    for optimizer in policy.optimizers.values():
        slots = _state_slots(optimizer)
        for group in optimizer.param_groups:
            for param in group["params"]:
                stepped[id(param)] = _tensor_bytes(param)
                total += slots * _tensor_bytes(param)
    return total + sum(stepped.values())


def _tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _state_slots(optimizer: torch.optim.Optimizer) -> int:
    """Tensors of a parameter's size that ``optimizer`` keeps per parameter."""
    settings = optimizer.defaults
    if isinstance(optimizer, torch.optim.SGD):
        return int(settings.get("momentum", 0) != 0)
    if isinstance(optimizer, torch.optim.RMSprop):
        return 1 + int(settings.get("momentum", 0) != 0) + int(bool(settings.get("centered")))
    if isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
        return 2 + int(bool(settings.get("amsgrad")))
    return 2


def run_memory(
    spec: RunSpec, observation_space: gym.Space[Any], action_space: gym.Space[Any]
) -> RunMemory:
    """What ``spec``'s run holds while open, on an env with these spaces."""
    dataset = 0
    if spec.entry.kind == "offline" and spec.dataset and not spec.dataset.startswith("minari:"):
        dataset = os.path.getsize(spec.dataset) if os.path.isfile(spec.dataset) else 0
    return RunMemory(
        buffer=buffer_bytes(spec, observation_space, action_space),
        dataset=dataset,
        networks=network_bytes(spec, observation_space, action_space),
    )


def _run_memories(specs: Sequence[RunSpec]) -> list[RunMemory]:
    """:func:`run_memory` of each of ``specs``: one env per env id, one policy built per
    setting (the seeds of a setting hold the same)."""
    spaces: dict[str, tuple[gym.Space[Any], gym.Space[Any]]] = {}
    found: dict[str, RunMemory] = {}
    memories = []
    for spec in specs:
        if spec.env_id not in spaces:
            envs = make_envs(spec.env_id, 1)
            try:
                spaces[spec.env_id] = (envs.single_observation_space, envs.single_action_space)
            finally:
                envs.close()
        key = spec.with_overrides({"seed": 0}).to_json()
        if key not in found:
            found[key] = run_memory(spec, *spaces[spec.env_id])
        memories.append(found[key])
    return memories


def check_lockstep_memory(run_dirs: Sequence[Path]) -> None:
    """Raise ``ValueError`` naming the fix if the runs in ``run_dirs``, all held open at
    once by the lockstep backend, would take more than
    :data:`~epochtrain.data.buffer_storage.MEMORY_SHARE` of the memory available: their
    buffers, offline datasets and networks (module docstring; their envs are not counted)."""
    if len(run_dirs) < 2:  # one run: its own buffer check is the same rule
        return
    memories = _run_memories([spec_of(run_dir) for run_dir in run_dirs])
    total = sum(m.total for m in memories)
    available = buffer_storage.available_memory()
    if available is None or total <= buffer_storage.MEMORY_SHARE * available:
        return
    limit = buffer_storage.MEMORY_SHARE * available
    largest = max(memories, key=lambda m: m.total)
    at_once = int(limit // largest.total)
    if at_once >= 1:
        workers = min(at_once, os.cpu_count() or 1)
        fix = (
            f"run them in worker processes, one run each at a time, at most {at_once} at once "
            f"here: backend='processes', workers={workers} (`epochtrain sweep ... --backend "
            f"processes --workers {workers}`); or sweep fewer runs at once, or lower buffer_size"
        )
    else:
        fix = (
            f"the largest run alone needs {size_text(largest.total)} "
            f"({_parts([largest])}): {_shrink(largest)}"
        )
    raise ValueError(
        f"the lockstep backend holds all {len(run_dirs)} pending runs open at once, and "
        f"together they would take {size_text(total)} ({_parts(memories)}; their envs not "
        f"counted), more than {buffer_storage.MEMORY_SHARE:.0%} of the "
        f"{size_text(available)} of memory available: {fix}"
    )


def _shrink(memory: RunMemory) -> str:
    """How to make a run smaller, by its largest part."""
    if memory.buffer >= max(memory.dataset, memory.networks):
        return "lower buffer_size (on-policy: step_per_collect)"
    if memory.dataset >= memory.networks:
        return "learn from a smaller dataset"
    return "use smaller networks (the config's hidden sizes), or device='cuda'"


def _parts(memories: Sequence[RunMemory]) -> str:
    """``"buffers 14.1 MB, networks 0.4 MB"``: the non-zero parts of ``memories`` summed."""
    parts = {
        "buffers": sum(m.buffer for m in memories),
        "offline datasets": sum(m.dataset for m in memories),
        "networks with gradients and optimizer state": sum(m.networks for m in memories),
    }
    return ", ".join(f"{name} {size_text(n)}" for name, n in parts.items() if n)
