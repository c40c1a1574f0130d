"""record_video and the VideoRecorder hook: mp4 files read back frame by frame, headless."""

from __future__ import annotations

import errno
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("imageio_ffmpeg", reason="the video extra is not installed")
pytest.importorskip("pygame", reason="the video extra is not installed")

import imageio.v3 as iio

from epochtrain.extras import MissingExtraError
from epochtrain.logger import JSONLLogger
from epochtrain.trainer.video import VideoRecorder, record_video, whole_mp4
from tests.trainer.tiny import TinyPolicy, build, make_envs


@pytest.fixture(autouse=True)
def headless(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")


def episode_lengths(policy: TinyPolicy, seeds: list[int], max_steps: int) -> list[int]:
    """Lengths (cut at ``max_steps``) of deterministic CartPole episodes of ``policy``,
    replayed without a video."""
    env = gym.make("CartPole-v1")
    lengths = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        done, n = False, 0
        while not done and n < max_steps:
            with torch.no_grad():
                act, _ = policy.act(torch.as_tensor(obs[None]), True)
            obs, _, terminated, truncated, _ = env.step(int(act[0]))
            done, n = terminated or truncated, n + 1
        lengths.append(n)
    return lengths


def test_record_video_writes_every_frame_of_each_episode(tmp_path: Path) -> None:
    torch.manual_seed(0)
    policy = TinyPolicy(make_envs(1))
    path = record_video(
        policy, "CartPole-v1", tmp_path / "v" / "cartpole.mp4", episodes=3, seed=3, max_steps=60
    )
    assert path == tmp_path / "v" / "cartpole.mp4"
    frames = iio.imread(path, index=None)
    lengths = episode_lengths(policy, [3, 4, 5], max_steps=60)
    assert frames.shape == (sum(lengths) + 3, 400, 600, 3)  # each step, plus each final frame
    assert frames.mean() > 100  # CartPole's white background, not an empty video
    assert iio.immeta(path)["fps"] == 50  # CartPole's render_fps


def test_a_recording_cut_short_keeps_the_video_that_was_there(tmp_path: Path) -> None:
    torch.manual_seed(0)
    policy = TinyPolicy(make_envs(1))
    path = record_video(policy, "CartPole-v1", tmp_path / "cartpole.mp4", max_steps=20)
    before = path.read_bytes()
    calls = 0

    def transform(obs: np.ndarray, update: bool = True) -> np.ndarray:
        nonlocal calls
        calls += 1
        if calls == 10:  # Ctrl-C in the middle of the second recording
            raise KeyboardInterrupt
        return obs

    with pytest.raises(KeyboardInterrupt):
        record_video(policy, "CartPole-v1", path, episodes=2, obs_transform=transform)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["cartpole.mp4"]  # no partial video


class FullDisk:
    """imageio's writer as it behaves on a full disk: ffmpeg dies mid-stream (``Broken
    pipe``) or, with the frames written, cannot write the file's end (the index), which
    imageio-ffmpeg does not report (as measured on a 12 KiB tmpfs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, at: str, free: int) -> None:
        import imageio.v2

        real = imageio.v2.get_writer
        monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(free=free))

        def get_writer(path: Path, **kwargs: object) -> object:
            writer = real(path, **kwargs)
            if at == "frame":
                frames = 0

                def append(frame: np.ndarray) -> None:
                    nonlocal frames
                    frames += 1
                    if frames == 5:
                        raise OSError("[Errno 32] Broken pipe\n\nFFMPEG COMMAND:\nffmpeg -y ...")
                    real_append(frame)

                real_append = writer.append_data
                writer.append_data = append
            else:
                real_close = writer.close

                def close() -> None:
                    real_close()
                    with open(path, "r+b") as f:  # the index never reached the disk
                        f.truncate(Path(path).stat().st_size // 2)

                writer.close = close
            return writer

        monkeypatch.setattr(imageio.v2, "get_writer", get_writer)


@pytest.mark.parametrize("at", ["frame", "end"])
def test_a_full_disk_raises_enospc_and_keeps_the_video_that_was_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: str
) -> None:
    torch.manual_seed(0)
    policy = TinyPolicy(make_envs(1))
    path = record_video(policy, "CartPole-v1", tmp_path / "cartpole.mp4", max_steps=20)
    assert whole_mp4(path)
    before = path.read_bytes()
    FullDisk(monkeypatch, at=at, free=0)
    with pytest.raises(OSError, match="No space left on device for the video") as info:
        record_video(policy, "CartPole-v1", path, max_steps=20)
    assert info.value.errno == errno.ENOSPC
    assert "cartpole.mp4' is untouched" in str(info.value)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["cartpole.mp4"]  # no partial video


def test_an_unfinished_video_with_room_on_the_disk_is_refused_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    FullDisk(monkeypatch, at="end", free=10 << 30)
    with pytest.raises(OSError, match="ffmpeg did not finish the video") as info:
        record_video(TinyPolicy(make_envs(1)), "CartPole-v1", tmp_path / "v.mp4", max_steps=20)
    assert info.value.errno == errno.EIO
    assert list(tmp_path.iterdir()) == []


def test_record_video_validates_its_arguments(tmp_path: Path) -> None:
    policy = TinyPolicy(make_envs(1))
    with pytest.raises(ValueError, match=r"path must end in \.mp4"):
        record_video(policy, "CartPole-v1", tmp_path / "video.gif")
    with pytest.raises(ValueError, match="episodes must be an int >= 1"):
        record_video(policy, "CartPole-v1", tmp_path / "v.mp4", episodes=0)
    with pytest.raises(ValueError, match=r"env_id 'NoSuchEnv-v0' is not a registered gymnasium"):
        record_video(policy, "NoSuchEnv-v0", tmp_path / "v.mp4")


def test_video_recorder_records_every_k_epochs_and_changes_nothing_in_the_run(
    tmp_path: Path,
) -> None:
    recorder = VideoRecorder(tmp_path / "videos", every=2, max_steps=30)
    with JSONLLogger(tmp_path / "log.jsonl") as logger:
        trainer = build("off", max_epoch=4, hooks=[recorder], logger=logger)
        with_video = list(trainer)
    plain = list(build("off", max_epoch=4))
    for a, b in zip(with_video, plain, strict=True):
        assert a.test_collect_stat is not None and b.test_collect_stat is not None
        assert np.array_equal(a.test_collect_stat.returns, b.test_collect_stat.returns)
        assert a.training_stat is not None and b.training_stat is not None
        assert a.training_stat.loss == b.training_stat.loss
    assert recorder.videos == [tmp_path / "videos" / f"epoch_{e:04d}.mp4" for e in (2, 4)]
    assert all(len(iio.imread(p, index=None)) == 31 for p in recorder.videos)  # cut + last
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    logged = [(r["step"], r["test/video"]) for r in records if "test/video" in r]
    env_steps = [s.info_stat.env_step for s in with_video]
    assert logged == [
        (env_steps[1], str(recorder.videos[0])),
        (env_steps[3], str(recorder.videos[1])),
    ]
    assert recorder.state_dict() == {"videos": [str(p) for p in recorder.videos]}


def test_a_video_directory_that_cannot_be_written_is_refused_before_any_epoch(
    tmp_path: Path,
) -> None:
    """Before, the first video failed after the epoch's training: the epoch was lost."""
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match=r"VideoRecorder directory '.*afile/videos' is under"):
        VideoRecorder(tmp_path / "afile" / "videos")
    policy = TinyPolicy(make_envs(1))
    with pytest.raises(ValueError, match=r"path's directory '.*afile' is a file"):
        record_video(policy, "CartPole-v1", tmp_path / "afile" / "v.mp4")
    (tmp_path / "dir.mp4").mkdir()
    with pytest.raises(ValueError, match=r"is a directory: name an \.mp4 file"):
        record_video(policy, "CartPole-v1", tmp_path / "dir.mp4")


def test_video_recorder_needs_a_test_collector_and_a_positive_period(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="every must be an int >= 1"):
        VideoRecorder(tmp_path, every=0)
    with pytest.raises(ValueError, match="needs a trainer with a test_collector"):
        build("off", test_collector=None, hooks=[VideoRecorder(tmp_path)])


def test_tensorboard_gets_the_path_and_an_animated_gif(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    from epochtrain.logger import TensorboardLogger

    policy = TinyPolicy(make_envs(1))
    video = record_video(policy, "CartPole-v1", tmp_path / "v.mp4", max_steps=20)
    with TensorboardLogger(tmp_path / "tb") as logger:
        logger.log_video(video, 1000)
    values = {}
    for path in (tmp_path / "tb").glob("events.out.tfevents.*"):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                values[value.tag] = (event.step, value)
    step, text = values["test/video/text_summary"]
    assert step == 1000 and text.tensor.string_val == [str(video).encode()]
    step, image = values["test/video"]  # the loader migrates images to [width, height, data]
    width, height, gif = image.tensor.string_val
    assert step == 1000 and gif.startswith(b"GIF89a")
    assert (width, height) == (b"240", b"160")
    assert iio.imread(gif, index=None, extension=".gif").shape[0] == 21  # every frame


def test_without_imageio_the_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "imageio.v2", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'epochtrain\[video\]'"):
        VideoRecorder(tmp_path)


def test_video_recorder_state_round_trips(tmp_path: Path) -> None:
    recorder = VideoRecorder(tmp_path)
    recorder.load_state_dict({"videos": ["a.mp4", "b.mp4"]})
    assert recorder.videos == [Path("a.mp4"), Path("b.mp4")]
    recorder.reset()
    assert recorder.videos == []
