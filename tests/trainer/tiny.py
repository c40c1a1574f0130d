"""A tiny learnable policy and trainer builders shared by the trainer tests."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode
from torch import nn

from epochtrain.algorithms.base import Policy
from epochtrain.data import Batch, Collector, Obs, ReplayBuffer
from epochtrain.stats import SequenceSummaryStats, TrainingStats
from epochtrain.trainer import OfflineTrainer, OffpolicyTrainer, OnpolicyTrainer


@dataclass
class TinyStats(TrainingStats):
    loss: SequenceSummaryStats | None = None
    loss_extra: SequenceSummaryStats | None = None


class TinyPolicy(Policy[TinyStats]):
    """Linear softmax policy trained to imitate "push towards the pole"."""

    def __init__(
        self, env: gym.vector.VectorEnv[Any, Any, Any], loss_values: list[float] | None = None
    ):
        super().__init__(env.single_observation_space, env.single_action_space)
        self.linear = nn.Linear(4, 2)
        self.optimizers = {"optim": torch.optim.SGD(self.parameters(), lr=0.01)}
        self.loss_values = loss_values  # forced loss values, to test smoothing
        self.seen_deterministic: list[bool] = []
        self.progress: list[int] = []

    def act(
        self, obs: Obs, deterministic: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        assert isinstance(obs, torch.Tensor)
        self.seen_deterministic.append(deterministic)
        logits = self.linear(obs)
        if deterministic:
            return logits.argmax(-1), {}
        return torch.distributions.Categorical(logits=logits).sample(), {}

    def learn(self, batch: Batch) -> TinyStats:
        assert isinstance(batch.obs, torch.Tensor)
        target = (batch.obs[:, 2] > 0).long()
        loss = nn.functional.cross_entropy(self.linear(batch.obs), target)
        self.optimizers["optim"].zero_grad()
        loss.backward()
        self.optimizers["optim"].step()
        value = float(loss.item())
        if self.loss_values is not None:
            value = self.loss_values[len(self.progress) % len(self.loss_values)]
            self.progress.append(-1)
        return TinyStats(
            loss=SequenceSummaryStats.single(value),
            loss_extra=SequenceSummaryStats.single(2 * value),
        )

    def set_progress(self, env_step: int) -> None:
        if self.loss_values is None:
            self.progress.append(env_step)


def make_envs(n: int) -> gym.vector.VectorEnv[Any, Any, Any]:
    return gym.make_vec(
        "CartPole-v1",
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )


def build(kind: str = "off", *, torch_seed: int = 0, **kwargs: Any) -> Any:
    """A small trainer of ``kind`` ("on", "off", "offline") on CartPole.

    ``kwargs`` are trainer params (fields of the kind's params dataclass) or the trainer's
    object arguments (``hooks``, ``logger``, ``stop_fn``, ...).
    """
    torch.manual_seed(torch_seed)
    train_envs, test_envs = make_envs(2), make_envs(2)
    policy = TinyPolicy(train_envs, kwargs.pop("loss_values", None))
    test_collector = Collector(policy, test_envs, exploration=False)
    settings: dict[str, Any] = dict(
        max_epoch=3, step_per_epoch=40, episode_per_test=2, show_progress=False, seed=7
    )
    objects: dict[str, Any] = dict(policy=policy, test_collector=test_collector)
    trainer_cls: Any
    if kind == "offline":
        buffer = ReplayBuffer(200, 2)
        data_envs = make_envs(2)
        data_envs.action_space.seed(0)
        data_collector = Collector(policy, data_envs, buffer)
        data_collector.reset(seed=0)
        data_collector.collect(n_step=200, random=True)
        objects.update(buffer=buffer)
        settings.update(batch_size=16)
        trainer_cls = OfflineTrainer
    elif kind == "on":
        objects.update(train_collector=Collector(policy, train_envs, ReplayBuffer(20, 2)))
        settings.update(step_per_collect=20, batch_size=8, repeat_per_collect=2)
        trainer_cls = OnpolicyTrainer
    else:
        objects.update(train_collector=Collector(policy, train_envs, ReplayBuffer(1000, 2)))
        settings.update(step_per_collect=10, batch_size=16, update_per_step=0.5)
        trainer_cls = OffpolicyTrainer
    fields = {f.name for f in dataclasses.fields(trainer_cls.params_cls)}
    for key, value in kwargs.items():
        (settings if key in fields else objects)[key] = value
    return trainer_cls(params=trainer_cls.params_cls(**settings), **objects)
