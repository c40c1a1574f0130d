"""A NaN or inf log-probability is blamed on the policy before anything learns from it.

Before, PPO computed the behaviour policy's ``logp`` of a rollout without a check: a
degenerate distribution (a Gaussian whose log-std sent its standard deviation to 0) gave
NaN, every probability ratio was NaN, and the run stopped on "the loss of optimizer 'ppo'
is nan", offering to skip such gradient steps. A ``logp`` a user's policy returned with
its actions (a collect-time extra) was stored unchecked. Now both name the policy, the
sub-env and the step, and nothing is stored or learned from them.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor

from epochtrain import Collector, ReplayBuffer, make_trainer
from epochtrain.algorithms import PPO
from epochtrain.data.batch import ActResult, Obs
from epochtrain.errors import NonFiniteError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_gaussian_whose_std_underflowed_stops_ppo_naming_its_log_std_not_the_loss() -> None:
    trainer = make_trainer(
        "ppo", "Pendulum-v1", seed=0, step_per_epoch=64, step_per_collect=64, num_envs=2
    )
    with trainer:
        policy = trainer.policy
        assert isinstance(policy, PPO)
        with torch.no_grad():
            policy.log_std.fill_(-100.0)  # finite, but exp(-100) is 0 in float32
        before = {k: v.clone() for k, v in policy.state_dict().items() if isinstance(v, Tensor)}
        with pytest.raises(NonFiniteError) as exc:
            next(trainer)
        message = str(exc.value)
        assert "log-probability of the action" in message
        assert "log_std [-100.0]" in message and "not the env" in message
        assert "loss" not in message.split(":")[0]
        assert "on_nonfinite='stop'" in message and "'skip'" not in message  # it would stop
        assert trainer.state.gradient_step == 0
        after = policy.state_dict()
        assert all(torch.equal(v, after[k]) for k, v in before.items())


def test_an_inf_logp_names_the_sub_env_and_rollout_row_and_the_policys_method(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trainer = make_trainer(
        "ppo", "CartPole-v1", seed=0, step_per_epoch=32, step_per_collect=32, num_envs=2
    )
    original = PPO.log_prob

    def log_prob(self: PPO, obs: Tensor, actions: Tensor) -> Tensor:
        logp = original(self, obs, actions).clone()
        logp[2 * 2 + 1] = -torch.inf  # row 2 of the [time, env] rollout, sub-env 1
        return logp

    monkeypatch.setattr(PPO, "log_prob", log_prob)
    with trainer, pytest.raises(NonFiniteError) as exc:
        next(trainer)
    message = str(exc.value)
    assert "in sub-env 1 (row 2 of the rollout) is -inf" in message
    assert "PPO.log_prob made it" in message and "not the env" in message
    assert exc.value.where == "logp of the action of sub-env 1 at rollout row 2"


def test_with_on_nonfinite_stop_a_nan_logp_ends_the_run_after_the_epoch_with_its_cause() -> None:
    trainer = make_trainer(
        "ppo", "Pendulum-v1", seed=0, step_per_epoch=64, step_per_collect=64, num_envs=2,
        on_nonfinite="stop", max_epoch=3,
    )  # fmt: skip
    with trainer:
        policy = trainer.policy
        assert isinstance(policy, PPO)
        with torch.no_grad():
            policy.log_std.fill_(-100.0)
        epochs = list(trainer)
    assert len(epochs) == 1 and trainer.stop_reason == "nonfinite"
    assert trainer.state.gradient_step == 0
    assert trainer.nonfinite_message is not None
    assert "log_std [-100.0]" in trainer.nonfinite_message
    assert "at the update after env step 64" in trainer.nonfinite_message


class LogpPolicy(torch.nn.Module):
    """A user's policy that returns ``logp`` with its actions; sub-env 1's is -inf."""

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        assert isinstance(obs, Tensor)
        logp = torch.zeros(obs.shape[0])
        logp[1] = -torch.inf
        return torch.zeros(obs.shape[0], dtype=torch.int64), {"logp": logp}

    def to_tensor(self, obs: Obs) -> Obs:
        return obs


class FiniteLogp(LogpPolicy):
    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        act, _ = super().act(obs, deterministic)
        return act, {"logp": torch.full((obs.shape[0],), -0.5)}


def test_an_inf_logp_a_policy_returns_with_its_actions_is_blamed_on_it_and_not_stored() -> None:
    envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    finite = ReplayBuffer(20, 2)
    collector = Collector(FiniteLogp(), envs, finite)
    collector.collect(n_step=4)  # finite extras are stored as returned
    logp = finite.rollout().logp
    assert logp is not None and np.allclose(logp.numpy(), -0.5)
    buffer = ReplayBuffer(20, 2)
    collector = Collector(LogpPolicy(), envs, buffer)
    with pytest.raises(NonFiniteError) as exc:
        collector.collect(n_step=4)
    collector.close()
    message = str(exc.value)
    assert "extra 'logp' of sub-env 1 of 'CartPole-v1'" in message
    assert "returned by the policy (LogpPolicy)" in message and "not the env" in message
    assert len(buffer) == 0


@pytest.mark.parametrize("algo", ["a2c", "pg"])
def test_a2c_and_pg_blame_a_std_that_underflowed_not_their_loss(algo: str) -> None:
    # they compute log-probabilities inside learn: the loss went NaN and the message was
    # "the loss of optimizer 'a2c' is nan", as if the loss or the data were at fault
    trainer = make_trainer(
        algo, "Pendulum-v1", seed=0, step_per_epoch=64, step_per_collect=64, num_envs=2
    )
    with trainer:
        policy = trainer.policy
        with torch.no_grad():
            policy.get_parameter("log_std").fill_(-100.0)
        before = {k: v.clone() for k, v in policy.state_dict().items() if isinstance(v, Tensor)}
        with pytest.raises(NonFiniteError) as exc:
            next(trainer)
        message = str(exc.value)
        assert "log-probability of the action" in message and "row " in message
        assert "log_std [-100.0]" in message and "not the env" in message
        assert "optimizer" not in message
        assert trainer.state.gradient_step == 0
        after = policy.state_dict()
        assert all(torch.equal(v, after[k]) for k, v in before.items())
