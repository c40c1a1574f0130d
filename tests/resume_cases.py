"""Tiny seeded runs of every registered algorithm (``ALGORITHMS``), for the resume contract tests.

Also the worker the tests start in a fresh process:
``python -m tests.resume_cases OUT_DIR ALGO...`` resumes each ``OUT_DIR/ALGO/ckpt``,
runs it to the end and saves the epoch stats and the policy state to
``OUT_DIR/ALGO/resumed.pt``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode

from epochtrain import Collector, ReplayBuffer, make_trainer
from epochtrain.registry import ALGORITHMS
from epochtrain.trainer import BaseTrainer
from tests.trainer.test_base import comparable

N_EPOCHS = 2
"""Epochs before the checkpoint; the uninterrupted run has twice as many."""

ENVS = ("CartPole-v1", "Pendulum-v1")


def env_for(algo: str) -> str:
    """The first classic-control env whose action space the algorithm accepts."""
    spec = ALGORITHMS[algo]
    for env_id in ENVS:
        env = gym.make(env_id)
        try:
            spec.policy_cls(env.observation_space, env.action_space)
        except ValueError:
            continue
        finally:
            env.close()
        return env_id
    raise AssertionError(f"{algo} accepts none of {ENVS}")


def make_dataset(env_id: str, path: Path) -> None:
    """256 random transitions of ``env_id`` saved at ``path`` (offline algorithms)."""
    envs = gym.make_vec(
        env_id,
        num_envs=1,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    envs.action_space.seed(0)
    buffer = ReplayBuffer(256, 1)
    collector = Collector(_NoPolicy(), envs, buffer)
    collector.reset(seed=0)
    collector.collect(n_step=256, random=True)
    buffer.save(path)


class _NoPolicy:
    """Stands for a policy in random collection, which never asks it for actions."""

    def act(self, obs: Any, deterministic: bool = False) -> Any:
        raise AssertionError("random collection does not act")

    def to_tensor(self, obs: Any) -> Any:
        return obs


def build(algo: str, data_dir: Path, **extra: Any) -> BaseTrainer[Any]:
    """A tiny trainer of ``algo``: 2 * N_EPOCHS short epochs, 2 test episodes each."""
    kind = ALGORITHMS[algo].kind
    env_id = env_for(algo)
    kw: dict[str, Any] = {
        "max_epoch": 2 * N_EPOCHS,
        "stop_fn": None,
        "show_progress": False,
        "num_test_envs": 2,
        "episode_per_test": 2,
    }
    if kind == "offline":
        kw.update(step_per_epoch=16, batch_size=16)
        kw["buffer"] = ReplayBuffer.load(data_dir / f"{env_id}.buffer")
    elif kind == "onpolicy":
        kw.update(num_envs=2, step_per_epoch=64, step_per_collect=32, episode_per_collect=None)
        kw.update(batch_size=16, repeat_per_collect=2, buffer_size=None)
    else:
        kw.update(num_envs=2, step_per_epoch=64, step_per_collect=16, episode_per_collect=None)
        kw.update(batch_size=16, warmup_steps=32, buffer_size=1000)
    kw.update(extra)
    return make_trainer(algo, env_id, seed=3, **kw)


def snapshot(trainer: BaseTrainer[Any], stats: list[Any]) -> dict[str, Any]:
    """Comparable epoch stats and the policy's whole state (weights and optimizers)."""
    return {"stats": [comparable(s) for s in stats], "policy": trainer.policy.state_dict()}


def main(argv: list[str]) -> None:
    torch.set_num_threads(int(os.environ.get("EPOCHTRAIN_TEST_THREADS", "1")))
    out = Path(argv[0])
    for algo in argv[1:]:
        trainer = build(algo, out, resume_from=str(out / algo / "ckpt"))
        torch.save(snapshot(trainer, list(trainer)), out / algo / "resumed.pt")


if __name__ == "__main__":
    main(sys.argv[1:])
