"""Asynchronous collection in the off-policy trainer (``async_collection=True``).

Tiny seeded runs: reproducibility, checkpoint and resume, the one-update-stale weights of
the actor copy, the counters against a synchronous run, env faults inside the worker
thread, Ctrl-C during an update, and the checks made before any work.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from epochtrain import DQN, Collector, ReplayBuffer, make_trainer
from epochtrain.algorithms.base import Policy, categorical_sample, normal_like
from epochtrain.algorithms.ddpg import DDPG
from epochtrain.algorithms.dqn import DQNTrainingStats
from epochtrain.algorithms.ppo import PPO
from epochtrain.algorithms.sac import SAC
from epochtrain.algorithms.td3 import TD3
from epochtrain.data.batch import ActResult, Batch, Obs
from epochtrain.errors import EnvError, NonFiniteError
from epochtrain.logger import BaseLogger, Scope
from epochtrain.trainer import BaseTrainer, OffpolicyTrainer
from epochtrain.trainer.params import OffpolicyParams, SettingsMismatchError, compare_settings
from tests.faults.envs import FaultyEnv, dqn_trainer, faulty_vec
from tests.trainer.test_base import comparable

TINY: dict[str, Any] = dict(
    max_epoch=2, batch_size=16, warmup_steps=32, buffer_size=1000, num_test_envs=1,
    episode_per_test=1, show_progress=False, stop_fn=None, async_collection=True,
)  # fmt: skip


def sac(**overrides: Any) -> BaseTrainer[Any]:
    """SAC on Pendulum-v1: 64 env steps per epoch, one env step per collect step."""
    settings = {**TINY, "step_per_epoch": 64, "step_per_collect": 1, "hidden": (16, 16)}
    return make_trainer("sac", "Pendulum-v1", seed=5, **{**settings, **overrides})


def dqn(**overrides: Any) -> BaseTrainer[Any]:
    """The tuned DQN (3-step returns, dueling) with prioritized replay on 2 CartPole envs."""
    settings = {**TINY, "step_per_epoch": 96, "step_per_collect": 8, "update_per_step": 0.5}
    settings.update(num_envs=2, hidden=(16,), target_update_freq=8, prioritized_replay=True)
    return make_trainer("dqn", "CartPole-v1", seed=5, **{**settings, **overrides})


BUILDERS = {"sac": sac, "dqn": dqn}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def weights_equal(a: Policy[Any], b: Policy[Any]) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(
        torch.equal(sa[k], sb[k]) for k in sa if isinstance(sa[k], torch.Tensor)
    )


class RecordingLogger(BaseLogger):
    """Keeps every record it writes."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[Scope, int, dict[str, float]]] = []

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        self.records.append((scope, step, dict(data)))


# ------------------------------------------------------------------ reproducibility
@pytest.mark.parametrize("algo", ["sac", "dqn"])
def test_the_same_seed_twice_gives_the_same_epoch_stats_and_weights(algo: str) -> None:
    first, second = BUILDERS[algo](), BUILDERS[algo]()
    stats_first = [comparable(s) for s in first]
    stats_second = [comparable(s) for s in second]
    assert stats_first == stats_second
    assert weights_equal(first.policy, second.policy)
    assert isinstance(first, OffpolicyTrainer) and first.async_collection is not None


@pytest.mark.parametrize("algo", ["sac", "dqn"])
def test_a_run_resumed_after_epoch_1_continues_as_the_uninterrupted_run(
    algo: str, tmp_path: Path
) -> None:
    full = BUILDERS[algo]()
    full_stats = [comparable(s) for s in full]
    first = BUILDERS[algo]()
    next(first)
    path = first.save_checkpoint(tmp_path / "epoch_1")
    resumed = BUILDERS[algo](resume_from=str(path))
    assert [comparable(s) for s in resumed] == full_stats[1:]
    assert weights_equal(resumed.policy, full.policy)


def test_a_checkpoint_from_before_the_setting_existed_resumes_while_it_is_off() -> None:
    sync, asynchronous = dqn(async_collection=False), dqn()
    older = sync.resume_settings()
    older["trainer"] = {k: v for k, v in older["trainer"].items() if k != "async_collection"}
    assert compare_settings(sync.resume_settings(), older, sync.setting_defaults()) == []
    with pytest.raises(SettingsMismatchError, match=r"trainer\.async_collection"):
        compare_settings(asynchronous.resume_settings(), older, asynchronous.setting_defaults())


def test_a_checkpoint_of_a_synchronous_run_is_refused_by_an_asynchronous_trainer() -> None:
    state = dqn(async_collection=False).state_dict()
    with pytest.raises(ValueError, match="async_collection=False"):
        dqn().load_state_dict(state)


# ------------------------------------------------------------------ the contract
class RecordingDQN(DQN):
    """DQN whose exploring ``act`` records a fingerprint of the weights it acts with."""

    fingerprints: ClassVar[list[float]] = []  # shared by the learner and its actor copy

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        if not deterministic:
            self.fingerprints.append(fingerprint(self))
        return super().act(obs, deterministic)


def fingerprint(policy: DQN) -> float:
    return float(sum(p.detach().double().sum() for p in policy.q_net.parameters()))


def cartpole(n: int, mode: AutoresetMode) -> gym.vector.VectorEnv[Any, Any, Any]:
    return gym.make_vec(
        "CartPole-v1", num_envs=n, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode}
    )


def small_dqn(
    envs: gym.vector.VectorEnv[Any, Any, Any], policy_cls: type[DQN] = DQN, **params: Any
) -> OffpolicyTrainer[Any]:
    """A DQN trainer without test envs: 3 epochs of 40 env steps, 10 per collect step."""
    torch.manual_seed(0)
    policy = policy_cls(envs.single_observation_space, envs.single_action_space, hidden=(8,))
    settings: dict[str, Any] = dict(
        max_epoch=3, step_per_epoch=40, step_per_collect=10, update_per_step=0.5,
        batch_size=8, warmup_steps=16, show_progress=False, seed=1, async_collection=True,
    )  # fmt: skip
    logger = params.pop("logger", None)
    return OffpolicyTrainer(
        policy=policy,
        params=OffpolicyParams(**{**settings, **params}),
        train_collector=Collector(policy, envs, ReplayBuffer(400, envs.num_envs)),
        logger=logger,
    )


def test_collect_k_plus_1_acts_with_the_weights_after_update_k_minus_1() -> None:
    trainer = small_dqn(
        cartpole(1, AutoresetMode.SAME_STEP),
        RecordingDQN,
        max_epoch=2,
        step_per_epoch=16,
        step_per_collect=4,
    )
    policy = trainer.policy
    assert isinstance(policy, RecordingDQN)
    before_update: list[float] = []
    after_update: list[float] = []
    trainer.register_op("pre_optim_steps", lambda: before_update.append(fingerprint(policy)))
    trainer.register_op("post_steps", lambda: after_update.append(fingerprint(policy)))
    RecordingDQN.fingerprints = []  # drop the construction-time check's act
    trainer.run()
    acts = RecordingDQN.fingerprints
    assert len(acts) == 2 * 16 and len(before_update) == 2 * 4
    collects = [acts[i] for i in range(0, len(acts), 4)]
    assert all(len(set(acts[i : i + 4])) == 1 for i in range(0, len(acts), 4))
    for epoch_start in (0, 4):
        # the first collect of an epoch acts with the weights the epoch started with
        assert collects[epoch_start] == before_update[epoch_start]
        for k in range(1, 4):  # collect k+1 ran during update k: the weights before it
            assert collects[epoch_start + k] == before_update[epoch_start + k - 1]
            assert collects[epoch_start + k] != after_update[epoch_start + k - 1]


@pytest.mark.parametrize(
    ("mode", "collect"),
    [
        (AutoresetMode.SAME_STEP, {"step_per_collect": 8}),
        (AutoresetMode.NEXT_STEP, {"step_per_collect": 8}),
        (AutoresetMode.SAME_STEP, {"step_per_collect": None, "episode_per_collect": 2}),
    ],
)
def test_the_buffer_and_counters_match_a_synchronous_run_and_the_utd_ratio_is_logged(
    mode: AutoresetMode, collect: dict[str, Any]
) -> None:
    runs = {}
    for async_collection in (False, True):
        logger = RecordingLogger()
        # episodes of 20 steps whatever the actions: the episode counts can match too
        envs = gym.vector.SyncVectorEnv([FaultyEnv] * 2, autoreset_mode=mode)
        trainer = small_dqn(envs, logger=logger, async_collection=async_collection, **collect)
        trainer.run()
        runs[async_collection] = (trainer, logger)
    (sync, sync_log), (run, log) = runs[False], runs[True]
    for name in ("env_step", "train_episode", "gradient_step", "epoch"):
        assert getattr(run.state, name) == getattr(sync.state, name), name
    buffer, sync_buffer = run.train_collector.buffer, sync.train_collector.buffer
    assert buffer is not None and sync_buffer is not None
    assert (len(buffer), buffer.n_valid, buffer.cursor) == (
        len(sync_buffer),
        sync_buffer.n_valid,
        sync_buffer.cursor,
    )
    ratios = [
        (step, data)
        for scope, step, data in log.records
        if "train/gradient_steps_per_env_step" in data
    ]
    assert ratios and not any(
        "train/gradient_steps_per_env_step" in data for _, _, data in sync_log.records
    )
    assert all(data["train/overlap_time"] >= 0.0 for _, data in ratios)
    last_step, last = ratios[-1]
    assert last_step == run.state.env_step
    assert (
        0.0
        < last["train/gradient_steps_per_env_step"]
        <= run.state.gradient_step / run.state.env_step
    )
    # with a tiny update the worker thread may not be scheduled before it ends: the
    # overlap can be 0 here; WaitingDQN below makes it certain
    assert run.async_overlap_time == pytest.approx(
        sum(data["train/overlap_time"] for _, data in ratios)
    )


class WaitingDQN(DQN):
    """DQN whose first update waits until its actor copy acts in the worker thread."""

    acting = threading.Event()  # shared by the learner and its actor copy

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        if threading.current_thread() is not threading.main_thread():
            self.acting.set()
        return super().act(obs, deterministic)

    def learn(self, batch: Batch) -> DQNTrainingStats:
        if not self.acting.is_set():
            assert self.acting.wait(timeout=30.0), "no collect step ran during the update"
        return super().learn(batch)


def test_collection_during_an_update_counts_as_overlap_time() -> None:
    WaitingDQN.acting.clear()
    envs = gym.vector.SyncVectorEnv([FaultyEnv] * 2)
    trainer = small_dqn(envs, WaitingDQN, max_epoch=1)
    trainer.run()
    assert WaitingDQN.acting.is_set()
    assert trainer.async_overlap_time > 0.0


# ------------------------------------------------------------------ faults
def test_an_env_raising_in_the_worker_thread_surfaces_as_in_synchronous_collection() -> None:
    messages = []
    for async_collection in (False, True):
        envs = faulty_vec(3, bad=2, fault="raise", fault_at=20)  # in epoch 1's second collect
        trainer = dqn_trainer(
            envs, step_per_epoch=60, step_per_collect=30, async_collection=async_collection
        )
        with pytest.raises(EnvError) as info:
            next(trainer)
        assert isinstance(info.value.__cause__, RuntimeError) and info.value.sub_env == 2
        assert envs.closed
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "in step() after 27 env steps" in messages[1] and "env step 57 (epoch 1)" in messages[1]


@pytest.mark.parametrize("on_nonfinite", ["raise", "stop"])
def test_nonfinite_env_data_in_the_worker_thread_is_handled_as_in_synchronous_collection(
    on_nonfinite: str,
) -> None:
    outcomes = []
    for async_collection in (False, True):
        envs = faulty_vec(2, bad=0, fault="nan_obs", fault_at=15)  # in epoch 1's third collect
        trainer = dqn_trainer(envs, on_nonfinite=on_nonfinite, async_collection=async_collection)
        if on_nonfinite == "raise":
            with pytest.raises(NonFiniteError) as info:
                next(trainer)
            outcomes.append(str(info.value))
        else:
            stats = list(trainer)
            assert trainer.stop_reason == "nonfinite" and len(stats) == 1
            counters = (trainer.state.env_step, trainer.state.gradient_step)
            outcomes.append(f"{trainer.nonfinite_message} {counters}")
    assert outcomes[0] == outcomes[1]


def test_ctrl_c_during_an_update_waits_for_the_collect_and_rolls_back_to_the_epoch_end() -> None:
    # a uniform buffer: a rolled-back PrioritizedReplayBuffer does not continue bitwise,
    # with or without async collection
    full = [comparable(s) for s in dqn(prioritized_replay=False)]
    trainer = dqn(prioritized_replay=False)
    next(trainer)
    assert isinstance(trainer, OffpolicyTrainer) and trainer.async_collection is not None
    calls = [0]

    def interrupt() -> None:
        calls[0] += 1
        if calls[0] == 10:  # an update step of epoch 2 with a collect step in flight
            raise KeyboardInterrupt

    trainer.register_op("post_optim", interrupt)
    with pytest.raises(KeyboardInterrupt):
        next(trainer)
    assert trainer.state.epoch == 1 and calls[0] == 10
    assert trainer.async_collection.staged.staged == []  # the collect ended; rows dropped
    assert [comparable(s) for s in trainer] == full[1:]


# ------------------------------------------------------------------ checks before work
class GlobalNoiseDQN(DQN):
    """Explores with the global torch generator, ignoring ``act_generator``."""

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        actions, extras = super().act(obs, deterministic)
        flip = torch.rand(actions.shape) < 0.1
        return torch.where(flip, 1 - actions, actions), extras


class NumpyNoiseDQN(DQN):
    """Explores with numpy's global generator."""

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        actions, extras = super().act(obs, deterministic)
        return actions if np.random.rand() < 0.5 else 1 - actions, extras


@pytest.mark.parametrize("policy_cls", [GlobalNoiseDQN, NumpyNoiseDQN])
def test_a_policy_exploring_with_a_global_generator_is_refused_before_any_work(
    policy_cls: type[DQN],
) -> None:
    envs = cartpole(1, AutoresetMode.SAME_STEP)
    policy = policy_cls(envs.single_observation_space, envs.single_action_space, hidden=(8,))
    streams = (torch.get_rng_state(), np.random.get_state(legacy=False)["state"]["key"].copy())
    with pytest.raises(ValueError, match=r"async_collection=True needs .*act_generator") as info:
        OffpolicyTrainer(
            policy=policy,
            params=OffpolicyParams(async_collection=True, show_progress=False),
            train_collector=Collector(policy, envs, ReplayBuffer(100, 1)),
        )
    assert "async_collection=False" in str(info.value)
    assert torch.equal(torch.get_rng_state(), streams[0])  # the check restores them
    assert np.array_equal(np.random.get_state(legacy=False)["state"]["key"], streams[1])


# ------------------------------------------------------------------ act_generator
def _policies() -> list[Policy[Any]]:
    pendulum, cartpole_env = gym.make("Pendulum-v1"), gym.make("CartPole-v1")
    box = (pendulum.observation_space, pendulum.action_space)
    discrete = (cartpole_env.observation_space, cartpole_env.action_space)
    return [
        DQN(*discrete),
        SAC(*box),
        SAC(*discrete),
        DDPG(*box),
        TD3(*box),
        PPO(*discrete),
        PPO(*box),
    ]


@pytest.mark.parametrize(
    "index", range(7), ids=["dqn", "sac", "sac-discrete", "ddpg", "td3", "ppo", "ppo-box"]
)
def test_act_draws_from_act_generator_exactly_as_from_the_global_generator(index: int) -> None:
    policy = _policies()[index]
    shape = policy.observation_space.shape
    assert shape is not None
    obs = policy.to_tensor(torch.randn(64, *shape))
    torch.manual_seed(7)
    global_draw, _ = policy.act(obs)
    policy.act_generator = torch.Generator().manual_seed(7)
    before = torch.get_rng_state()
    own_draw, _ = policy.act(obs)
    assert torch.equal(global_draw, own_draw)
    assert torch.equal(torch.get_rng_state(), before)  # nothing drawn from the global one


@pytest.mark.parametrize("shape", [(1, 1), (8, 1), (32, 6)])
def test_normal_like_draws_what_randn_draws_from_either_generator(shape: tuple[int, int]) -> None:
    like = torch.zeros(shape)
    torch.manual_seed(3)
    expected = torch.randn(shape)
    torch.manual_seed(3)
    assert torch.equal(normal_like(like, None), expected)
    gen = torch.Generator().manual_seed(3)
    before = torch.get_rng_state()
    assert torch.equal(normal_like(like, gen), expected)
    assert torch.equal(torch.get_rng_state(), before)


def test_categorical_sample_follows_the_softmax_and_its_generator() -> None:
    logits = torch.tensor([[0.3, -1.0, 2.0, -math.inf]]).repeat(200_000, 1)
    gen = torch.Generator().manual_seed(5)
    before = torch.get_rng_state()
    draws = categorical_sample(logits, gen)
    assert torch.equal(torch.get_rng_state(), before)  # nothing drawn from the global one
    assert draws.shape == (200_000,) and draws.dtype == torch.int64
    freq = torch.bincount(draws, minlength=4).double() / len(draws)
    probs = logits[0].double().softmax(-1)
    assert freq[3] == 0  # a masked action is never drawn
    # binomial standard error of a frequency near 0.5 over 200k draws is about 0.0011
    assert torch.allclose(freq, probs, atol=0.005), (freq, probs)
    head = logits[:64]
    assert torch.equal(categorical_sample(head, torch.Generator().manual_seed(5)), draws[:64])
    assert not torch.equal(categorical_sample(head, torch.Generator().manual_seed(6)), draws[:64])


def test_categorical_sample_draws_what_torch_multinomial_draws_from_the_same_generator() -> None:
    # for one sample multinomial draws argmax(p / E), E ~ Exp(1): the same exponentials, so
    # runs from before categorical_sample (PG, A2C, PPO, discrete SAC, BC) repeat exactly
    logits = torch.randn(5_000, 6, generator=torch.Generator().manual_seed(0)) * 3
    ours = categorical_sample(logits, torch.Generator().manual_seed(11))
    probs = logits.softmax(-1)
    theirs = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(11))
    assert torch.equal(ours, theirs.squeeze(-1))


def test_the_docs_python_block_runs(capsys: pytest.CaptureFixture[str]) -> None:
    page = Path(__file__).resolve().parents[1] / "docs" / "async-collection.md"
    (block,) = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL)
    exec(compile(block, str(page), "exec"), {})
    assert "s of collection overlapped updates" in capsys.readouterr().out
