"""Adding an algorithm with the public API only: a module (config + policy + stats) and one
registry line. Then, in the Python process that registered it, it is an algorithm like the
built-in ones: ``make_trainer``, specs and their TOML files, presets, checkpoints and
resumes, and sweeps from Python (``grid``/``run_experiment``) all know it. The
``epochtrain`` command does not import this module, so its ``--algo`` does not offer the
name: to use the command line, run ``epochtrain.cli.main()`` from a script that imports
this module first (``docs/specs.md``, "Adding an algorithm").

State that must survive a resume (a step counter kept as a plain attribute is lost) goes in
``get_extra_state``/``set_extra_state``, extending ``super()``'s, as the built-ins do::

    def get_extra_state(self): return super().get_extra_state() | {"steps": self.steps}
    def set_extra_state(self, state): super().set_extra_state(state); self.steps = state["steps"]

The algorithm is REINFORCE with a linear softmax policy and no baseline (Williams 1992),
for Discrete actions: small enough to read in one go.

Run: ``python examples/custom_algorithm.py``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import torch
from torch import nn

from epochtrain import (
    ALGORITHMS,
    Batch,
    Config,
    Policy,
    RunSpec,
    SequenceSummaryStats,
    TrainingStats,
    make_trainer,
    register,
)
from epochtrain.algorithms import TrainerKind, resolve_config
from epochtrain.config import param


@dataclass(frozen=True, kw_only=True)
class LinearPGConfig(Config):
    """Linear REINFORCE settings."""

    lr: float = param(0.01, gt=0)
    """Adam learning rate."""
    gamma: float = param(0.99, ge=0, le=1)
    """Discount factor."""


@dataclass(kw_only=True)
class LinearPGTrainingStats(TrainingStats):
    """Stats of a gradient step: the REINFORCE loss."""

    loss: SequenceSummaryStats


class LinearPG(Policy[LinearPGTrainingStats]):
    """REINFORCE with a linear softmax policy over a flat Box observation."""

    trainer_kinds: ClassVar[frozenset[TrainerKind]] = frozenset({"onpolicy"})
    config: LinearPGConfig

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: LinearPGConfig | None = None,
        *,
        device: str | torch.device = "cpu",
        **overrides: object,
    ) -> None:
        cfg = resolve_config(LinearPGConfig, config, overrides)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"action_space must be Discrete for LinearPG, got {action_space}")
        super().__init__(observation_space, action_space, cfg, device=device)
        obs_dim = int(torch.tensor(observation_space.shape or (1,)).prod())
        self.logits = nn.Linear(obs_dim, int(action_space.n))
        self.to(self.device)
        self.optimizers["pi"] = torch.optim.Adam(self.parameters(), lr=cfg.lr)

    def act(self, obs: Any, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, Any]]:
        """Sampled (or most likely) actions."""
        logits = self.logits(obs.float())
        if deterministic:
            return logits.argmax(-1), {}
        return torch.distributions.Categorical(logits=logits).sample(), {}

    def process_rollout(self, batch: Batch) -> Batch:
        """Discounted return of each step to the end of its episode (cut at the rollout end)."""
        ret = torch.zeros_like(batch.rew, dtype=torch.float32)
        running = torch.zeros_like(ret[0])
        for t in range(ret.shape[0] - 1, -1, -1):
            running = batch.rew[t] + self.config.gamma * running * (~batch.done[t]).float()
            ret[t] = running
        return dataclasses.replace(batch, ret=ret)

    def learn(self, batch: Batch) -> LinearPGTrainingStats:
        """One REINFORCE step on normalised returns."""
        assert batch.ret is not None
        ret = (batch.ret - batch.ret.mean()) / (batch.ret.std() + 1e-8)
        logp = torch.distributions.Categorical(logits=self.logits(batch.obs.float()))
        loss = -(logp.log_prob(batch.act) * ret).mean()
        self.optimize("pi", loss)
        return LinearPGTrainingStats(loss=SequenceSummaryStats.single(loss.item()))


if "linear-pg" not in ALGORITHMS:  # the one registry line
    register(
        "linear-pg",
        LinearPG,
        LinearPGConfig,
        "onpolicy",
        num_envs=4,
        trainer={"step_per_collect": 1000, "repeat_per_collect": 1, "batch_size": None},
        source="examples/custom_algorithm.py",
    )


def main(max_epoch: int = 8) -> list[float]:
    """Train linear REINFORCE on CartPole; returns the test return of each epoch."""
    spec = RunSpec.tuned("linear-pg", "CartPole-v1", seed=0).with_overrides(
        {"max_epoch": max_epoch, "step_per_epoch": 4000, "show_progress": False, "stop_at": None}
    )
    print(spec.to_toml())
    returns = []
    for stats in make_trainer(spec):
        assert stats.test_collect_stat is not None and stats.test_collect_stat.returns_stat
        returns.append(stats.test_collect_stat.returns_stat.mean)
        print(f"epoch {stats.epoch}: test return {returns[-1]:.1f}")
    return returns


if __name__ == "__main__":
    main()
