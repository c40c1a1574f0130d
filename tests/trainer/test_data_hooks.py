"""Data hooks: ObservationNormalizer, RewardNormalizer (hand-computed), BatchSubSampler."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from epochtrain.data import Batch
from epochtrain.stats import CollectStats
from epochtrain.trainer import (
    BatchSubSampler,
    ObservationNormalizer,
    RewardNormalizer,
    RunningMeanStd,
)
from tests.trainer.tiny import build


def test_running_mean_std_matches_numpy_over_all_updates() -> None:
    rng = np.random.default_rng(0)
    parts = [rng.normal(3.0, 2.0, size=(n, 2)) for n in (5, 1, 17)]
    rms = RunningMeanStd((2,))
    for part in parts:
        rms.update(part)
    data = np.concatenate(parts)
    np.testing.assert_allclose(rms.mean, data.mean(axis=0), rtol=1e-4)
    np.testing.assert_allclose(rms.var, data.var(axis=0), rtol=1e-4)
    assert rms.count == pytest.approx(len(data) + 1e-4)


def test_observation_normalizer_trains_on_training_obs_and_tests_with_them() -> None:
    norm = ObservationNormalizer()
    trainer = build("off", max_epoch=1, hooks=[norm])
    counts: list[float] = []

    def check_test(stat: CollectStats) -> None:
        counts.append(norm.rms.count)

    trainer.register_op("pre_optim_steps", lambda: counts.append(norm.rms.count))
    trainer.register_op("test_end", check_test)
    trainer.run()
    # 2 reset observations, then one per env step; the test step adds none
    assert counts[-1] == counts[-2] == pytest.approx(2 + trainer.state.env_step + 1e-4)
    assert trainer.test_collector.obs_transform is not None
    stored = trainer.train_collector.buffer.rollout().obs
    assert isinstance(stored, torch.Tensor)
    # off-policy the buffer keeps raw observations (CartPole's are within the clip anyway)
    assert float(stored.abs().max()) <= 10.0
    assert trainer.train_collector.act_obs_transform is not None


def test_observation_normalizer_state_round_trips(tmp_path: Path) -> None:
    norm = ObservationNormalizer()
    trainer = build("off", max_epoch=2, hooks=[norm])
    next(trainer)
    trainer.save_checkpoint(tmp_path / "ckpt")
    fresh = ObservationNormalizer()
    build("off", max_epoch=2, hooks=[fresh], resume_from=tmp_path / "ckpt")
    np.testing.assert_array_equal(fresh.rms.mean, norm.rms.mean)
    assert fresh.rms.count == norm.rms.count


def _rows(rew: list[list[float]], done: list[list[bool]]) -> Batch:
    r = torch.tensor(rew)
    d = torch.tensor(done)
    return Batch(
        obs=torch.zeros(*r.shape, 1),
        act=torch.zeros(r.shape),
        rew=r,
        terminated=d,
        truncated=torch.zeros_like(d),
        obs_next=torch.zeros(*r.shape, 1),
    )


def test_reward_normalizer_scales_by_the_std_of_discounted_returns() -> None:
    hook = RewardNormalizer(gamma=0.5, clip=None, epsilon=0.0)
    hook.returns = np.zeros(2)
    # env 0: rewards 1, 2 (ends), 4; env 1: rewards 2, 2, 2
    batch = _rows(
        [[1.0, 2.0], [2.0, 2.0], [4.0, 2.0]], [[False, False], [True, False], [False, False]]
    )
    hook._update(batch)
    # discounted returns: env 0: 1, 2.5 (then reset), 4; env 1: 2, 3, 3.5
    returns = np.array([1.0, 2.0, 2.5, 3.0, 4.0, 3.5])
    np.testing.assert_allclose(hook.returns, [4.0, 3.5])
    assert hook.rms.var == pytest.approx(returns.var(), rel=1e-3)
    scaled = hook.scale(batch)
    torch.testing.assert_close(scaled.rew, batch.rew / float(np.sqrt(hook.rms.var)))


def test_reward_normalizer_scales_the_on_policy_rollout_and_off_policy_minibatches() -> None:
    for kind in ("on", "off"):
        hook = RewardNormalizer()
        trainer = build(kind, max_epoch=1, hooks=[hook])
        learned: list[torch.Tensor] = []

        def record(batch: Batch, learned: list[torch.Tensor] = learned) -> Batch:
            learned.append(batch.rew)
            return batch

        trainer.register_op("process_optim_batch", record)
        trainer.run()
        assert hook.rms.count > 1
        std = float(np.sqrt(hook.rms.var + hook.epsilon))
        # CartPole pays 1 per step; no data arrived after the last minibatch was scaled
        assert learned[-1].tolist() == pytest.approx([1.0 / std] * len(learned[-1]), rel=1e-6)
        if kind == "off":  # the replay buffer keeps the raw rewards
            assert bool((trainer.train_collector.buffer.rollout().rew == 1.0).all())
    with pytest.raises(ValueError, match="RewardNormalizer needs an online trainer"):
        build("offline", hooks=[RewardNormalizer()])


def test_batch_sub_sampler_learns_from_a_subset() -> None:
    sizes: list[int] = []
    trainer = build("off", max_epoch=1, hooks=[BatchSubSampler(5)])
    trainer.register_op("process_optim_batch", lambda b: (sizes.append(len(b)), b)[1])
    trainer.run()
    assert sizes and set(sizes) == {5}
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        BatchSubSampler(0)


def test_batch_sub_sampler_draws_from_the_trainer_rng() -> None:
    def run() -> list[float]:
        trainer = build("off", max_epoch=1, hooks=[BatchSubSampler(5)])
        return [s.training_stat.loss.mean for s in trainer]

    assert run() == run()
