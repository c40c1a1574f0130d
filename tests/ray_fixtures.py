"""What the Ray tests share: one local Ray per test module that asks for it, and trainables
built outside Tune.

A test module imports :func:`local_ray` and asks for it (``pytestmark =
pytest.mark.usefixtures("local_ray")`` for a whole module, the decorator for single tests):
Ray starts once for that module, before its first test that asks, and stops after its last
test; a test that does not ask (a trainable driven by hand, a subprocess sweep) starts none.
Import this module after ``pytest.importorskip("ray")``, which skips a module without ray.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.tune.experiment.trial import _TrialInfo
from ray.tune.result import TRIAL_INFO

__all__ = ["FakeTrial", "local_ray", "run_dir_trainable", "spec_trainable", "trial_info"]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray with 2 CPUs for the module's tests that ask for it (starting one takes
    seconds), shut down after the last of them."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


class FakeTrial:
    """The fields of a Tune trial that ``_TrialInfo`` reads, for a trainable outside Tune."""

    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id
        self.placement_group_factory = None
        self.experiment_dir_name = "test"

    def __str__(self) -> str:
        return self.trial_id


def trial_info(trial_id: str) -> dict[str, Any]:
    """The config entry through which Tune tells a trainable its trial (``trial_id``)."""
    return {TRIAL_INFO: _TrialInfo(FakeTrial(trial_id))}


def run_dir_trainable(run_dir: Path, trial_id: str) -> Any:
    """An :class:`~epochtrain.ray.EpochTrainable` of the run in ``run_dir``, outside Tune."""
    from epochtrain.ray import EpochTrainable

    return EpochTrainable({"run_dir": os.fspath(run_dir), **trial_info(trial_id)})


def spec_trainable(spec: Any, trial_id: str, **space: object) -> Any:
    """An :class:`~epochtrain.ray.EpochTrainable` of ``spec`` (a ``RunSpec``) with the
    settings of ``space``, outside Tune."""
    from epochtrain.ray import EpochTrainable, param_space

    return EpochTrainable({**param_space(spec, space), **trial_info(trial_id)})
