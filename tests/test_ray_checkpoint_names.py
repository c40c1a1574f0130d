"""Tests of what a Ray sweep's messages name and leave behind: a failed trial's "last good
checkpoint" is one that exists (the run directory's, not the directory Tune saved into
and deleted), and a refused ``gpus_per_run`` writes nothing that blocks the corrected
command."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'epochtrain[ray]'")

from epochtrain.experiment import grid, run_experiment  # noqa: E402
from epochtrain.experiment.prepare import prepare_runs  # noqa: E402
from tests.experiment.settings import FAST  # noqa: E402
from tests.ray_fixtures import local_ray, run_dir_trainable  # noqa: E402, F401

# epoch 1 is checkpointed, epoch 2 is inf
DIVERGES = {**FAST, "max_epoch": 3, "lr": 1e30, "batch_size": 64}


def _named_checkpoint(error: str) -> Path:
    start = error.index("the last good checkpoint is '") + len("the last good checkpoint is '")
    return Path(error[start : error.index("'", start)])


@pytest.mark.usefixtures("local_ray")
def test_a_failed_trial_names_its_run_directorys_checkpoint_not_tunes_save_directory(
    tmp_path: Path,
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
    first = run_dir_trainable(run_dir, "t")
    first.train()
    saved = first.save()
    own = run_dir.resolve() / "checkpoints" / "epoch_000001"
    assert first.trainer.last_checkpoint == own
    first.stop()  # the dead worker: its lock and envs go with it
    second = run_dir_trainable(run_dir, "t")
    second.restore(saved)
    assert second.trainer.last_checkpoint == own
    assert second.train()["failed"] == 1.0  # epoch 2 diverges
    result = json.loads((run_dir / "result.json").read_text())
    assert _named_checkpoint(result["error"]) == own
    second.stop()


@pytest.mark.usefixtures("local_ray")
def test_a_refused_gpus_per_run_writes_nothing_and_the_corrected_sweep_runs(tmp_path: Path) -> None:
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


@pytest.mark.usefixtures("local_ray")
def test_a_failed_spec_trial_names_tunes_stored_copy_of_its_checkpoint(tmp_path: Path) -> None:
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


def _remote_file_system() -> object:
    """This node's file system as Tune sees an ``s3://`` one: not pyarrow's "local" (an
    fsspec file system wrapped by pyarrow, whose URIs read ``file:///...``)."""
    import fsspec
    import pyarrow.fs

    return pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(fsspec.filesystem("file")))


def _named_uri(error: str) -> str:
    start = error.index("the last good checkpoint is not on this node: it is '") + len(
        "the last good checkpoint is not on this node: it is '"
    )
    return error[start : error.index("'", start)]


@pytest.mark.usefixtures("local_ray")
def test_a_failed_spec_trial_with_remote_storage_names_its_uri_and_how_to_resume(
    tmp_path: Path,
) -> None:
    # before: "no checkpoint was written or loaded yet", though Tune had stored epoch 1's
    import pyarrow.fs
    from ray import tune

    from epochtrain.factory import make_trainer
    from epochtrain.ray import EpochTrainable, param_space
    from epochtrain.spec import RunSpec

    spec = RunSpec.tuned("ppo", "CartPole-v1", seed=0).with_overrides(DIVERGES)
    tuner = tune.Tuner(
        EpochTrainable,
        param_space=param_space(spec),
        run_config=tune.RunConfig(
            storage_path=os.fspath(tmp_path / "storage"),
            storage_filesystem=_remote_file_system(),
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1),
            verbose=0,
        ),
    )
    error = str(tuner.fit()[0].error)
    assert "no checkpoint was written or loaded yet" not in error, error
    uri = _named_uri(error)
    assert uri.startswith(f"file://{tmp_path / 'storage'}/") and uri.endswith("/epochtrain")
    experiment = uri.removeprefix("file://").rsplit("/", 3)[0]
    assert f"ray.tune.Tuner.restore('file://{experiment}', EpochTrainable" in error
    assert (Path(experiment) / "tuner.pkl").is_file()  # what Tuner.restore reads
    # the fix the message gives: copy the checkpoint here, then resume from the copy
    tunes = uri.removesuffix("/epochtrain")
    assert f"pyarrow.fs.copy_files({tunes!r}, 'checkpoint')" in error
    assert "resume_from='checkpoint/epochtrain'" in error
    pyarrow.fs.copy_files(tunes, os.fspath(tmp_path / "checkpoint"))
    copy = tmp_path / "checkpoint" / "epochtrain"
    resumed = make_trainer(spec.with_overrides({"resume_from": os.fspath(copy)}))
    assert resumed.state.epoch == 1
    resumed.close()


def test_a_spec_trial_restored_from_remote_storage_names_it_not_the_deleted_download(
    tmp_path: Path,
) -> None:
    # before: Tune's download of the remote checkpoint, deleted once loaded
    from ray import tune

    from epochtrain.spec import RunSpec
    from tests.ray_fixtures import spec_trainable

    spec = RunSpec.tuned("ppo", "CartPole-v1", seed=0).with_overrides(DIVERGES)
    first = spec_trainable(spec, "t")
    first.train()  # epoch 1
    saved = first.save(os.fspath(tmp_path / "checkpoint_000000"))
    first.stop()
    remote = tune.Checkpoint(saved.checkpoint.path, filesystem=_remote_file_system())
    second = spec_trainable(spec, "t")
    second.restore(remote)
    assert second.trainer.state.epoch == 1 and second.trainer.last_checkpoint is None
    with pytest.raises(FloatingPointError) as info:
        second.train()  # epoch 2 diverges
    assert _named_uri(str(info.value)) == f"file://{tmp_path}/checkpoint_000000/epochtrain"
    second.stop()


class _FileSystem:
    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


class _Checkpoint:
    def __init__(self, type_name: str, path: str) -> None:
        self.filesystem, self.path = _FileSystem(type_name), path


@pytest.mark.parametrize(
    ("type_name", "scheme"), [("s3", "s3"), ("gcs", "gs"), ("hdfs", "hdfs"), ("abfs", "abfs")]
)
def test_a_checkpoint_on_a_cloud_storage_path_is_named_by_its_uri(
    type_name: str, scheme: str
) -> None:
    from epochtrain.ray import stored_checkpoint_text

    path = "bucket/sweeps/PPO_2026/PPO_0_lr=0.001/checkpoint_000003"
    text = stored_checkpoint_text(_Checkpoint(type_name, path))
    uri = f"{scheme}://{path}/epochtrain"
    assert text.startswith(f"the last good checkpoint is not on this node: it is {uri!r}")
    assert f"pyarrow.fs.copy_files('{scheme}://{path}', 'checkpoint')" in text
    assert "resume_from='checkpoint/epochtrain'" in text
    restore = f"ray.tune.Tuner.restore('{scheme}://bucket/sweeps/PPO_2026', EpochTrainable"
    assert restore in text


def test_a_checkpoint_on_a_file_system_of_no_known_scheme_is_named_by_its_path() -> None:
    from epochtrain.ray import stored_checkpoint_text

    text = stored_checkpoint_text(_Checkpoint("custom", "/data/sweeps/exp/trial/checkpoint_000001"))
    assert "'/data/sweeps/exp/trial/checkpoint_000001/epochtrain' on the 'custom' file system" in (
        text
    )
    assert "Tuner.restore(<storage_path>/exp, EpochTrainable, resume_errored=True)" in text
