"""Tests of what a Ray sweep's messages name and leave behind: a failed trial's "last good
checkpoint" is one that exists (the run directory's, not the directory Tune saved into
and deleted), and a refused ``gpus_per_run`` writes nothing that blocks the corrected
command."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'epochtrain[ray]'")

from ray.tune.experiment.trial import _TrialInfo  # noqa: E402
from ray.tune.result import TRIAL_INFO  # noqa: E402

from epochtrain.experiment import grid, run_experiment  # noqa: E402
from epochtrain.experiment.prepare import prepare_runs  # noqa: E402
from tests.experiment.settings import FAST  # noqa: E402

# epoch 1 is checkpointed, epoch 2 is inf
DIVERGES = {**FAST, "max_epoch": 3, "lr": 1e30, "batch_size": 64}


@pytest.fixture(scope="module")
def local_ray() -> Any:
    """A local Ray with 2 CPUs for the tests that run Tune (shut down after them)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


class _Trial:
    """The fields of a Tune trial that ``_TrialInfo`` reads, for a trainable outside Tune."""

    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id
        self.placement_group_factory = None
        self.experiment_dir_name = "test"

    def __str__(self) -> str:
        return self.trial_id


def _run_dir_trainable(run_dir: Path, trial_id: str) -> Any:
    from epochtrain.ray import EpochTrainable

    return EpochTrainable({"run_dir": os.fspath(run_dir), TRIAL_INFO: _TrialInfo(_Trial(trial_id))})


def _named_checkpoint(error: str) -> Path:
    start = error.index("the last good checkpoint is '") + len("the last good checkpoint is '")
    return Path(error[start : error.index("'", start)])


def test_a_failed_trial_names_its_run_directorys_checkpoint_not_tunes_save_directory(
    local_ray: None, tmp_path: Path
) -> None:
    # before: "the last good checkpoint is '/tmp/tmpXXXX/epochtrain'", the directory Tune
    # had saved into and deleted once it had copied it to its storage
    specs = grid(["ppo"], ["CartPole-v1"], [0], **DIVERGES)
    run_experiment(specs, tmp_path, backend="ray", show_progress=False)
    run_dir = tmp_path / specs[0].run_id
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "failed" and result["error"].startswith("NonFiniteError")
    named = _named_checkpoint(result["error"])
    assert named == run_dir.resolve() / "checkpoints" / "epoch_000001"
    assert (named / "manifest.json").is_file()


def test_a_trial_restored_from_tunes_copy_names_the_run_directorys_checkpoint(
    tmp_path: Path,
) -> None:
    # a worker died after epoch 1 and Tune restores the trial on a new actor: before, the
    # trainer's last checkpoint became Tune's copy (a temporary download on a cluster)
    specs = grid(["ppo"], ["CartPole-v1"], [0], **DIVERGES)
    run_dir = prepare_runs(specs, tmp_path)[0]
    first = _run_dir_trainable(run_dir, "t")
    first.train()
    saved = first.save()
    own = run_dir.resolve() / "checkpoints" / "epoch_000001"
    assert first.trainer.last_checkpoint == own
    first.stop()  # the dead worker: its lock and envs go with it
    second = _run_dir_trainable(run_dir, "t")
    second.restore(saved)
    assert second.trainer.last_checkpoint == own
    assert second.train()["failed"] == 1.0  # epoch 2 diverges
    result = json.loads((run_dir / "result.json").read_text())
    assert _named_checkpoint(result["error"]) == own
    second.stop()


def test_a_refused_gpus_per_run_writes_nothing_and_the_corrected_sweep_runs(
    local_ray: None, tmp_path: Path
) -> None:
    # before: experiment.json, .experiment.lock and the run's spec.toml were written first,
    # and the corrected command was refused ("holds runs ... with other settings")
    out = tmp_path / "exp"
    specs = grid(["ppo"], ["CartPole-v1"], [0], **{**FAST, "max_epoch": 1})
    with pytest.raises(ValueError, match=r"gpus_per_run=1 but the Ray cluster has 0 GPUs"):
        run_experiment(specs, out, backend="ray", gpus_per_run=1.0, show_progress=False)
    assert not out.exists()
    corrected = grid(["ppo"], ["CartPole-v1"], [0], **FAST)  # max_epoch 2 this time
    experiment = run_experiment(corrected, out, backend="ray", show_progress=False)
    assert [r.status for r in experiment.runs] == ["finished"]


def test_a_failed_spec_trial_names_tunes_stored_copy_of_its_checkpoint(
    local_ray: None, tmp_path: Path
) -> None:
    # a "spec" trial has no run directory: Tune's stored copy is its only checkpoint
    from ray import tune

    from epochtrain.ray import EpochTrainable, param_space
    from epochtrain.spec import RunSpec

    spec = RunSpec.tuned("ppo", "CartPole-v1", seed=0).with_overrides(DIVERGES)
    tuner = tune.Tuner(
        EpochTrainable,
        param_space=param_space(spec),
        run_config=tune.RunConfig(
            storage_path=os.fspath(tmp_path),
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1),
            verbose=0,
        ),
    )
    error = str(tuner.fit()[0].error)
    named = _named_checkpoint(error)
    assert named.is_relative_to(tmp_path) and named.name == "epochtrain", error
    assert (named / "manifest.json").is_file()
