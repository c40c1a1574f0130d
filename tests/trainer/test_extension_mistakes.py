"""Mistakes made while extending epochtrain (a custom policy, logger or algorithm, per
docs/specs.md "Adding an algorithm") are named where they are made, with the fix."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from epochtrain import ALGORITHMS, make_trainer, register
from epochtrain.errors import NonFiniteError
from epochtrain.factory import UnusedSettingWarning
from epochtrain.logger import BaseLogger, Scope
from epochtrain.stats import TrainingStats
from tests.trainer.tiny import TinyPolicy, TinyStats, build, make_envs

ROOT = Path(__file__).resolve().parents[2]


def _learning(trainer: Any, change: Callable[[TinyStats], object]) -> Any:
    """Make ``trainer.policy.learn`` return ``change(its stats)``."""
    learn = trainer.policy.learn
    trainer.policy.learn = lambda batch: change(learn(batch))
    return trainer


@pytest.mark.parametrize("returned", [None, {"loss": 0.5}], ids=["none", "dict"])
def test_learn_returning_no_stats_raises_at_the_first_step_naming_learn(returned: object) -> None:
    trainer = _learning(build("on", max_epoch=1), lambda stats: returned)
    with pytest.raises(TypeError, match=r"TinyPolicy\.learn returned .*return a TinyStats\("):
        next(trainer)
    assert trainer.state.gradient_step == 0  # the first step, not ten frames deep later


def _with_float_loss(stats: TinyStats) -> TinyStats:
    assert stats.loss is not None
    stats.loss = stats.loss.mean  # type: ignore[assignment]  # the mistake under test
    return stats


def _with_graph_loss(stats: TinyStats) -> TinyStats:
    weight = torch.ones((), requires_grad=True)
    stats.loss = weight * 2  # type: ignore[assignment]  # the mistake under test
    return stats


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda stats: TrainingStats(), r"returned a TrainingStats, but TinyPolicy is a "
         r"Policy\[TinyStats\]: return a TinyStats\("),
        (_with_float_loss, r"TinyStats\.loss = [\d.]+ \(a float\); it must be a "
         r"SequenceSummaryStats or None: .*SequenceSummaryStats\.single\(loss\.item\(\)\)"),
        (_with_graph_loss, r"TinyStats\.loss = tensor\(2\., grad_fn=.*\(a Tensor\); it must"),
    ],
    ids=["bare_base_stats", "float_field", "tensor_field"],
)  # fmt: skip
def test_stats_of_the_wrong_class_or_field_type_raise_at_the_first_step(
    change: Callable[[TinyStats], object], named: str
) -> None:
    trainer = _learning(build("on", max_epoch=1), change)
    with pytest.raises(TypeError, match=named):
        next(trainer)


def test_the_stats_are_checked_once_not_at_every_gradient_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from epochtrain.trainer import updates

    checked: list[object] = []
    check = updates.check_stats
    monkeypatch.setattr(updates, "check_stats", lambda p, s: (checked.append(s), check(p, s)))
    trainer = build("on", max_epoch=1)  # 2 passes x 3 minibatches per collect step
    next(trainer)
    assert trainer.state.gradient_step > 1 and len(checked) == 1


def test_a_policy_that_skips_super_init_is_refused_when_the_trainer_is_built() -> None:
    class Forgetful(TinyPolicy):
        def __init__(self) -> None:  # no super().__init__
            self.steps = 0

    trainer = build("on", max_epoch=1)
    with pytest.raises(TypeError, match=r"Forgetful\.__init__ did not call Policy\.__init__.*"
                       r"super\(\)\.__init__\(observation_space, action_space"):  # fmt: skip
        type(trainer)(policy=Forgetful(), params=trainer.params,
                      train_collector=trainer.train_collector)  # fmt: skip
    trainer.close()


def test_a_logger_that_skips_super_init_is_named_with_the_fix() -> None:
    class ListLogger(BaseLogger):
        def __init__(self) -> None:  # no super().__init__()
            self.records: list[Mapping[str, float]] = []

        def write(self, scope: Scope, step: int, data: Mapping[str, float]) -> None:
            self.records.append(data)

    with pytest.raises(TypeError, match=r"ListLogger\.__init__ did not call BaseLogger\."
                       r"__init__.*call super\(\)\.__init__\(\) in ListLogger"):  # fmt: skip
        build("on", max_epoch=1, logger=ListLogger())
    with pytest.raises(TypeError, match="did not call BaseLogger"):  # used on its own
        ListLogger().log_data("info", 1, {"x": 1.0})


def test_a_nonfinite_reported_statistic_says_the_step_was_applied_and_what_skip_does() -> None:
    trainer = build("on", max_epoch=1, loss_values=[math.nan])  # a stat, not the loss optimized
    with pytest.raises(NonFiniteError) as caught:
        next(trainer)
    message = str(caught.value)
    assert "TinyPolicy.learn's statistic 'loss' is nan at gradient step 1" in message
    assert "that gradient step was applied and the weights are finite" in message
    assert "unchanged" not in message
    assert "'skip' would not undo it" in message
    assert "lets a reported statistic through" in message


def test_a_misspelt_trainer_setting_in_register_suggests_the_setting() -> None:
    with pytest.raises(TypeError, match=r"trainer=\{'step_per_colect': \.\.\.\} is not a setting "
                       r"of OnpolicyParams.*did you mean 'step_per_collect'"):  # fmt: skip
        register("tiny-typo", TinyPolicy, ALGORITHMS["ppo"].config_cls,
                 "onpolicy", trainer={"step_per_colect": 64})  # fmt: skip
    assert "tiny-typo" not in ALGORITHMS


def test_registering_a_name_twice_shows_the_notebook_guard() -> None:
    entry = ALGORITHMS["ppo"]
    with pytest.raises(ValueError, match=re.escape("`if 'ppo' not in ALGORITHMS: register('ppo'")):
        register("ppo", entry.policy_cls, entry.config_cls, "onpolicy")
    assert ALGORITHMS["ppo"] is entry


def _load_example() -> Any:
    path = ROOT / "examples" / "custom_algorithm.py"
    spec = importlib.util.spec_from_file_location("custom_algorithm_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)  # registers "linear-pg" (guarded)
    return module


def test_the_docs_say_where_a_registered_algorithm_works_and_the_cli_launcher_does() -> None:
    module = _load_example()
    doc = module.__doc__
    assert "``--algo`` like the built-in ones" not in doc  # the epochtrain command cannot
    assert "epochtrain.cli.main()" in doc
    section = (ROOT / "docs" / "specs.md").read_text().split("## Adding an algorithm")[1]
    assert "from epochtrain.cli import main" in section
    from epochtrain.cli import main

    assert main(["config", "--algo", "linear-pg", "--env", "CartPole-v1"]) == 0


def test_the_documented_extra_state_keeps_a_counter_through_a_state_dict() -> None:
    section = (ROOT / "docs" / "specs.md").read_text().split("## Adding an algorithm")[1]
    lines = [line for line in section.splitlines() if line.startswith("def ")]
    assert any("get_extra_state" in line for line in lines), "the docs show the 2 methods"
    body = "\n".join("    " + line for line in lines)
    namespace: dict[str, Any] = {"TinyPolicy": TinyPolicy}
    exec(f"class Counting(TinyPolicy):\n{body}\n", namespace)  # the docs' lines, as written
    counting = namespace["Counting"]
    saved = counting(make_envs(1))
    saved.steps = 7
    resumed = counting(make_envs(1))
    resumed.steps = 0
    resumed.load_state_dict(saved.state_dict())
    assert resumed.steps == 7


def test_the_hooks_doc_settings_run_every_example_without_an_unused_setting_warning() -> None:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "hooks.md").read_text(), re.DOTALL)
    namespace: dict[str, Any] = {}
    exec(next(b for b in blocks if "TINY = " in b), namespace)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnusedSettingWarning)
        for algo in ("ppo", "dqn"):
            make_trainer(algo, "CartPole-v1", seed=0, **namespace["TINY"]).close()
