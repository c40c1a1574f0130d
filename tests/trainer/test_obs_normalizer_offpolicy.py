"""ObservationNormalizer off-policy: the buffer keeps raw observations, each sampled
minibatch is normalised with the current statistics, the policy acts on normalised ones."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from epochtrain import make_trainer
from epochtrain.data import Batch, Collector, ReplayBuffer
from epochtrain.trainer import ObservationNormalizer, OffpolicyTrainer, OnpolicyTrainer
from tests import resume_cases
from tests.trainer.test_base import comparable
from tests.trainer.tiny import TinyPolicy, build


class Drift(gym.Env[np.ndarray, int]):
    """Observations ``[5 + t] * 4`` over 10-step episodes: their statistics drift for a
    long time, and a raw observation tells its step."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.full(4, 5.0, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.full(4, 5.0 + self.t, np.float32), 0.0, False, self.t >= 10, {}


def drift_envs(n: int) -> gym.vector.VectorEnv[Any, Any, Any]:
    return gym.vector.SyncVectorEnv([Drift] * n, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def drift_trainer(norm: ObservationNormalizer) -> OffpolicyTrainer[Any]:
    torch.manual_seed(0)
    envs = drift_envs(2)
    policy = TinyPolicy(envs)
    params = OffpolicyTrainer.params_cls(
        max_epoch=2,
        step_per_epoch=100,
        step_per_collect=10,
        batch_size=32,
        update_per_step=0.5,
        episode_per_test=2,
        show_progress=False,
        seed=7,
    )
    return OffpolicyTrainer(
        params=params,
        policy=policy,
        train_collector=Collector(policy, envs, ReplayBuffer(1000, 2)),
        test_collector=Collector(policy, drift_envs(2), exploration=False),
        hooks=[norm],
    )


def test_offpolicy_learns_from_stored_raw_obs_normalised_with_the_current_statistics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stale-normalisation repro: raw obs 5.0 collected in the first episode and in
    the last must reach ``learn`` as the same input, the current statistics' value."""
    norm = ObservationNormalizer()
    trainer = drift_trainer(norm)
    buffer = trainer.train_collector.buffer
    learn = trainer.policy.learn
    seen: list[tuple[Batch, np.ndarray]] = []

    def recording_learn(batch: Batch) -> Any:
        assert batch.index is not None
        raw = buffer.get(batch.index)
        seen.append((batch, norm.normalize(raw.obs.numpy())))
        assert isinstance(raw.obs_next, torch.Tensor)
        expected_next = norm.normalize(raw.obs_next.numpy())
        assert torch.equal(batch.obs_next, torch.from_numpy(expected_next))
        return learn(batch)

    monkeypatch.setattr(trainer.policy, "learn", recording_learn)
    trainer.run()
    stored = buffer.rollout().obs
    assert isinstance(stored, torch.Tensor)
    # the buffer holds the env's observations as they were: 5 + t, t in 0..10
    assert set(stored[..., 0].flatten().tolist()) <= {5.0 + t for t in range(11)}
    assert len(seen) > 20
    for batch, expected in seen:
        assert torch.equal(batch.obs, torch.from_numpy(expected))  # bit for bit
    # raw 5.0 replayed in the last update step: one input for all, the current one
    last, _ = seen[-1]
    raw_last = buffer.get(last.index).obs
    fives = last.obs[raw_last[:, 0] == 5.0]
    assert len(fives) > 0
    now = torch.from_numpy(norm.normalize(np.full((1, 4), 5.0)))
    assert torch.equal(fives, now.expand_as(fives))


def test_offpolicy_policy_acts_on_the_obs_an_onpolicy_normaliser_gives_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``act_obs_transform``: the policy acts on exactly what ``obs_transform`` would give
    it (same statistics, same bits, across collect calls), and the buffer keeps raw obs."""
    runs: list[tuple[list[torch.Tensor], ObservationNormalizer, ReplayBuffer]] = []
    for attribute in ("obs_transform", "act_obs_transform", None):
        torch.manual_seed(0)
        envs = drift_envs(2)
        policy = TinyPolicy(envs)
        inputs: list[torch.Tensor] = []
        act = policy.act

        def recording_act(
            obs: Any, deterministic: bool = False, act: Any = act, inputs: Any = inputs
        ) -> Any:
            inputs.append(obs.clone())
            return act(obs, deterministic)

        monkeypatch.setattr(policy, "act", recording_act)
        buffer = ReplayBuffer(200, 2)
        collector = Collector(policy, envs, buffer)
        norm = ObservationNormalizer()
        norm.rms = type(norm.rms)((4,))
        if attribute is not None:
            setattr(collector, attribute, norm._train_transform)
        collector.reset(seed=0)
        for n_step in (6, 14, 30):  # each collect call starts from the current obs
            collector.collect(n_step=n_step)
        runs.append((inputs, norm, buffer))
    (normed, norm_a, _), (acted, norm_b, raw_buffer), (_, _, plain_buffer) = runs
    assert len(acted) == len(normed) == 25
    for a, b in zip(acted, normed, strict=True):
        assert torch.equal(a, b)
    assert float(acted[-1].abs().max()) < 3.0  # normalised, not raw (5 .. 15)
    np.testing.assert_array_equal(norm_b.rms.mean, norm_a.rms.mean)
    assert norm_b.rms.count == norm_a.rms.count
    assert torch.equal(raw_buffer.rollout().obs, plain_buffer.rollout().obs)
    assert torch.equal(raw_buffer.rollout().obs_next, plain_buffer.rollout().obs_next)


def test_the_hook_normalises_what_the_policy_acts_on_onpolicy_in_the_buffer_too() -> None:
    off, on = ObservationNormalizer(), ObservationNormalizer()
    trainer_off, trainer_on = (
        build("off", max_epoch=1, hooks=[off]),
        build("on", max_epoch=1, hooks=[on]),
    )
    trainer_off.run()
    trainer_on.run()
    assert isinstance(trainer_on, OnpolicyTrainer)
    assert trainer_off.train_collector.obs_transform is None
    assert trainer_off.train_collector.act_obs_transform is not None
    assert trainer_on.train_collector.act_obs_transform is None
    assert (off.buffer_obs, on.buffer_obs) == ("raw", "normalised")


def test_offpolicy_resume_with_the_normaliser_is_exact(tmp_path: Path) -> None:
    """Resumed at epoch 2 of 4, a DQN run with the hook gives the uninterrupted run's
    epoch stats and weights; its checkpoint records that the buffer holds raw obs."""
    whole = resume_cases.build("dqn", tmp_path, hooks=[ObservationNormalizer()])
    expected = resume_cases.snapshot(whole, list(whole))
    first = resume_cases.build("dqn", tmp_path, hooks=[ObservationNormalizer()])
    stats = [next(first) for _ in range(resume_cases.N_EPOCHS)]
    first.save_checkpoint(tmp_path / "ckpt")
    hook_state = first.state_dict()["hooks"][0]["state"]
    assert hook_state["buffer_obs"] == "raw"
    resumed_hook = ObservationNormalizer()
    resumed = resume_cases.build(
        "dqn", tmp_path, hooks=[resumed_hook], resume_from=str(tmp_path / "ckpt")
    )
    rest = list(resumed)
    got = resume_cases.snapshot(resumed, stats + rest)
    assert got["stats"] == expected["stats"]
    for key, value in expected["policy"].items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(got["policy"][key], value), key
    assert [comparable(s) for s in stats] == expected["stats"][: resume_cases.N_EPOCHS]


def _legacy(state: dict[str, Any]) -> dict[str, Any]:
    """A hook state as the versions that stored normalised obs off-policy wrote it."""
    return {key: value for key, value in state.items() if key != "buffer_obs"}


def test_a_checkpoint_whose_buffer_holds_normalised_obs_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written by an off-policy run that stored normalised obs (no ``buffer_obs``), a
    checkpoint is refused on resume, naming why, and nothing is restored."""
    writer = build("off", max_epoch=2, hooks=[ObservationNormalizer()])
    next(writer)
    with monkeypatch.context() as patch:
        saving = ObservationNormalizer.state_dict
        patch.setattr(ObservationNormalizer, "state_dict", lambda self: _legacy(saving(self)))
        writer.save_checkpoint(tmp_path / "legacy")
    hook = ObservationNormalizer()
    trainer = build("off", max_epoch=2, hooks=[hook])
    next(trainer)
    mean, count, rows = hook.rms.mean.copy(), hook.rms.count, len(trainer.train_collector.buffer)
    with pytest.raises(ValueError, match="normalise them twice: start a new run"):
        trainer.load_checkpoint(tmp_path / "legacy")
    np.testing.assert_array_equal(hook.rms.mean, mean)
    assert hook.rms.count == count and trainer.state.epoch == 1
    assert len(trainer.train_collector.buffer) == rows


def test_a_legacy_state_loaded_before_registering_keeps_its_statistics() -> None:
    """How ``epochtrain eval`` can act with an old off-policy run's statistics."""
    writer = build("off", max_epoch=1, hooks=[ObservationNormalizer()])
    writer.run()
    saved = _legacy(writer.hooks[0].state_dict())
    hook = ObservationNormalizer()
    hook.load_state_dict(saved)
    reader = build("off", max_epoch=1)
    reader.register_hook(hook)
    np.testing.assert_array_equal(hook.rms.mean, saved["rms"]["mean"])
    assert reader.test_collector.obs_transform is not None


def test_with_async_collection_the_worker_acts_on_a_staged_copy_of_the_statistics() -> None:
    """Accepted (it was refused): the worker's collector gets a fork of the statistics,
    the synchronous trainer none (tests/test_async_obs_normalizer.py runs them)."""
    norm = ObservationNormalizer()
    trainer = make_trainer("dqn", "CartPole-v1", async_collection=True, hooks=[norm])
    assert isinstance(trainer, OffpolicyTrainer) and trainer.async_collection is not None
    assert trainer.async_collection.act_obs_staging is not None
    assert trainer.train_collector.act_obs_transform is not None
    assert norm.buffer_obs == "raw"


def test_a_minibatch_is_normalised_on_its_device_with_the_statistics_of_now() -> None:
    """``normalize_batch`` equals ``normalize`` bit for bit, and follows an update."""
    norm = ObservationNormalizer(clip=2.0)
    norm.rms = type(norm.rms)((3,))
    rng = np.random.default_rng(0)
    norm.rms.update(rng.normal(4.0, 3.0, size=(50, 3)))
    raw = torch.from_numpy(rng.normal(4.0, 6.0, size=(8, 3)).astype(np.float32))
    batch = Batch(
        obs=raw,
        act=torch.zeros(8),
        rew=torch.zeros(8),
        terminated=torch.zeros(8, dtype=torch.bool),
        truncated=torch.zeros(8, dtype=torch.bool),
        obs_next=raw + 1,
    )
    out = norm.normalize_batch(batch)
    assert out.obs.dtype == torch.float32
    assert torch.equal(out.obs, torch.from_numpy(norm.normalize(raw.numpy())))
    assert torch.equal(out.obs_next, torch.from_numpy(norm.normalize(raw.numpy() + 1)))
    assert float(out.obs.abs().max()) == 2.0  # clipped
    norm.rms.update(rng.normal(-4.0, 1.0, size=(50, 3)))
    again = norm.normalize_batch(dataclasses.replace(batch))
    assert torch.equal(again.obs, torch.from_numpy(norm.normalize(raw.numpy())))
    assert not torch.equal(again.obs, out.obs)
