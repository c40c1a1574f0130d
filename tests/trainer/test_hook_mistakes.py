"""Mistakes in user hooks fail at once with an error naming the hook op and its point."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
import torch

from epochtrain import make_trainer
from epochtrain.data import Batch
from epochtrain.stats import TrainingStats
from epochtrain.trainer import BaseTrainer, ObservationNormalizer, TrainerHook
from tests.trainer.tiny import build


def forgot_return(batch: Batch) -> None:
    batch.rew.mul_(0.1)  # changes the batch but returns nothing


def returns_obs(batch: Batch) -> Any:
    return batch.obs


def drops_every_row(batch: Batch) -> Batch:
    return batch[:0]


@pytest.mark.parametrize(
    ("kind", "point"),
    [
        ("on", "batch_process"),
        ("off", "batch_process"),
        ("on", "process_optim_batch"),
        ("offline", "process_optim_batch"),
    ],
)
def test_a_data_op_that_returns_none_is_refused_naming_it(kind: str, point: str) -> None:
    trainer = build(kind, max_epoch=1)
    trainer.register_op(point, forgot_return)
    with pytest.raises(TypeError, match=rf"forgot_return at '{point}' returned None.*return the"):
        trainer.run()
    assert trainer.state.gradient_step == 0  # nothing was learned from the raw data


def test_a_data_op_that_returns_no_batch_is_refused_naming_it() -> None:
    trainer = build("off", max_epoch=1)
    trainer.register_op("process_optim_batch", returns_obs)
    with pytest.raises(TypeError, match=r"returns_obs at 'process_optim_batch' returned a Tensor"):
        trainer.run()


@pytest.mark.parametrize("point", ["batch_process", "process_optim_batch"])
def test_an_empty_batch_from_a_data_op_is_refused_naming_it(point: str) -> None:
    trainer = build("on", max_epoch=1)
    trainer.register_op(point, drops_every_row)
    with pytest.raises(ValueError, match=rf"drops_every_row at '{point}' returned an empty Batch"):
        trainer.run()


@pytest.mark.parametrize("out", [1.5, [1, 2], "loss"])
def test_a_logging_op_that_returns_no_dict_is_refused_naming_it(out: object) -> None:
    def log_rows(batch: Batch) -> object:
        return out

    trainer = build("off", max_epoch=1)
    trainer.register_op("pre_steps_log", log_rows)
    with pytest.raises(TypeError, match=r"log_rows at 'pre_steps_log' returned a .* dict of str"):
        trainer.run()


@pytest.mark.parametrize("value", ["hi", {"b": 1}, np.array([1.0, 2.0]), None])
def test_a_logging_dict_with_a_value_that_is_no_number_is_refused(value: object) -> None:
    def log_loss(stats: TrainingStats) -> dict[str, object]:
        return {"loss": value}

    trainer = build("off", max_epoch=1)
    trainer.register_op("post_optim_log", log_loss)
    with pytest.raises(TypeError, match=r"log_loss at 'post_optim_log' returned a dict holding"):
        trainer.run()


def test_a_logging_dict_takes_numbers_numpy_scalars_and_one_element_tensors() -> None:
    def log_numbers(stats: TrainingStats) -> dict[str, object]:
        return {"i": 1, "f": 0.5, "b": True, "np": np.float32(2.0), "t": torch.tensor(3.0)}

    trainer = build("off", max_epoch=1)
    trainer.register_op("post_optim_log", log_numbers)
    trainer.run()
    assert trainer.state.gradient_step > 0


@pytest.mark.parametrize(
    ("point", "op", "call"),
    [
        ("epoch_start", lambda: None, r"epoch_start\(epoch\)"),
        ("post_optim", lambda stats: None, r"post_optim\(\)"),
        ("optimizer", lambda optimizer: None, r"optimizer\(name, optimizer\)"),
    ],
)
def test_an_op_that_cannot_take_its_points_arguments_is_refused_when_registered(
    point: str, op: Any, call: str
) -> None:
    trainer = build("off", max_epoch=1)
    with pytest.raises(TypeError, match=rf"cannot be registered at '{point}'.*calls it as {call}"):
        trainer.register_op(point, op)
    assert trainer._ops[point] == []


def test_ops_that_take_extra_defaults_or_star_args_are_accepted() -> None:
    trainer = build("off", max_epoch=1)
    trainer.register_op("epoch_start", lambda epoch, scale=2: None)
    trainer.register_op("post_optim", lambda *args: None)
    trainer.register_op("optimizer", print)  # a builtin: no signature to check, trusted


class Boom(TrainerHook):
    """Raises at ``point``."""

    def __init__(self, point: str) -> None:
        self.point = point

    def register(self, trainer: BaseTrainer[Any]) -> None:
        trainer.register_op(self.point, self.boom)

    def boom(self, *args: Any) -> None:
        raise RuntimeError("a bug in the hook")


@pytest.mark.parametrize("point", ["post_optim", "post_optim_log", "process_optim_batch"])
def test_an_exception_from_an_op_keeps_its_type_and_gains_a_note_naming_the_op(point: str) -> None:
    trainer = build("off", max_epoch=1, hooks=[Boom(point)])
    with pytest.raises(RuntimeError, match="a bug in the hook") as info:
        trainer.run()
    noted = f"epochtrain: raised by hook op Boom.boom at hook point {point!r}"
    assert [n for n in info.value.__notes__ if n.startswith(noted)] != [], info.value.__notes__
    assert info.traceback[-1].name == "boom"  # the original traceback, down to the bug


def test_an_exception_from_an_optimizer_op_gains_a_note_naming_the_op_and_the_optimizer() -> None:
    # "optimizer" ops run inside Policy.optimize, not through the trainer's hook table
    trainer = make_trainer(
        "dqn",
        "CartPole-v1",
        seed=0,
        max_epoch=1,
        step_per_epoch=64,
        warmup_steps=32,
        show_progress=False,
        hooks=[Boom("optimizer")],
    )
    with trainer, pytest.raises(RuntimeError, match="a bug in the hook") as info:
        trainer.run()
    assert info.value.__notes__ == [
        "epochtrain: raised by hook op Boom.boom at hook point 'optimizer' (optimizer 'q' of DQN)"
    ]


class Count(TrainerHook):
    """Counts gradient steps; like many user hooks, it does not call super().__init__()."""

    def __init__(self) -> None:
        self.n = 0

    def register(self, trainer: BaseTrainer[Any]) -> None:
        trainer.register_op("post_optim", self.tick)

    def tick(self) -> None:
        self.n += 1


def test_the_same_hook_object_twice_in_hooks_is_refused() -> None:
    count = Count()
    with pytest.raises(ValueError, match=r"hooks\[0\] and hooks\[1\] are the same Count object"):
        build("off", hooks=[count, count])


def test_registering_a_hook_again_on_its_trainer_is_refused() -> None:
    count = Count()
    trainer = build("off", max_epoch=1, hooks=[count])
    with pytest.raises(ValueError, match="already registered on this trainer"):
        trainer.register_hook(count)
    trainer.run()
    assert count.n == trainer.state.gradient_step  # it ran once per gradient step


def test_a_hook_object_on_a_second_trainer_is_refused_while_the_first_lives() -> None:
    count = Count()
    first = build("off", max_epoch=1, hooks=[count])
    with pytest.raises(ValueError, match=r"registered on another trainer.*new hook object"):
        build("off", max_epoch=1, hooks=[count])
    del first
    gc.collect()
    build("off", max_epoch=1, hooks=[count])  # the first trainer is gone: free to reuse


def test_a_second_observation_normalizer_on_the_same_collector_is_refused() -> None:
    first, second = ObservationNormalizer(), ObservationNormalizer()
    with pytest.raises(ValueError, match="train_collector already has an obs_transform"):
        build("on", hooks=[first, second])


class KeepsTheGraph(TrainerHook):
    """Keeps a running value computed from the policy's parameters, without ``detach``."""

    def register(self, trainer: BaseTrainer[Any]) -> None:
        self.policy = trainer.policy
        self.ema = torch.zeros(())
        trainer.register_op("post_optim", self.update)

    def update(self) -> None:
        self.ema = 0.9 * self.ema + 0.1 * next(self.policy.parameters()).sum()

    def state_dict(self) -> dict[str, Any]:
        return {"ema": self.ema}


def test_a_hook_state_holding_a_tensor_of_a_graph_is_refused_naming_the_hook() -> None:
    trainer = build("off", max_epoch=2, hooks=[KeepsTheGraph()])
    next(trainer)
    with pytest.raises(TypeError, match=r"KeepsTheGraph.state_dict\(\)\['ema'\].*detach"):
        next(trainer)
