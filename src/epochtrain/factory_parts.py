"""The parts make_trainer builds from a spec besides the envs, policy and collectors.

The training buffer (uniform or prioritized, sized for one rollout on-policy), an offline
run's dataset (a buffer file or a Minari dataset), the logger of the spec's ``logging``
settings, and the default ``stop_fn`` of ``stop_at``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from epochtrain.data import PrioritizedReplayBuffer, ReplayBuffer
from epochtrain.data.buffer import rollout_rows
from epochtrain.factory_checks import _need_dataset
from epochtrain.logger import BaseLogger
from epochtrain.spec import RunSpec
from epochtrain.trainer.base import StopFn

__all__: list[str] = []


def _stop_at(threshold: float | None) -> StopFn | None:
    if threshold is None:
        return None
    limit = float(threshold)

    def stop_fn(best_test_return: float) -> bool:
        return best_test_return >= limit

    return stop_fn


def _load_dataset(spec: RunSpec) -> ReplayBuffer:
    """The spec's dataset: a buffer file, or ``minari:<dataset id>`` (a local Minari dataset)."""
    dataset = _need_dataset(spec)
    if dataset.startswith("minari:"):
        from epochtrain.data.minari import load_minari_buffer

        return load_minari_buffer(dataset.removeprefix("minari:"), device=spec.device)
    return ReplayBuffer.load(dataset, device=spec.device)


def _make_buffer(spec: RunSpec) -> ReplayBuffer:
    """The training buffer: uniform, or prioritized when ``buffer.prioritized_replay``."""
    params = spec.trainer
    capacity = spec.buffer.buffer_size
    num_envs = spec.num_envs
    if capacity is None:  # on-policy: room for exactly one rollout
        step_per_collect = getattr(params, "step_per_collect", None)
        if step_per_collect is None:
            raise ValueError(
                "buffer_size must be given with episode_per_collect: the factory cannot "
                "size a rollout buffer for a number of episodes"
            )
        same_step = spec.env_backend != "envpool"  # make_envs: gymnasium's envs SAME_STEP
        capacity = rollout_rows(int(step_per_collect), num_envs, same_step=same_step) * num_envs
    if not spec.buffer.prioritized_replay:
        return ReplayBuffer(capacity, num_envs)
    run_steps = params.max_epoch * params.step_per_epoch
    return PrioritizedReplayBuffer(
        capacity,
        num_envs,
        alpha=spec.buffer.priority_alpha,
        beta=spec.buffer.priority_beta,
        beta_anneal_steps=run_steps,
    )


def _make_logger(spec: RunSpec) -> BaseLogger:
    # imported here so that the factory does not load TensorBoard unless it is used
    from epochtrain.logger import (
        CSVLogger,
        JSONLLogger,
        LazyLogger,
        MultiLogger,
        TensorboardLogger,
    )

    logdir = spec.logging.logdir
    if logdir is None:
        return LazyLogger()
    makers: dict[str, Callable[[], BaseLogger]] = {
        "tensorboard": lambda: TensorboardLogger(logdir),
        "jsonl": lambda: JSONLLogger(Path(logdir) / "log.jsonl"),
        "csv": lambda: CSVLogger(Path(logdir) / "log.csv"),
    }
    loggers = [makers[name]() for name in spec.logging.loggers]
    return loggers[0] if len(loggers) == 1 else MultiLogger(*loggers)
