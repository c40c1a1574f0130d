"""An offline run's test-env fault says where the run is in its own unit: gradient steps.

It said "at env step 0" (an offline trainer takes no env step), which reads as a fault
before any training.
"""

from __future__ import annotations

import pytest
import torch

from epochtrain import BC, Collector
from epochtrain.errors import EnvError, NonFiniteError
from epochtrain.trainer import OfflineTrainer
from epochtrain.trainer.params import OfflineParams
from tests.faults.envs import cartpole_data, faulty_vec

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize(("fault", "error"), [("raise", EnvError), ("nan_obs", NonFiniteError)])
def test_a_test_env_fault_of_an_offline_run_names_its_gradient_step(
    fault: str, error: type[Exception]
) -> None:
    torch.manual_seed(0)
    envs = faulty_vec(2, 1, fault, 25)  # sub-env 1 faults in the second test
    policy = BC(envs.single_observation_space, envs.single_action_space, hidden=(16,))
    params = OfflineParams(
        max_epoch=3, step_per_epoch=5, batch_size=16, episode_per_test=2, show_progress=False
    )
    trainer = OfflineTrainer(
        policy=policy,
        params=params,
        buffer=cartpole_data(),
        test_collector=Collector(policy, envs, exploration=False),
    )
    with trainer, pytest.raises(error) as exc:
        trainer.run()
    message = str(exc.value)
    assert trainer.state.gradient_step == 10
    assert "gradient step 10" in message and "env step 0" not in message, message
