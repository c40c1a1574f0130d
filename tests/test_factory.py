"""make_trainer: tuned specs per algorithm, overrides by setting name, errors, seeding, logging."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from epochtrain.algorithms import BC, DQN, PPO
from epochtrain.data import ReplayBuffer
from epochtrain.factory import UnusedSettingWarning, make_envs, make_trainer
from epochtrain.logger import LazyLogger, TensorboardLogger
from epochtrain.presets import PRESETS
from epochtrain.trainer import OfflineTrainer, OffpolicyTrainer, OnpolicyTrainer


def test_ppo_defaults_build_an_onpolicy_trainer() -> None:
    trainer = make_trainer("ppo", "CartPole-v1", show_progress=False)
    assert isinstance(trainer, OnpolicyTrainer)
    assert isinstance(trainer.policy, PPO)
    preset = PRESETS[("ppo", "CartPole-v1")].settings
    assert trainer.params.step_per_epoch == preset["step_per_epoch"]
    assert trainer.train_collector.num_envs == 8
    assert trainer.test_collector is not None and trainer.test_collector.num_envs == 10
    assert not trainer.test_collector.exploration
    assert isinstance(trainer.logger, LazyLogger)


def test_overrides_reach_policy_trainer_and_factory() -> None:
    trainer = make_trainer(
        "dqn",
        "CartPole-v1",
        lr=1e-4,
        hidden=(8,),
        dueling=False,
        batch_size=32,
        num_envs=2,
        buffer_size=1000,
        show_progress=False,
    )
    assert isinstance(trainer, OffpolicyTrainer) and isinstance(trainer.policy, DQN)
    assert trainer.policy.optimizers["q"].param_groups[0]["lr"] == 1e-4
    assert trainer.policy.q_net.net[0].out_features == 8
    assert trainer.params.batch_size == 32
    buffer = trainer.train_collector.buffer
    assert buffer is not None and buffer.num_envs == 2 and buffer.capacity == 1000


def test_per_env_settings_apply_and_user_overrides_win() -> None:
    from epochtrain.data import PrioritizedReplayBuffer

    tuned = make_trainer("dqn", "CartPole-v1", show_progress=False)
    assert isinstance(tuned, OffpolicyTrainer) and isinstance(tuned.policy, DQN)
    assert tuned.policy.dueling and tuned.policy.n_step == 3
    assert not isinstance(tuned.train_collector.buffer, PrioritizedReplayBuffer)
    per = make_trainer("dqn", "CartPole-v1", prioritized_replay=True, show_progress=False)
    assert isinstance(per.train_collector.buffer, PrioritizedReplayBuffer)
    plain = make_trainer("dqn", "Acrobot-v1", show_progress=False)  # no per-env entry
    assert isinstance(plain, OffpolicyTrainer) and isinstance(plain.policy, DQN)
    assert not plain.policy.dueling and plain.policy.n_step == 1
    mine = make_trainer("dqn", "CartPole-v1", n_step=2, show_progress=False)
    assert isinstance(mine.policy, DQN) and mine.policy.n_step == 2 and mine.policy.dueling


def test_unknown_override_names_the_close_matches() -> None:
    with pytest.raises(ValueError, match=r"unknown setting 'lrr'.*did you mean 'lr'"):
        make_trainer("ppo", "CartPole-v1", lrr=1e-3)


def test_unknown_algo_is_rejected() -> None:
    with pytest.raises(ValueError, match="algo must be one of"):
        make_trainer("sarsa", "CartPole-v1")


def test_bc_needs_a_buffer() -> None:
    with pytest.raises(ValueError, match="buffer="):
        make_trainer("bc", "CartPole-v1")


def test_bc_with_a_buffer_builds_an_offline_trainer() -> None:
    buffer = ReplayBuffer(10, 1)
    import numpy as np

    for _ in range(5):
        obs = np.zeros((1, 4), dtype=np.float32)
        buffer.add(
            obs, np.zeros(1, dtype=np.int64), np.ones(1), np.zeros(1, bool), np.zeros(1, bool), obs
        )
    trainer = make_trainer("bc", "CartPole-v1", buffer=buffer, show_progress=False)
    assert isinstance(trainer, OfflineTrainer) and isinstance(trainer.policy, BC)


def test_default_stop_fn_uses_the_reward_threshold_and_none_disables_it() -> None:
    trainer = make_trainer("ppo", "CartPole-v1")
    assert trainer.stop_fn is not None
    assert trainer.stop_fn(475.0) and not trainer.stop_fn(474.9)
    assert make_trainer("ppo", "CartPole-v1", stop_fn=None).stop_fn is None


def test_no_more_test_envs_are_built_than_test_episodes() -> None:
    trainer = make_trainer(
        "ppo", "CartPole-v1", seed=0, max_epoch=1, episode_per_test=3, show_progress=False
    )
    with trainer:
        assert trainer.test_collector is not None and trainer.test_collector.num_envs == 3
        test = next(trainer).test_collect_stat
    assert test is not None and len(test.lens) == 3
    assert test.n_collected_steps == 3 * int(test.lens.max())  # not 10 envs stepping


def test_same_seed_same_initial_weights_without_touching_global_rng() -> None:
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = make_trainer("ppo", "CartPole-v1", seed=3).policy.state_dict()
    assert torch.equal(torch.get_rng_state(), state)
    b = make_trainer("ppo", "CartPole-v1", seed=3).policy.state_dict()
    c = make_trainer("ppo", "CartPole-v1", seed=4).policy.state_dict()
    assert torch.equal(a["actor.net.0.weight"], b["actor.net.0.weight"])
    assert not torch.equal(a["actor.net.0.weight"], c["actor.net.0.weight"])


def test_logdir_gives_a_tensorboard_logger(tmp_path: Path) -> None:
    trainer = make_trainer("ppo", "CartPole-v1", logdir=str(tmp_path), show_progress=False)
    assert isinstance(trainer.logger, TensorboardLogger)


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_one_short_epoch_runs(algo: str) -> None:
    trainer = (
        make_trainer(
            algo,
            "CartPole-v1",
            max_epoch=1,
            step_per_epoch=256,
            warmup_steps=0,
            show_progress=False,
        )
        if algo == "dqn"
        else make_trainer(algo, "CartPole-v1", max_epoch=1, step_per_epoch=256, show_progress=False)
    )
    info = trainer.run()
    assert info.epoch == 1 and info.env_step >= 256 and info.gradient_step > 0
    assert trainer.stop_reason in ("max_epoch", "stop_fn")


TINY_DQN = dict(max_epoch=1, step_per_epoch=64, step_per_collect=16, warmup_steps=32,
                batch_size=16, num_envs=2, num_test_envs=2, episode_per_test=2,
                show_progress=False, stop_fn=None)  # fmt: skip


def _weights(trainer: Any) -> list[torch.Tensor]:
    return [t.clone() for t in trainer.policy.state_dict().values() if isinstance(t, torch.Tensor)]


def test_env_backend_async_trains_the_same_run_in_env_processes() -> None:
    """``env_backend='async'``: gymnasium's AsyncVectorEnv for the training and test envs
    (one process per env), seeded as the sync envs are, so the run is bitwise the same."""
    import gymnasium as gym

    runs = {}
    for backend in ("sync", "async"):
        trainer = make_trainer("dqn", "CartPole-v1", seed=3, env_backend=backend, **TINY_DQN)
        assert trainer.spec is not None and trainer.spec["env_backend"] == backend
        expected = gym.vector.AsyncVectorEnv if backend == "async" else gym.vector.SyncVectorEnv
        assert isinstance(trainer.train_collector.env, expected)
        assert trainer.test_collector is not None
        assert isinstance(trainer.test_collector.env, expected)
        trainer.run()
        runs[backend] = (_weights(trainer), trainer.state.best_test_return)
        trainer.train_collector.env.close()
        trainer.test_collector.env.close()
    assert runs["sync"][1] == runs["async"][1]
    for a, b in zip(runs["sync"][0], runs["async"][0], strict=True):
        assert torch.equal(a, b)


def test_env_backend_rejects_an_unknown_backend_naming_the_choices() -> None:
    with pytest.raises(TypeError, match=r"env_backend must be one of 'sync', 'async', 'envpool'"):
        make_trainer("dqn", "CartPole-v1", env_backend="subproc", show_progress=False)


def test_close_envs_ends_the_env_processes_of_a_live_trainer() -> None:
    import multiprocessing

    from epochtrain.experiment.runs import close_envs

    before = set(multiprocessing.active_children())
    trainer = make_trainer("dqn", "CartPole-v1", env_backend="async", **TINY_DQN)
    assert len(set(multiprocessing.active_children()) - before) == 4  # 2 train + 2 test envs
    close_envs(trainer)
    assert trainer.train_collector.env.closed and trainer.test_collector is not None
    assert trainer.test_collector.env.closed
    assert set(multiprocessing.active_children()) == before  # the trainer is still alive


def test_a_trainer_as_a_context_manager_closes_its_envs_and_logger_however_the_block_ends(
    tmp_path: Path,
) -> None:
    import multiprocessing

    before = set(multiprocessing.active_children())
    settings = {**TINY_DQN, "logging.logdir": str(tmp_path)}
    with make_trainer("dqn", "CartPole-v1", env_backend="async", **settings) as trainer:
        assert len(set(multiprocessing.active_children()) - before) == 4
        trainer.run()
    assert set(multiprocessing.active_children()) == before
    assert trainer.train_collector.env.closed
    trainer.close()  # a second close is harmless

    failing = make_trainer("dqn", "CartPole-v1", env_backend="async", **TINY_DQN)
    with pytest.raises(RuntimeError, match="user code failed"), failing:
        next(failing)
        raise RuntimeError("user code failed")
    assert set(multiprocessing.active_children()) == before


def test_close_envs_warns_when_the_logger_fails_to_close_and_still_closes_the_envs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from epochtrain.experiment.runs import close_envs

    trainer = make_trainer("dqn", "CartPole-v1", **TINY_DQN)

    def broken_close() -> None:
        raise OSError("upload failed")

    monkeypatch.setattr(trainer.logger, "close", broken_close)
    with pytest.warns(UserWarning, match="upload failed"):
        close_envs(trainer)
    assert trainer.train_collector.env.closed


def test_close_ends_the_worker_thread_of_asynchronous_collection() -> None:
    import threading

    before = set(threading.enumerate())  # another test's trainer may still hold one
    trainer = make_trainer("dqn", "CartPole-v1", async_collection=True, **TINY_DQN)
    next(trainer)
    assert trainer.async_collection is not None
    (worker,) = [t for t in set(threading.enumerate()) - before if t.name == "epochtrain-collect"]
    trainer.close()
    assert not worker.is_alive()
    assert trainer.train_collector.env.closed


def test_close_envs_terminates_the_workers_of_an_env_that_fails_to_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import multiprocessing

    from epochtrain.experiment.runs import close_envs

    before = set(multiprocessing.active_children())
    trainer = make_trainer("dqn", "CartPole-v1", env_backend="async", **TINY_DQN)

    def broken_close(**kwargs: Any) -> None:
        raise OSError("pipe already closed")

    monkeypatch.setattr(trainer.train_collector.env, "close", broken_close)
    close_envs(trainer)  # the run's result stands: nothing raised
    assert set(multiprocessing.active_children()) == before  # its workers were terminated


def test_an_experiment_closes_the_env_processes_of_its_runs(tmp_path: Path) -> None:
    import multiprocessing

    from epochtrain import RunSpec
    from epochtrain.experiment import run_experiment

    before = set(multiprocessing.active_children())
    settings = {k: v for k, v in TINY_DQN.items() if k not in ("show_progress", "stop_fn")}
    specs = [
        RunSpec.tuned("dqn", "CartPole-v1", seed=s).with_overrides(
            {**settings, "env_backend": "async", "stop_at": None, "logging.logdir": None}
        )
        for s in (0, 1)
    ]
    experiment = run_experiment(specs, tmp_path, show_progress=False)
    assert len(experiment.finished()) == 2
    assert set(multiprocessing.active_children()) == before


def test_a_logdir_under_a_file_is_refused_naming_logdir(tmp_path: Path) -> None:
    """It was a bare ``NotADirectoryError: [Errno 20] Not a directory``."""
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match=r"logdir '.*afile/runs' is under .*, a file"):
        make_trainer("ppo", "CartPole-v1", logdir=str(tmp_path / "afile" / "runs"))


def test_a_logdir_that_cannot_be_written_is_refused_before_any_env_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was accepted (root writes anywhere) or a bare ``PermissionError`` from the logger."""
    import os

    import epochtrain.factory

    made: list[str] = []
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as for a user not root
    monkeypatch.setattr(epochtrain.factory, "make_envs", lambda *a, **k: made.append("envs"))
    with pytest.raises(ValueError, match=r"logdir .* is not writable by this user"):
        make_trainer("ppo", "CartPole-v1", logdir=str(tmp_path / "runs"))
    assert made == [] and not (tmp_path / "runs").exists()


def test_a_seed_numpy_cannot_take_is_refused_at_build_naming_it() -> None:
    """A seed beyond 2**32 - 1 passed the checks, then stopped the first epoch with numpy's
    traceback (``Seed must be between 0 and 2**32 - 1``)."""
    bounds = r"seed must be int \(>= 0 and <= 4294967295\), got 4294967296"
    with pytest.raises(ValueError, match=bounds):
        make_trainer("ppo", "CartPole-v1", seed=2**32)


def _built_with(**kwargs: Any) -> list[warnings.WarningMessage]:
    """The warnings ``make_trainer("ppo", "CartPole-v1", **kwargs)`` emits."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_trainer("ppo", "CartPole-v1", show_progress=False, **kwargs).close()
    return caught


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"test_in_train": True, "stop_at": None}, r"test_in_train=True .*stop_at=<return>"),
        ({"test_in_train": True, "stop_fn": None}, r"test_in_train=True .*no stop_fn"),
        ({"checkpoint_every": 2}, r"checkpoint_every=2 has no effect: checkpoint_dir is None"),
        ({"keep_last": 5}, r"keep_last=5 has no effect: .*set checkpoint_dir="),
        ({"keep_best": False}, r"keep_best=False has no effect: checkpoint_dir is None"),
        ({"loggers": ("jsonl",)}, r"loggers=\('jsonl',\) has no effect: .*set logdir="),
        ({"logdir": "unused", "logger": LazyLogger()}, r"logging=.*logger= is the run's logger"),
    ],
)
def test_a_setting_the_built_run_would_not_use_warns_once_at_the_callers_line(
    kwargs: dict[str, Any], words: str
) -> None:
    caught = _built_with(**kwargs)
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert caught[0].category is UnusedSettingWarning
    assert re.search(words, str(caught[0].message))
    assert caught[0].filename == __file__  # the user's call, not the factory


def test_those_settings_do_not_warn_where_the_run_uses_them(tmp_path: Path) -> None:
    assert _built_with() == []
    assert _built_with(test_in_train=True) == []  # the tuned stop_at is the stop condition
    assert _built_with(test_in_train=True, stop_at=None, stop_fn=lambda best: best > 1) == []
    ckpts = str(tmp_path / "ckpts")
    assert _built_with(checkpoint_dir=ckpts, checkpoint_every=2, keep_last=5) == []
    assert _built_with(logdir=str(tmp_path / "logs"), loggers=("jsonl",)) == []
    assert _built_with(logger=LazyLogger()) == []


def test_a_buffer_passed_with_a_dataset_in_the_spec_warns_that_the_dataset_is_not_loaded(
    tmp_path: Path,
) -> None:
    buffer = ReplayBuffer(10, 1)
    obs = np.zeros((1, 4), dtype=np.float32)
    for _ in range(5):
        buffer.add(
            obs, np.zeros(1, dtype=np.int64), np.ones(1), np.zeros(1, bool), np.zeros(1, bool), obs
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = make_trainer(
            "bc",
            "CartPole-v1",
            buffer=buffer,
            dataset="data.buf",
            show_progress=False,
            batch_size=4,  # within the 5 transitions: no note on that
        )
    trainer.close()
    assert [str(w.message) for w in caught] == [
        "dataset='data.buf' has no effect: buffer= is the data the run learns from, so the "
        "dataset is not loaded; drop buffer= to learn from the dataset, or set dataset=None"
    ]
    assert caught[0].filename == __file__


def test_check_spec_refuses_a_policy_for_its_actions_before_asking_for_a_dataset() -> None:
    from epochtrain.factory import check_spec
    from epochtrain.spec import RunSpec

    # RunSpec.tuned refuses the pair: the spec of another env, moved
    spec = RunSpec.tuned("td3bc", "Pendulum-v1").replace(env_id="CartPole-v1")
    with pytest.raises(ValueError, match=r"td3bc is for continuous actions"):
        check_spec(spec)


def test_a_policy_in_the_wrong_kind_of_trainer_is_refused_in_plain_words() -> None:
    """It read "it is a offpolicy trainer and PPO learns under ['onpolicy'] trainers"."""
    from epochtrain.data import Collector
    from epochtrain.trainer.params import OffpolicyParams

    envs = make_envs("CartPole-v1", 2)
    ppo = PPO(envs.single_observation_space, envs.single_action_space)
    with pytest.raises(TypeError) as exc:
        OffpolicyTrainer(
            policy=ppo,
            train_collector=Collector(ppo, envs, ReplayBuffer(100, 2)),
            params=OffpolicyParams(show_progress=False),
        )
    envs.close()
    assert str(exc.value) == (
        "OffpolicyTrainer cannot train PPO: it is an off-policy trainer and PPO needs an "
        "on-policy trainer: use OnpolicyTrainer"
    )
