"""OnpolicyTrainer's minibatches: each pass over a rollout is a shuffled partition of it."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
import torch

from epochtrain.data import Batch, Collector, ReplayBuffer
from epochtrain.data.buffer import rollout_rows
from epochtrain.trainer import OnpolicyParams, OnpolicyTrainer
from tests.trainer.tiny import TinyPolicy, build


def _record_minibatches(trainer: Any) -> list[list[tuple[float, ...]]]:
    """Wrap the policy's ``learn`` so every minibatch's rows (obs, as tuples) are kept."""
    seen: list[list[tuple[float, ...]]] = []
    learn = trainer.policy.learn

    def spy(batch: Batch) -> Any:
        assert isinstance(batch.obs, torch.Tensor)
        seen.append([tuple(row) for row in batch.obs.tolist()])
        return learn(batch)

    trainer.policy.learn = spy
    return seen


@pytest.mark.parametrize(("batch_size", "per_pass"), [(8, 3), (16, 2), (20, 1), (64, 1)])
def test_each_pass_of_a_collect_step_is_a_shuffled_partition_of_its_rollout(
    batch_size: int, per_pass: int
) -> None:
    """10 env steps on each of 2 envs: 20 rows. Every pass learns from each row once, in
    minibatches of ``batch_size`` rows (the last one smaller), in a new order each pass."""
    trainer = build("on", max_epoch=1, step_per_epoch=20, step_per_collect=20,
                    repeat_per_collect=3, batch_size=batch_size)  # fmt: skip
    seen = _record_minibatches(trainer)
    rollouts: list[list[tuple[float, ...]]] = []
    original = trainer.policy.process_rollout

    def keep(batch: Batch) -> Batch:
        out = original(batch)
        assert isinstance(out.obs, torch.Tensor)
        rollouts.append([tuple(row) for row in out.obs.flatten(0, 1).tolist()])
        return out

    trainer.policy.process_rollout = keep
    next(iter(trainer))
    assert len(rollouts) == 1 and len(rollouts[0]) == 20
    assert len(seen) == 3 * per_pass
    passes = [
        [row for mb in seen[i * per_pass : (i + 1) * per_pass] for row in mb] for i in range(3)
    ]
    for rows in passes:
        assert sorted(rows) == sorted(rollouts[0])  # every row once per pass
    sizes = [len(mb) for mb in seen[:per_pass]]
    assert sizes == [min(batch_size, 20 - i * batch_size) for i in range(per_pass)]
    assert passes[0] != passes[1] != passes[2]  # reshuffled each pass


def test_envs_that_autoreset_on_the_next_step_need_room_for_their_reset_rows() -> None:
    """With NEXT_STEP autoreset (gymnasium's default) each episode's end costs a reset row:
    episodes of one step take a rollout of 20 env steps to 21 rows per env, not 10."""
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync", max_episode_steps=1)
    policy = TinyPolicy(envs)
    params = OnpolicyParams(
        max_epoch=2, step_per_epoch=20, step_per_collect=20, batch_size=8, show_progress=False
    )
    exact = Collector(policy, envs, ReplayBuffer(20, 2))
    with pytest.raises(ValueError, match=r"capacity >= 42 \(the train envs autoreset on the next"):
        OnpolicyTrainer(policy=policy, params=params, train_collector=exact)
    rows = rollout_rows(20, 2, same_step=False)
    roomy = Collector(policy, envs, ReplayBuffer(rows * 2, 2))
    info = OnpolicyTrainer(policy=policy, params=params, train_collector=roomy).run()
    assert info.env_step == 40 and info.gradient_step > 0
