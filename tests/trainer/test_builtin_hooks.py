"""Built-in hooks: LogScalar, TargetNetUpdater, LRScheduler, GradClip, EarlyStopping,
UTDRatio, ClearCudaCache."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch

from epochtrain.logger import BaseLogger, Scope
from epochtrain.trainer import (
    ClearCudaCache,
    EarlyStopping,
    GradClip,
    LogScalar,
    LRScheduler,
    TargetNetUpdater,
    UTDRatio,
)
from tests.trainer.test_hooks import dqn
from tests.trainer.tiny import build


class RecordingLogger(BaseLogger):
    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, list[tuple[int, float]]] = {}

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        for tag, value in data.items():
            self.tags.setdefault(tag, []).append((step, value))


def test_log_scalar_logs_the_reduced_batch_field() -> None:
    logger = RecordingLogger()
    build("off", max_epoch=1, logger=logger, hooks=[LogScalar("rew", "sum")]).run()
    assert logger.tags["train/rew_sum"] == [(10, 10.0), (20, 10.0), (30, 10.0), (40, 10.0)]


def test_log_scalar_rejects_bad_arguments_and_offline_trainers() -> None:
    with pytest.raises(ValueError, match="key must be a Batch field"):
        LogScalar("reward")
    with pytest.raises(ValueError, match="reduction must be one of"):
        LogScalar("rew", "median")
    with pytest.raises(ValueError, match="point must be"):
        LogScalar(point="post_optim")
    with pytest.raises(ValueError, match="LogScalar needs an online trainer"):
        build("offline", hooks=[LogScalar()])


def test_target_net_updater_hard_copies_every_period() -> None:
    updater = TargetNetUpdater(period=2)
    trainer = dqn(target_update_freq=10**6, update_per_step=0.3, hooks=[updater])
    trainer.run()  # 3 gradient steps per update, 6 in all: the last one copies
    assert updater.n_steps == 6
    for online, target in trainer.policy.target_pairs():
        for a, b in zip(online.parameters(), target.parameters(), strict=True):
            assert torch.equal(a, b)


def test_target_net_updater_soft_update_is_polyak_averaging() -> None:
    trainer = dqn(target_update_freq=10**6, hooks=[TargetNetUpdater(tau=0.25)])
    (online, target), *_ = trainer.policy.target_pairs()
    before: list[torch.Tensor] = []
    trainer.register_op(
        "process_optim_batch",
        lambda batch: (
            before.__setitem__(slice(None), [p.clone() for p in target.parameters()]),
            batch,
        )[1],
    )
    trainer.run()
    for old, new, o in zip(before, target.parameters(), online.parameters(), strict=True):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * o, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="target_pairs"):
        build("off", hooks=[TargetNetUpdater()])
    with pytest.raises(ValueError, match="tau must be in"):
        TargetNetUpdater(tau=1.5)


def test_lr_scheduler_steps_per_gradient_step_and_resumes(tmp_path: Path) -> None:
    def halve(opt: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        return torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)

    trainer = dqn(lr=1.0, max_epoch=2, hooks=[LRScheduler(halve, optimizer="q")])
    next(trainer)
    assert trainer.policy.optimizers["q"].param_groups[0]["lr"] == 0.5**trainer.state.gradient_step
    trainer.save_checkpoint(tmp_path / "ckpt")
    resumed = dqn(lr=1.0, max_epoch=2, hooks=[LRScheduler(halve)], resume_from=tmp_path / "ckpt")
    next(trainer), next(resumed)
    expected = 0.5**trainer.state.gradient_step
    for t in (trainer, resumed):
        assert t.policy.optimizers["q"].param_groups[0]["lr"] == expected
    with pytest.raises(ValueError, match=r"optimizer must name one of .*\['q'\], got 'pi'"):
        dqn(hooks=[LRScheduler(halve, optimizer="pi")])


@pytest.mark.parametrize("by", ["norm", "value"])
def test_grad_clip_limits_the_gradients_the_optimizer_steps_with(by: str) -> None:
    clip = GradClip(max_norm=1e-3) if by == "norm" else GradClip(max_value=1e-4)
    seen: list[float] = []

    def measure(name: str, opt: torch.optim.Optimizer) -> None:
        grads = [p.grad for group in opt.param_groups for p in group["params"]]
        flat = torch.cat([g.reshape(-1) for g in grads if g is not None])
        seen.append(float(flat.norm() if by == "norm" else flat.abs().max()))

    trainer = dqn(max_grad_norm=None, hooks=[clip])
    trainer.register_op("optimizer", measure)  # runs after the clip
    trainer.run()
    limit = 1e-3 if by == "norm" else 1e-4
    assert seen and max(seen) <= limit * (1 + 1e-5)
    with pytest.raises(ValueError, match="exactly one of max_norm and max_value"):
        GradClip()


def test_early_stopping_without_improvement_for_patience_env_steps() -> None:
    stopper = EarlyStopping(patience=40, min_delta=1e9)  # nothing counts as an improvement
    trainer = build("off", max_epoch=10, step_per_epoch=40, hooks=[stopper])
    stats = list(trainer)
    # epoch 1's test sets the best (from -inf); 40 env steps later, epoch 2's test stops
    assert [s.epoch for s in stats] == [1, 2]
    assert trainer.stop_reason == "early_stopping"
    assert stopper.best_step == 40


def test_early_stopping_on_a_non_finite_loss() -> None:
    # on_nonfinite="skip" lets the NaN loss reach the hook (the default raises at once)
    hooks = [EarlyStopping()]
    trainer = build(
        "off", max_epoch=3, loss_values=[1.0, math.nan], hooks=hooks, on_nonfinite="skip"
    )
    stats = list(trainer)
    assert len(stats) == 1 and trainer.stop_reason == "non_finite_loss"
    assert trainer.state.gradient_step == 2  # the gradient step that met the NaN ended the run
    with pytest.raises(ValueError, match="does nothing"):
        EarlyStopping(check_finite=False)
    with pytest.raises(ValueError, match="patience must be a positive int"):
        EarlyStopping(patience=0)


def test_utd_ratio_is_samples_learned_per_env_step() -> None:
    logger = RecordingLogger()
    build("off", max_epoch=1, logger=logger, hooks=[UTDRatio()]).run()
    # update_per_step=0.5 with minibatches of 16: 8 samples per env step
    assert [v for _, v in logger.tags["train/utd_ratio"]] == [8.0] * 4


def test_clear_cuda_cache_counts_update_steps_and_is_a_no_op_on_cpu() -> None:
    hook = ClearCudaCache(interval=2)
    build("off", max_epoch=1, hooks=[hook]).run()
    assert hook.count == 4
    assert hook.state_dict() == {"count": 4}
    with pytest.raises(ValueError, match="interval must be a positive int"):
        ClearCudaCache(0)


def test_hook_docs_table_lists_every_point() -> None:
    from epochtrain.trainer import HOOK_POINTS, hooks

    assert hooks.__doc__ is not None
    for point in HOOK_POINTS:
        assert point in hooks.__doc__
