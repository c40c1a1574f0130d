"""Faulty envs and small trainers for the fault-injection tests (module level: picklable)."""

from __future__ import annotations

import functools
import os
import signal
import threading
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from epochtrain import BC, DQN, PPO, Collector, PrioritizedReplayBuffer, ReplayBuffer
from epochtrain.trainer import OfflineTrainer, OffpolicyTrainer, OnpolicyTrainer
from epochtrain.trainer.params import OfflineParams, OffpolicyParams, OnpolicyParams


class FaultyEnv(gym.Env[np.ndarray, np.int64]):
    """CartPole-shaped: obs ``[t, 0, 0, 0]``, reward 1, episodes of 20 steps.

    From its ``fault_at``-th step on (counted over its life) it returns NaN in the
    observation (``fault="nan_obs"``), inf as the reward (``"inf_reward"``), or raises
    (``"raise"``); ``fault="raise_in_reset"`` raises in every reset instead;
    ``fault_at=None`` never faults.
    """

    def __init__(self, fault: str = "raise", fault_at: int | None = None) -> None:
        self.observation_space = gym.spaces.Box(-1e6, 1e6, shape=(4,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.fault, self.fault_at = fault, fault_at
        self.steps = 0
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, 0.0, 0.0, 0.0], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if self.fault == "raise_in_reset" and self.fault_at is not None:
            raise RuntimeError("the simulator crashed")
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        self.t += 1
        obs, reward = self._obs(), 1.0
        if self.fault_at is not None and self.steps >= self.fault_at:
            if self.fault == "raise":
                raise RuntimeError("the simulator crashed")
            if self.fault == "nan_obs":
                obs[1] = np.nan
            if self.fault == "inf_reward":
                reward = float("inf")
        return obs, reward, self.t >= 20, False, {}


def make_faulty(fault: str, fault_at: int | None) -> FaultyEnv:
    return FaultyEnv(fault, fault_at)


class CtrlCEnv(FaultyEnv):
    """:class:`FaultyEnv` that never faults but presses Ctrl-C at its ``ctrl_c_at``-th step:
    SIGINT to its whole process group, as a terminal does (run it in a session of its own)."""

    def __init__(self, ctrl_c_at: int | None) -> None:
        super().__init__("raise", None)
        self.ctrl_c_at = ctrl_c_at

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        out = super().step(action)
        if self.steps == self.ctrl_c_at:
            os.killpg(os.getpgid(0), signal.SIGINT)
        return out


def ctrl_c_vec(n: int, ctrl_c_at: int | None) -> gym.vector.AsyncVectorEnv:
    """``n`` envs in worker processes; sub-env 1 presses Ctrl-C at its ``ctrl_c_at``-th step."""
    fns = [functools.partial(CtrlCEnv, ctrl_c_at if i == 1 else None) for i in range(n)]
    return gym.vector.AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)


class HangingEnv(FaultyEnv):
    """:class:`FaultyEnv` that hangs for ever in its ``hang_at``-th step (counted over its
    life), as an env stuck in native code does: from then on deaf to Ctrl-C (SIGINT
    ignored), ended only by SIGTERM or SIGKILL. With ``interrupt`` (a signal number) it
    first sends that signal to the process that started it: Ctrl-C (or SIGTERM) given to
    the run once the env hung; with ``hung_file`` it first appends its pid to that file
    (for a test that signals the run itself). For env processes (``AsyncVectorEnv``) only."""

    def __init__(
        self, hang_at: int | None, interrupt: int | None = None, hung_file: str | None = None
    ) -> None:
        super().__init__("raise", None)
        self.hang_at, self.interrupt, self.hung_file = hang_at, interrupt, hung_file

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.steps + 1 == self.hang_at:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if self.hung_file is not None:
                with open(self.hung_file, "a") as file:
                    file.write(f"{os.getpid()}\n")
            if self.interrupt is not None:
                os.kill(os.getppid(), self.interrupt)
            threading.Event().wait()  # blocks on a lock nobody releases
        return super().step(action)


class ThreadHangingEnv(FaultyEnv):
    """:class:`FaultyEnv` for the asynchronous-collection worker thread: once ``armed`` is
    set, its first step outside the main thread clears it, presses Ctrl-C (SIGINT to the
    main thread) and hangs until ``release`` is set (the test sets it when done; the step
    then raises)."""

    def __init__(self, armed: threading.Event, release: threading.Event) -> None:
        super().__init__("raise", None)
        self.armed, self.release = armed, release

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.armed.is_set() and threading.current_thread() is not threading.main_thread():
            self.armed.clear()
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            self.release.wait()
            raise RuntimeError("released after the test")
        return super().step(action)


def hanging_vec(
    n: int, hang_at: int | None, *, interrupt: int | None = None, hung_file: str | None = None
) -> gym.vector.AsyncVectorEnv:
    """``n`` envs in gymnasium's own ``AsyncVectorEnv`` (not :func:`epochtrain.envs.make_envs`'
    subclass); sub-env 1 hangs in its ``hang_at``-th step (:class:`HangingEnv`)."""
    fns = [
        functools.partial(HangingEnv, hang_at if i == 1 else None, interrupt, hung_file)
        for i in range(n)
    ]
    return gym.vector.AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)


def faulty_vec(
    n: int, bad: int, fault: str, fault_at: int, *, mode: str = "sync"
) -> gym.vector.VectorEnv[Any, Any, Any]:
    """``n`` envs of which sub-env ``bad`` faults at its ``fault_at``-th step."""
    fns = [functools.partial(make_faulty, fault, fault_at if i == bad else None) for i in range(n)]
    kwargs = {"autoreset_mode": AutoresetMode.SAME_STEP}
    if mode == "sync":
        return gym.vector.SyncVectorEnv(fns, **kwargs)
    return gym.vector.AsyncVectorEnv(fns, **kwargs)


def cartpole(n: int) -> gym.vector.VectorEnv[Any, Any, Any]:
    return gym.make_vec(
        "CartPole-v1",
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )


def dqn_trainer(
    train_envs: gym.vector.VectorEnv[Any, Any, Any] | None = None, **params: Any
) -> OffpolicyTrainer[Any]:
    """A small DQN trainer on CartPole (or on ``train_envs``, then tested on ``test_envs``,
    by default two sync :class:`FaultyEnv` that never fault); ``prioritized=True`` gives it
    a prioritized replay buffer, ``policy_cls`` a subclass of DQN."""
    prioritized = bool(params.pop("prioritized", False))
    policy_cls: type[DQN] = params.pop("policy_cls", DQN)
    envs = train_envs if train_envs is not None else cartpole(2)
    test_envs = params.pop("test_envs", None)
    if test_envs is None:
        test_envs = cartpole(2) if train_envs is None else faulty_vec(2, -1, "raise", 1)
    torch.manual_seed(0)
    policy = policy_cls(envs.single_observation_space, envs.single_action_space, hidden=(16,))
    settings: dict[str, Any] = dict(
        max_epoch=3, step_per_epoch=40, step_per_collect=10, update_per_step=0.5,
        batch_size=16, episode_per_test=2, show_progress=False, seed=3,
    )  # fmt: skip
    logger = params.pop("logger", None)
    settings.update(params)
    buffer_cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    return OffpolicyTrainer(
        policy=policy,
        params=OffpolicyParams(**settings),
        train_collector=Collector(policy, envs, buffer_cls(1000, envs.num_envs)),
        test_collector=Collector(policy, test_envs, exploration=False),
        logger=logger,
    )


def ppo_trainer(**params: Any) -> OnpolicyTrainer[Any]:
    """A small PPO trainer on CartPole."""
    torch.manual_seed(0)
    envs = cartpole(2)
    policy = PPO(envs.single_observation_space, envs.single_action_space, hidden=(16,))
    settings: dict[str, Any] = dict(
        max_epoch=3, step_per_epoch=40, step_per_collect=20, repeat_per_collect=1,
        batch_size=10, episode_per_test=2, show_progress=False, seed=3,
    )  # fmt: skip
    logger = params.pop("logger", None)
    settings.update(params)
    return OnpolicyTrainer(
        policy=policy,
        params=OnpolicyParams(**settings),
        train_collector=Collector(policy, envs, ReplayBuffer(20, 2)),
        test_collector=Collector(policy, cartpole(2), exploration=False),
        logger=logger,
    )


def bc_trainer(buffer: ReplayBuffer, **params: Any) -> OfflineTrainer[Any]:
    """A small BC trainer on CartPole data ``buffer``."""
    torch.manual_seed(0)
    envs = cartpole(2)
    policy = BC(envs.single_observation_space, envs.single_action_space, hidden=(16,))
    settings: dict[str, Any] = dict(
        max_epoch=3, step_per_epoch=5, batch_size=16, episode_per_test=2,
        show_progress=False, seed=3,
    )  # fmt: skip
    logger = params.pop("logger", None)
    settings.update(params)
    return OfflineTrainer(
        policy=policy,
        params=OfflineParams(**settings),
        buffer=buffer,
        test_collector=Collector(policy, envs, exploration=False),
        logger=logger,
    )


def cartpole_data(n_steps: int = 200) -> ReplayBuffer:
    """Random CartPole transitions."""
    envs = cartpole(2)
    buffer = ReplayBuffer(n_steps, 2)
    envs.action_space.seed(0)
    collector = Collector(_Random(envs), envs, buffer)
    collector.reset(seed=0)
    collector.collect(n_step=n_steps, random=True)
    return buffer


class _Random:
    def __init__(self, envs: gym.vector.VectorEnv[Any, Any, Any]) -> None:
        self.space = envs.action_space

    def act(self, obs: Any, deterministic: bool = False) -> Any:
        raise AssertionError("random=True never asks the policy")

    def to_tensor(self, obs: Any) -> Any:
        return obs
