"""What hooks and callbacks return or raise is checked, naming the function at fault."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch

from epochtrain.data import Batch, Obs
from epochtrain.trainer import TrainerHook
from epochtrain.trainer.hooks import call_callback, check_callbacks, claim_hook, register_claimed
from tests.trainer.tiny import build

_NONE: Any = None  # what a mistaken hook returns, not an Obs

CORRUPTIONS: dict[str, tuple[Callable[[Batch], Batch], type[Exception], str]] = {
    "one reward": (
        lambda b: dataclasses.replace(b, rew=b.rew[:1]),
        ValueError,
        r"field 'rew' has shape \(1,.*expected \(",
    ),
    "reward column": (
        lambda b: dataclasses.replace(b, rew=b.rew.unsqueeze(-1)),
        ValueError,
        r"field 'rew' has shape \(\d+, (\d+, )?1\), expected",
    ),
    "no obs": (
        lambda b: dataclasses.replace(b, obs=_NONE),  # a field dropped
        ValueError,
        r"field 'obs' is None, but the batch it received holds it",
    ),
    "integer reward": (
        lambda b: dataclasses.replace(b, rew=b.rew.long()),
        TypeError,
        r"field 'rew' has dtype torch.int64 \(integer\); it received torch.float32",
    ),
    "float flags": (
        lambda b: dataclasses.replace(b, terminated=b.terminated.float()),
        TypeError,
        r"field 'terminated' has dtype torch.float32 \(floating\); it received torch.bool",
    ),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
@pytest.mark.parametrize(
    ("kind", "point"),
    [("on", "batch_process"), ("on", "process_optim_batch"), ("off", "process_optim_batch")],
)
def test_a_data_op_whose_batch_fields_do_not_fit_is_refused_before_learning(
    kind: str, point: str, corruption: str
) -> None:
    fn, error, message = CORRUPTIONS[corruption]

    def corrupt(batch: Batch) -> Batch:
        return fn(batch)

    trainer = build(kind, max_epoch=1)
    trainer.register_op(point, corrupt)
    with pytest.raises(error, match=rf"hook op .*corrupt at '{point}' returned a Batch whose "):
        trainer.run()
    with pytest.raises(error, match=message):
        build(kind, max_epoch=1, hooks=[_Op(point, corrupt)]).run()
    assert trainer.state.gradient_step == 0  # nothing was learned from the broken batch


class _Op(TrainerHook):
    def __init__(self, point: str, fn: Callable[[Batch], Batch]) -> None:
        self.point, self.fn = point, fn

    def register(self, trainer: Any) -> None:
        trainer.register_op(self.point, self.fn)


@pytest.mark.parametrize(
    "fn",
    [
        lambda b: b[: len(b) // 2],  # fewer rows, every field alike
        lambda b: dataclasses.replace(b, obs=b.obs * 2.0, obs_next=b.obs_next * 2.0),
        lambda b: dataclasses.replace(b, rew=b.rew.double()),  # same kind, other precision
        lambda b: dataclasses.replace(b, weight=torch.ones_like(b.rew)),  # a field added
    ],
    ids=["rows", "obs-scaled", "rew-float64", "added-weight"],
)
def test_a_data_op_may_pick_rows_change_precision_and_add_fields(
    fn: Callable[[Batch], Batch],
) -> None:
    trainer = build("on", max_epoch=1)
    trainer.register_op("process_optim_batch", fn)
    trainer.run()
    assert trainer.state.gradient_step > 0


def test_a_nested_observation_with_other_keys_is_refused() -> None:
    leaf_a, leaf_b = torch.zeros(4, 2), torch.zeros(4, 1)
    obs: dict[str, Obs] = {"a": leaf_a, "b": leaf_b}
    batch = Batch(
        obs=obs,
        act=torch.zeros(4, dtype=torch.long),
        rew=torch.zeros(4),
        terminated=torch.zeros(4, dtype=torch.bool),
        truncated=torch.zeros(4, dtype=torch.bool),
        obs_next=obs,
    )

    def drop_key(b: Batch) -> Batch:
        return dataclasses.replace(b, obs={"a": leaf_a})

    def short_leaf(b: Batch) -> Batch:
        return dataclasses.replace(b, obs={"a": leaf_a, "b": leaf_b[:1]})

    trainer = build("off", max_epoch=1)
    trainer.register_op("process_optim_batch", drop_key)
    with pytest.raises(TypeError, match=r"drop_key .* obs is a dict with keys \['a'\]"):
        trainer._ops.process("process_optim_batch", batch)
    trainer = build("off", max_epoch=1)
    trainer.register_op("process_optim_batch", short_leaf)
    with pytest.raises(ValueError, match=r"field \"obs\['b'\]\" has shape \(1, 1\), expected"):
        trainer._ops.process("process_optim_batch", batch)


@pytest.mark.parametrize(
    ("name", "fn", "call"),
    [
        ("train_fn", lambda epoch: None, r"train_fn\(epoch, env_step\)"),
        ("test_fn", lambda: None, r"test_fn\(epoch, env_step\)"),
        ("stop_fn", lambda best, goal: best > goal, r"stop_fn\(best_test_return\)"),
        ("save_best_fn", lambda: None, r"save_best_fn\(policy\)"),
    ],
)
def test_a_callback_of_the_wrong_arity_is_refused_naming_it(
    name: str, fn: Callable[..., Any], call: str
) -> None:
    with pytest.raises(TypeError, match=rf"^{name}=<lambda>\(.*\) is refused: .*{call}.*give it"):
        check_callbacks({name: fn})


def test_callbacks_that_take_their_arguments_are_accepted() -> None:
    def train_fn(epoch: int, env_step: int, extra: int = 0) -> None: ...

    check_callbacks(
        {
            "train_fn": train_fn,
            "test_fn": lambda *args: None,
            "stop_fn": lambda best: best > 1,
            "save_best_fn": print,
        }
    )
    with pytest.raises(ValueError, match="stop_fn must be callable or None, got 475"):
        check_callbacks({"stop_fn": 475})


def test_an_exception_in_a_callback_gets_a_note_naming_it() -> None:
    def stop_at(best: float) -> bool:
        raise ZeroDivisionError("goal")

    with pytest.raises(ZeroDivisionError) as info:
        call_callback("stop_fn", stop_at, 1.0)
    (note,) = info.value.__notes__
    assert note.startswith("epochtrain: raised by stop_fn ")
    assert note.endswith("stop_at, called as stop_fn(best_test_return)")


@pytest.mark.parametrize("name", ["test_fn", "save_best_fn"])
def test_a_test_step_callback_that_raises_is_named(name: str) -> None:
    def broken(*args: Any) -> None:
        raise KeyError("inside")

    callbacks: dict[str, Any] = {name: broken}
    trainer = build("off", max_epoch=1, **callbacks)
    with pytest.raises(KeyError) as info:
        trainer.run()
    assert any(f"raised by {name} " in note for note in info.value.__notes__)


class _BadRegister(TrainerHook):
    def register(self, trainer: Any) -> None:
        trainer.register_op("epoch_start", lambda epoch: None)
        trainer.register_op("optimizer", lambda name, optimizer: None)
        raise KeyError("bad register")


def test_a_hook_whose_register_raises_is_named_and_leaves_no_op() -> None:
    trainer = build("off", max_epoch=1)
    hook = _BadRegister()
    claim_hook(hook, trainer)
    with pytest.raises(KeyError, match="bad register") as info:
        register_claimed(hook, trainer)
    assert "raised by _BadRegister.register" in info.value.__notes__[-1]
    assert trainer._ops["epoch_start"] == [] and trainer._ops["optimizer"] == []
    assert trainer.policy.optimizer_hooks == []
    claim_hook(hook, trainer)  # released: it can be registered again once fixed
