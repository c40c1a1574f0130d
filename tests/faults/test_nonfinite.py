"""NaN and inf in env data or losses never reach a checkpoint, for an on-policy, an
off-policy and an offline algorithm; on_nonfinite chooses raise, stop or skip."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from epochtrain import Collector
from epochtrain.checkpoint import find_checkpoints, load_policy
from epochtrain.errors import EnvError, NonFiniteError
from tests.faults.envs import bc_trainer, cartpole_data, dqn_trainer, faulty_vec, ppo_trainer


def finite(policy: Any) -> bool:
    return all(
        bool(torch.isfinite(t).all())
        for t in policy.state_dict().values()
        if torch.is_tensor(t) and t.is_floating_point()
    )


def poison_from_epoch(trainer: Any, epoch: int) -> None:
    """From ``epoch`` on, every learned minibatch has NaN rewards (and advantages)."""
    process = trainer.policy.process_sample if hasattr(trainer, "train_collector") else None
    learn = trainer.policy.learn

    def poisoned(batch: Any) -> Any:
        if trainer.state.epoch >= epoch:
            nan = torch.full_like(batch.rew, math.nan)
            batch = replace(batch, rew=nan, obs=batch.obs * math.nan)
        return learn(batch)

    trainer.policy.learn = poisoned
    assert process is None or callable(process)


MAKERS = {
    "ppo": lambda **kw: ppo_trainer(**kw),
    "dqn": lambda **kw: dqn_trainer(**kw),
    "bc": lambda **kw: bc_trainer(cartpole_data(), **kw),
}


@pytest.mark.parametrize("algo", sorted(MAKERS))
def test_a_nonfinite_loss_raises_naming_the_step_and_the_last_good_checkpoint(
    tmp_path: Path, algo: str
) -> None:
    trainer = MAKERS[algo](checkpoint_dir=str(tmp_path))
    poison_from_epoch(trainer, 2)
    next(trainer)
    with pytest.raises(NonFiniteError, match="gradient step") as info:
        next(trainer)
    message = str(info.value)
    assert "epoch_000001" in message and "optimizer" in message
    assert finite(trainer.policy)  # the step was refused before it reached the weights
    assert [p.name for p in find_checkpoints(tmp_path)] == ["epoch_000001"]


@pytest.mark.parametrize("algo", sorted(MAKERS))
def test_on_nonfinite_stop_ends_the_run_and_writes_no_checkpoint_of_that_epoch(
    tmp_path: Path, algo: str
) -> None:
    trainer = MAKERS[algo](checkpoint_dir=str(tmp_path), on_nonfinite="stop")
    poison_from_epoch(trainer, 2)
    stats = list(trainer)
    assert [s.epoch for s in stats] == [1, 2] and trainer.stop_reason == "nonfinite"
    assert trainer.nonfinite_message and "gradient step" in trainer.nonfinite_message
    assert [p.name for p in find_checkpoints(tmp_path)] == ["epoch_000001"]
    assert finite(trainer.policy)


@pytest.mark.parametrize("algo", sorted(MAKERS))
def test_on_nonfinite_skip_skips_the_steps_and_keeps_every_checkpoint_finite(
    tmp_path: Path, algo: str
) -> None:
    trainer = MAKERS[algo](checkpoint_dir=str(tmp_path), on_nonfinite="skip", keep_last=None)
    poison_from_epoch(trainer, 2)
    assert len(list(trainer)) == 3
    assert trainer.policy.skipped_steps > 0 and finite(trainer.policy)
    for ckpt in find_checkpoints(tmp_path):
        fresh = MAKERS[algo]()
        load_policy(fresh.policy, ckpt)
        assert finite(fresh.policy)


def test_no_checkpoint_is_written_from_nonfinite_weights(tmp_path: Path) -> None:
    trainer = dqn_trainer(checkpoint_dir=str(tmp_path / "ckpts"))
    next(trainer)
    with torch.no_grad():
        next(iter(trainer.policy.parameters()))[0] = math.nan
    with pytest.raises(NonFiniteError, match="refusing to write") as info:
        trainer.save_checkpoint(tmp_path / "manual")
    assert "epoch_000001" in str(info.value)
    assert not (tmp_path / "manual").exists()
    with pytest.raises(NonFiniteError):
        next(trainer)  # the periodic save refuses too
    assert [p.name for p in find_checkpoints(tmp_path / "ckpts")] == ["epoch_000001"]


@pytest.mark.parametrize(
    ("fault", "what", "guard"),
    [
        ("nan_obs", "observation", "TransformObservation"),
        ("inf_reward", "reward", "TransformReward"),
    ],
)
def test_nonfinite_env_data_names_the_sub_env_the_env_and_the_env_step(
    tmp_path: Path, fault: str, what: str, guard: str
) -> None:
    envs = faulty_vec(3, bad=1, fault=fault, fault_at=30, mode="sync")
    trainer = dqn_trainer(
        envs, checkpoint_dir=str(tmp_path), step_per_epoch=60, step_per_collect=30
    )
    next(trainer)  # 60 env steps: 20 per sub-env
    with pytest.raises(NonFiniteError) as info:
        next(trainer)
    message = str(info.value)
    assert f"{what} of sub-env 1 of 'FaultyEnv'" in message
    assert "env step 87" in message and "epoch 2" in message  # 60 + 9 rows * 3 envs
    assert f"a NaN guard, e.g. gymnasium.wrappers.{guard}) at env step" in message
    assert [p.name for p in find_checkpoints(tmp_path)] == ["epoch_000001"]


def test_nonfinite_env_data_with_stop_ends_the_run_without_training_on_it(tmp_path: Path) -> None:
    envs = faulty_vec(2, bad=0, fault="nan_obs", fault_at=25, mode="sync")
    trainer = dqn_trainer(envs, checkpoint_dir=str(tmp_path), on_nonfinite="stop")
    stats = list(trainer)
    assert trainer.stop_reason == "nonfinite" and [s.epoch for s in stats] == [1, 2]
    assert "sub-env 0" in (trainer.nonfinite_message or "")
    # 40 env steps in epoch 1, then 4 rows of 2 envs before sub-env 0's 25th step: counted
    assert stats[-1].info_stat.env_step == trainer.state.env_step == 48
    assert finite(trainer.policy)
    buffer = trainer.train_collector.buffer
    assert bool(torch.isfinite(buffer.rollout().obs_next).all())  # never stored


@pytest.mark.parametrize("on_nonfinite", ["raise", "stop"])
def test_nonfinite_data_of_the_test_envs_follows_on_nonfinite(on_nonfinite: str) -> None:
    trainer = dqn_trainer(on_nonfinite=on_nonfinite)  # training envs: plain CartPole
    test_envs = faulty_vec(2, bad=0, fault="nan_obs", fault_at=5, mode="sync")
    trainer.test_collector = Collector(trainer.policy, test_envs, exploration=False)
    if on_nonfinite == "raise":
        with pytest.raises(NonFiniteError, match=r"the test after env step 40 \(epoch 1\)"):
            next(trainer)
        return
    stats = list(trainer)
    assert trainer.stop_reason == "nonfinite" and [s.epoch for s in stats] == [1]
    assert stats[0].test_collect_stat is None
    assert "the test after env step 40" in (trainer.nonfinite_message or "")


def test_nonfinite_data_in_the_warm_up_follows_on_nonfinite_too() -> None:
    envs = faulty_vec(2, bad=0, fault="nan_obs", fault_at=5, mode="sync")
    trainer = dqn_trainer(envs, on_nonfinite="stop", warmup_steps=40)
    stats = list(trainer)
    assert trainer.stop_reason == "nonfinite" and [s.epoch for s in stats] == [1]  # as on-policy
    assert stats[0].train_collect_stat is None and stats[0].info_stat.env_step == 8
    assert "sub-env 0" in (trainer.nonfinite_message or "")


def test_an_env_error_of_the_test_envs_names_the_env_step_and_the_epoch() -> None:
    trainer = dqn_trainer()
    trainer.test_collector = Collector(
        trainer.policy, faulty_vec(2, bad=1, fault="raise", fault_at=3), exploration=False
    )
    with pytest.raises(EnvError, match=r"at env step 40 \(epoch 1\); the envs were closed"):
        next(trainer)


def test_the_stop_message_is_the_first_fault_and_a_reset_run_starts_without_one() -> None:
    """An asynchronous collect step in flight may find a second fault after the update's:
    the message kept is the cause, and reset() starts a run with none."""
    from epochtrain.trainer.safety import on_nonfinite

    trainer = MAKERS["dqn"](on_nonfinite="stop")
    on_nonfinite(trainer, NonFiniteError("the loss is nan", where="loss"), "gradient step 3")
    on_nonfinite(trainer, NonFiniteError("an action is nan", where="act"), "env step 9")
    message = trainer.nonfinite_message or ""
    assert "the loss is nan" in message and "action" not in message
    trainer.reset()
    assert trainer.nonfinite_message is None and trainer.stop_reason is None
