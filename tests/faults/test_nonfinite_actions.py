"""A policy's NaN or inf actions are refused before the env gets them.

Before, a NaN action reached the env (Pendulum turned it into NaN observations, and the run
stopped blaming the env and suggesting an env wrapper), and an inf one was clipped by the
env and stored in the replay buffer (a NaN loss later). Now the collector checks the
policy's float actions before ``env.step``: the run stops (``on_nonfinite``) naming the
policy and its first non-finite weight, or its ``act``, never the env, and the transition
is not stored. For a user's policy and the built-in ones, with synchronous and
asynchronous collection, off- and on-policy.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control import PendulumEnv
from gymnasium.vector import AutoresetMode

from epochtrain import Collector, ReplayBuffer, make_trainer
from epochtrain.algorithms.sac import SAC
from epochtrain.data.batch import ActResult, Obs
from epochtrain.errors import NonFiniteError
from epochtrain.trainer import BaseTrainer, OffpolicyTrainer
from epochtrain.trainer.online import OnlineTrainer
from epochtrain.trainer.params import OffpolicyParams

ENV_BLAME = ("check the env", "NaN guard", "TransformObservation", "observation of sub-env")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Received(gym.vector.VectorWrapper):
    """Keeps every batch of actions the vector env is stepped with."""

    def __init__(self, env: gym.vector.VectorEnv[Any, Any, Any]) -> None:
        super().__init__(env)
        self.actions: list[np.ndarray] = []

    def step(self, actions: Any) -> Any:
        self.actions.append(np.array(actions, dtype=np.float64))
        return super().step(actions)


def pendulums(n: int = 2) -> gym.vector.VectorEnv[Any, Any, Any]:
    return gym.make_vec(
        "Pendulum-v1",
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )


def env_saw_only_finite_actions(envs: Received) -> bool:
    return bool(envs.actions) and all(np.isfinite(a).all() for a in envs.actions)


def pendulum_states_finite(trainer: BaseTrainer[Any]) -> bool:
    """A Pendulum stepped with a NaN torque keeps a NaN state (the run stops before any
    reset); none of the training envs has one."""
    envs = train_collector(trainer).env.unwrapped
    assert isinstance(envs, gym.vector.SyncVectorEnv)
    for env in envs.envs:
        pendulum = env.unwrapped
        assert isinstance(pendulum, PendulumEnv)
        if not np.isfinite(pendulum.state).all():
            return False
    return True


def train_collector(trainer: BaseTrainer[Any]) -> Collector:
    assert isinstance(trainer, OnlineTrainer)
    return trainer.train_collector


def stored_finite(buffer: ReplayBuffer | None) -> bool:
    """Every stored row is finite (an empty on-policy rollout holds nothing to check)."""
    assert buffer is not None
    if len(buffer) == 0:
        return True
    rows = buffer.rollout()
    fields = (rows.obs, rows.act, rows.rew, rows.obs_next)
    return all(isinstance(t, torch.Tensor) and bool(torch.isfinite(t).all()) for t in fields)


def blames_the_policy(message: str, policy_name: str) -> bool:
    return (
        f"chosen by the policy ({policy_name})" in message
        and "the policy is at fault, not the env" in message
        and "neither sent to the env nor stored" in message
        and not any(text in message for text in ENV_BLAME)
    )


class OneBadAction:
    """A user's actor (no nn.Module): zeros, but ``value`` for the last sub-env at call
    ``at``."""

    def __init__(self, value: float, at: int) -> None:
        self.value, self.at, self.calls = value, at, 0

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        assert isinstance(obs, torch.Tensor)
        self.calls += 1
        act = torch.zeros((obs.shape[0], 1))
        if self.calls == self.at:
            act[-1] = self.value
        return act, {}

    def to_tensor(self, obs: Obs) -> Obs:
        return obs


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("n_envs", [1, 2])  # one action is read without numpy: both paths
def test_a_user_actors_nan_or_inf_action_never_reaches_the_env_nor_the_buffer(
    n_envs: int, value: float
) -> None:
    envs = Received(pendulums(n_envs))
    c = Collector(OneBadAction(value, at=5), envs, ReplayBuffer(100, n_envs))
    c.reset(seed=0)
    with pytest.raises(NonFiniteError) as info:
        c.collect(n_step=40)
    message, steps = str(info.value), 4 * n_envs
    assert f"the action of sub-env {n_envs - 1} of 'Pendulum-v1'" in message
    assert blames_the_policy(message, "OneBadAction") and "fix OneBadAction.act" in message
    assert f"after {steps} env steps of this collect step" in message
    assert info.value.env_step == steps
    assert len(envs.actions) == 4 and env_saw_only_finite_actions(envs)  # the 5th never left
    assert c.buffer is not None and len(c.buffer) == steps and stored_finite(c.buffer)
    # a huge but finite float32 action (its square overflows the one reduction) still passes
    c = Collector(OneBadAction(1e20, at=2), pendulums(n_envs), ReplayBuffer(100, n_envs))
    c.collect(n_step=10)
    assert c.buffer is not None and float(c.buffer.rollout().act.max()) == pytest.approx(1e20)


class NaNActSAC(SAC):
    """A user's SAC whose ``act`` returns NaN for sub-env 1 from its ``nan_from``-th call."""

    nan_from = 18

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = 0

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        act, extras = super().act(obs, deterministic)
        self.calls += 1
        if self.calls >= self.nan_from and not deterministic:
            act = act.clone()
            act[1] = math.nan
        return act, extras


def user_sac_trainer(
    envs: gym.vector.VectorEnv[Any, Any, Any], **params: Any
) -> OffpolicyTrainer[Any]:
    torch.manual_seed(0)
    policy = NaNActSAC(envs.single_observation_space, envs.single_action_space, hidden=(16,))
    settings: dict[str, Any] = dict(
        max_epoch=3, step_per_epoch=60, step_per_collect=10, batch_size=16, warmup_steps=20,
        episode_per_test=1, show_progress=False, seed=3,
    )  # fmt: skip
    settings.update(params)
    return OffpolicyTrainer(
        policy=policy,
        params=OffpolicyParams(**settings),
        train_collector=Collector(policy, envs, ReplayBuffer(1000, envs.num_envs)),
        test_collector=Collector(policy, pendulums(1), exploration=False),
    )


@pytest.mark.parametrize("async_collection", [False, True], ids=["sync", "async"])
def test_a_user_policys_nan_action_stops_the_run_naming_its_act_not_the_env(
    async_collection: bool,
) -> None:
    trainer = user_sac_trainer(pendulums(), on_nonfinite="stop", async_collection=async_collection)
    stats = list(trainer)
    assert trainer.stop_reason == "nonfinite" and [s.epoch for s in stats] == [1]
    message = trainer.nonfinite_message or ""
    assert blames_the_policy(message, "NaNActSAC")
    assert "its weights are finite, so NaNActSAC.act made it" in message
    assert pendulum_states_finite(trainer)
    assert stored_finite(trainer.train_collector.buffer)


def poison_the_actor_after_update(trainer: BaseTrainer[Any], update: int) -> None:
    """After the ``update``-th update step (its losses finite), a NaN in the actor's first
    weight: as a gradient step whose loss was finite may leave it."""
    seen = [0]
    actor = trainer.policy.actor
    assert isinstance(actor, torch.nn.Module)

    def after_update() -> None:
        seen[0] += 1
        if seen[0] == update:
            with torch.no_grad():
                next(iter(actor.parameters()))[0, 0] = math.nan

    trainer.register_op("post_steps", after_update)


def builtin(algo: str, **overrides: Any) -> BaseTrainer[Any]:
    """``algo`` on 2 Pendulum-v1 envs, tiny networks."""
    settings: dict[str, Any] = dict(
        max_epoch=2, step_per_epoch=60, num_envs=2, num_test_envs=1, episode_per_test=1,
        hidden=(16,), show_progress=False, stop_fn=None,
    )  # fmt: skip
    if algo == "ppo":
        settings.update(step_per_collect=20, repeat_per_collect=1, batch_size=20)
    else:
        settings.update(step_per_collect=10, batch_size=16, warmup_steps=20, buffer_size=1000)
    return make_trainer(algo, "Pendulum-v1", seed=3, **{**settings, **overrides})


@pytest.mark.parametrize("async_collection", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg"])
def test_nan_weights_after_a_finite_gradient_step_stop_the_run_naming_the_weight(
    algo: str, async_collection: bool
) -> None:
    trainer = builtin(algo, on_nonfinite="stop", async_collection=async_collection)
    poison_the_actor_after_update(trainer, 2)
    stats = list(trainer)
    assert trainer.stop_reason == "nonfinite" and [s.epoch for s in stats] == [1]
    message = trainer.nonfinite_message or ""
    # the trainer's own tail names the weight, not "the weights are unchanged and finite"
    assert "unchanged and finite" not in message
    assert "the policy's tensor 'actor.net.0.weight' already holds NaN or inf" in message
    if async_collection:  # the learner's next loss is the first fault, before any act
        assert "is nan; the step was not applied" in message
        assert not any(text in message for text in ENV_BLAME)
    else:
        assert blames_the_policy(message, algo.upper())
        assert "its weight 'actor.net.0.weight' holds NaN or inf" in message
    assert pendulum_states_finite(trainer)
    assert stored_finite(train_collector(trainer).buffer)


def test_nan_weights_raise_naming_the_weight_and_the_env_step_with_the_default_raise() -> None:
    trainer = builtin("td3")
    poison_the_actor_after_update(trainer, 1)
    with pytest.raises(NonFiniteError) as info:
        next(trainer)
    message = str(info.value)
    # a warm-up of 20 env steps, one collect step of 10, then the poisoned weights act
    assert blames_the_policy(message, "TD3") and "at env step 30 (epoch 1)" in message
    assert "'actor.net.0.weight'" in message and "Set on_nonfinite='stop'" in message
    assert pendulum_states_finite(trainer)


@pytest.mark.parametrize("on_nonfinite", ["stop", "skip"])
def test_ppo_on_pendulum_with_nan_weights_ends_naming_the_weight_under_stop_and_skip(
    on_nonfinite: str,
) -> None:
    trainer = builtin("ppo", on_nonfinite=on_nonfinite)
    poison_the_actor_after_update(trainer, 1)
    stats = list(trainer)
    # a NaN action cannot be skipped (the policy would choose it again): "skip" stops too
    assert trainer.stop_reason == "nonfinite" and [s.epoch for s in stats] == [1]
    message = trainer.nonfinite_message or ""
    assert blames_the_policy(message, "PPO") and "'actor.net.0.weight'" in message
    assert stats[0].info_stat.env_step == 20  # one collect step, then none of the next
    assert pendulum_states_finite(trainer)
    assert stored_finite(train_collector(trainer).buffer)
