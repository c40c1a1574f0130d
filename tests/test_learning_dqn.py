"""Learning smoke test of the DQN family: n-step + dueling + prioritized replay learns CartPole.

One seeded run on one thread, stopped as soon as a deterministic test reaches the bar;
well under a minute. The full 475 bar over 5 seeds lives in ``benchmarks/learning.py``
(case ``dqn-cartpole``).
"""

from __future__ import annotations

import pytest
import torch

from epochtrain.algorithms import DQN
from epochtrain.data import PrioritizedReplayBuffer
from epochtrain.factory import make_trainer
from epochtrain.trainer import OffpolicyTrainer

pytestmark = pytest.mark.slow

BAR = 250.0  # a random policy scores about 22 on CartPole-v1, an untrained greedy one ~10


def test_rainbow_style_dqn_learns_cartpole_within_16_epochs() -> None:
    torch.set_num_threads(1)
    trainer = make_trainer(
        "dqn",
        "CartPole-v1",
        seed=0,
        n_step=3,
        dueling=True,
        prioritized_replay=True,
        max_epoch=16,  # of 1,024 env steps (the preset's), after 1,000 warm-up steps
        stop_fn=lambda best: best >= BAR,
        show_progress=False,
    )
    assert isinstance(trainer, OffpolicyTrainer)
    assert isinstance(trainer.train_collector.buffer, PrioritizedReplayBuffer)
    info = trainer.run()
    assert trainer.stop_reason == "stop_fn", info
    assert info.best_test_return >= BAR
    policy = trainer.policy
    assert isinstance(policy, DQN) and policy.n_updates > 0
    buffer = trainer.train_collector.buffer
    assert buffer.max_priority > 1.0  # priorities were updated from TD errors
