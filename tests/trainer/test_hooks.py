"""Hook points: where they fire, what they receive, what their results do; hook state."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from epochtrain import make_trainer
from epochtrain.data import Batch
from epochtrain.logger import BaseLogger, Scope
from epochtrain.stats import CollectStats, EpochStats, TrainingStats
from epochtrain.trainer import HOOK_POINTS, BaseTrainer, TrainerHook
from epochtrain.trainer.progress import progress_postfix
from tests.trainer.tiny import build

ARGS: dict[str, tuple[type, ...]] = {
    "epoch_start": (int,),
    "batch_process": (Batch,),
    "pre_steps_log": (Batch,),
    "pre_optim_steps": (),
    "process_optim_batch": (Batch,),
    "optimizer": (str, torch.optim.Optimizer),
    "post_loss": (TrainingStats,),
    "post_optim": (),
    "post_optim_log": (TrainingStats,),
    "post_steps": (),
    "post_steps_log": (Batch,),
    "test_end": (CollectStats,),
    "epoch_end": (EpochStats,),
}


class Recorder(TrainerHook):
    """Registers an op at every point; records ``point`` per call and checks argument types."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def register(self, trainer: BaseTrainer[Any]) -> None:
        for point in HOOK_POINTS:
            trainer.register_op(point, self._op(point))

    def _op(self, point: str) -> Any:
        def op(*args: Any) -> Any:
            assert len(args) == len(ARGS[point]), point
            for arg, kind in zip(args, ARGS[point], strict=True):
                assert isinstance(arg, kind), (point, arg)
            self.calls.append(point)
            return args[0] if point in ("batch_process", "process_optim_batch") else None

        return op

    def state_dict(self) -> dict[str, Any]:
        return {"n_calls": len(self.calls)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.calls = ["restored"] * int(state["n_calls"])


class RecordingLogger(BaseLogger):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[str, int, dict[str, float]]] = []

    def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
        self.records.append((scope, step, dict(data)))


def dqn(**kw: Any) -> BaseTrainer[Any]:
    settings: dict[str, Any] = {
        "max_epoch": 1,
        "step_per_epoch": 20,
        "step_per_collect": 10,
        "update_per_step": 0.2,
        "warmup_steps": 16,
        "batch_size": 8,
        "num_test_envs": 1,
        "episode_per_test": 1,
        "stop_fn": None,
        "show_progress": False,
    }
    return make_trainer("dqn", "CartPole-v1", seed=0, **{**settings, **kw})


def test_points_fire_in_loop_order_with_their_arguments() -> None:
    recorder = Recorder()
    dqn(hooks=[recorder]).run()
    gradient_step = [
        "process_optim_batch",
        "optimizer",
        "post_loss",
        "post_optim",
        "post_optim_log",
    ]
    update = ["batch_process", "pre_steps_log", "pre_optim_steps"]
    update += 2 * gradient_step + ["post_steps", "post_steps_log"]
    warmup = ["batch_process"]  # the warm-up rows (before epoch 1) pass batch_process too
    assert recorder.calls == [*warmup, "epoch_start", *update, *update, "test_end", "epoch_end"]


def test_batch_process_result_is_what_the_on_policy_update_learns_from() -> None:
    def zero_rewards(batch: Batch) -> Batch:
        return dataclasses.replace(batch, rew=torch.zeros_like(batch.rew))

    seen: list[torch.Tensor] = []

    def record(batch: Batch) -> Batch:
        seen.append(batch.rew)
        return batch

    trainer = build("on", max_epoch=1)
    trainer.register_op("batch_process", zero_rewards)
    trainer.register_op("process_optim_batch", record)
    trainer.run()
    assert seen and all(bool((rew == 0).all()) for rew in seen)


def test_process_optim_batch_result_is_learned_and_handed_to_post_learn() -> None:
    trainer = build("off", max_epoch=1)
    learned: list[int] = []
    post: list[int] = []
    learn, post_learn = trainer.policy.learn, trainer.policy.post_learn
    trainer.policy.learn = lambda batch: (learned.append(len(batch)), learn(batch))[1]
    trainer.policy.post_learn = lambda batch, buffer: (
        post.append(len(batch)),
        post_learn(batch, buffer),
    )[1]
    trainer.register_op("process_optim_batch", lambda batch: batch[:3])
    trainer.run()
    assert learned and set(learned) == {3} and post == learned


def test_off_policy_collected_batch_holds_the_rows_just_collected() -> None:
    trainer = build("off", max_epoch=1, step_per_collect=10)
    batches: list[Batch] = []
    trainer.register_op("batch_process", lambda batch: (batches.append(batch), batch)[1])
    trainer.run()
    buffer = trainer.train_collector.buffer
    rollout = buffer.rollout()
    assert [b.shape for b in batches] == [torch.Size([5, 2])] * 4  # 10 env steps on 2 envs
    assert torch.equal(batches[-1].rew, rollout.rew[-5:])
    assert isinstance(batches[-1].obs, torch.Tensor) and isinstance(rollout.obs, torch.Tensor)
    assert torch.equal(batches[-1].obs, rollout.obs[-5:])


def test_logging_points_write_at_their_scope_step_and_feed_the_progress_bar() -> None:
    logger = RecordingLogger()
    trainer = build("off", max_epoch=1, logger=logger)
    trainer.register_op("pre_steps_log", lambda batch: {"rows": float(batch.shape[0])})
    trainer.register_op(
        "post_optim_log", lambda stats: {"twice": 2 * stats.loss.mean, "log_pbar": True}
    )
    trainer.run()
    train = [(step, data) for scope, step, data in logger.records if "train/rows" in data]
    assert [step for step, _ in train] == [10, 20, 30, 40]  # env steps
    assert all(data == {"train/rows": 5.0} for _, data in train)
    update = [(step, data) for scope, step, data in logger.records if "update/twice" in data]
    assert [step for step, _ in update] == list(range(1, trainer.state.gradient_step + 1))
    assert "twice" in progress_postfix(trainer)
    assert "log_pbar" not in str(logger.records)


def test_offline_trainer_fires_the_gradient_step_points_only() -> None:
    recorder = Recorder()
    trainer = build("offline", max_epoch=1, step_per_epoch=2, hooks=[recorder])
    trainer.run()
    step = ["pre_optim_steps", "process_optim_batch", "post_loss", "post_optim", "post_optim_log"]
    step.append("post_steps")
    assert recorder.calls == ["epoch_start", *step, *step, "test_end", "epoch_end"]


def test_register_op_names_the_bad_point_or_op() -> None:
    trainer = build("off")
    with pytest.raises(ValueError, match="unknown hook point 'post_step'"):
        trainer.register_op("post_step", lambda: None)
    with pytest.raises(TypeError, match="must be callable"):
        trainer.register_op("post_steps", 3)
    with pytest.raises(TypeError, match=r"hooks\[0\] must be a TrainerHook"):
        build("off", hooks=[lambda: None])


def test_request_stop_ends_the_epoch_early_with_the_reason() -> None:
    trainer = build("off", max_epoch=5)
    trainer.register_op("post_steps", lambda: trainer.request_stop("enough"))
    stats = list(trainer)
    assert len(stats) == 1 and trainer.stop_reason == "enough"
    assert trainer.state.env_step == 10  # one training step, then the test step
    assert stats[0].test_collect_stat is not None


@pytest.mark.parametrize("kind", ["off", "on"])
def test_request_stop_inside_an_update_step_drops_its_later_gradient_steps(kind: str) -> None:
    trainer = build(kind, max_epoch=5)  # 5 (off) and 6 (on) gradient steps per update step

    def stop_at_the_second(stats: TrainingStats) -> None:
        if trainer.state.gradient_step == 2:
            trainer.request_stop("enough")

    trainer.register_op("post_loss", stop_at_the_second)
    stats = list(trainer)
    assert len(stats) == 1 and trainer.stop_reason == "enough"
    assert trainer.state.gradient_step == 2
    assert stats[0].test_collect_stat is not None


def test_hook_state_travels_in_the_checkpoint(tmp_path: Path) -> None:
    recorder = Recorder()
    trainer = build("off", max_epoch=2, hooks=[recorder])
    next(trainer)
    trainer.save_checkpoint(tmp_path / "ckpt")
    fresh = Recorder()
    build("off", max_epoch=2, hooks=[fresh], resume_from=tmp_path / "ckpt")
    assert fresh.calls == ["restored"] * len(recorder.calls)
    with pytest.raises(ValueError, match=r"hooks \['Recorder'\], this trainer has \[\]"):
        build("off", max_epoch=2, resume_from=tmp_path / "ckpt")


def test_reset_resets_hook_state() -> None:
    class Counting(TrainerHook):
        def __init__(self) -> None:
            self.n = 0

        def register(self, trainer: BaseTrainer[Any]) -> None:
            trainer.register_op("post_steps", self._count)

        def _count(self) -> None:
            self.n += 1

        def reset(self) -> None:
            self.n = 0

    hook = Counting()
    trainer = build("off", max_epoch=1, hooks=[hook])
    trainer.run()
    assert hook.n == 4
    trainer.reset()
    assert hook.n == 0


def test_hook_settings_are_labelled_by_class_and_a_hook_declares_none_by_default() -> None:
    from epochtrain.trainer import GradClip
    from epochtrain.trainer.hook_settings import constructor_settings, hook_settings

    class Plain(TrainerHook):
        def __init__(self, scale: float = 1.0, fn: Any = None) -> None:
            self.scale, self.fn = scale, fn

        def register(self, trainer: BaseTrainer[Any]) -> None:
            pass

    hooks = [GradClip(max_norm=1.0), Plain(), GradClip(max_value=2.0)]
    assert hook_settings(hooks) == {
        "GradClip[0]": {"max_norm": 1.0, "max_value": None, "norm_type": 2.0},
        Plain.__qualname__: {},
        "GradClip[1]": {"max_norm": None, "max_value": 2.0, "norm_type": 2.0},
    }
    # what a user hook may return to opt in: its arguments kept under their own names,
    # JSON values only (a callable is left out)
    assert constructor_settings(Plain(3.0, fn=print)) == {"scale": 3.0}
