"""record_video and VideoRecorder refuse an env they cannot record before any work: an id
that is not registered when the hook is built, an env whose spaces do not fit the policy
when the hook is registered (the trainer is built) and at the start of record_video."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

pytest.importorskip("imageio_ffmpeg", reason="the video extra is not installed")
pytest.importorskip("pygame", reason="the video extra is not installed")

from epochtrain.trainer.video import VideoRecorder, record_video
from tests.trainer.tiny import TinyPolicy, build, make_envs


@pytest.fixture(autouse=True)
def headless(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments of every gym.make call."""
    calls: list[dict[str, Any]] = []
    real = gym.make

    def spy(env_id: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(env_id, **kwargs)

    monkeypatch.setattr(gym, "make", spy)
    return calls


def test_an_unregistered_env_id_is_refused_when_the_hook_is_built(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"env_id 'CartPol-v1' is not a registered") as info:
        VideoRecorder(tmp_path / "v", env_id="CartPol-v1")
    assert "did you mean 'CartPole-v1'" in str(info.value)
    with pytest.raises(ValueError, match=r"env_id 'Nope-v0' is not a registered gymnasium"):
        VideoRecorder(tmp_path / "v", env_id="Nope-v0")


def test_an_env_of_other_spaces_is_refused_when_the_trainer_is_built(tmp_path: Path) -> None:
    # Pendulum: Box(3,) observations and Box(1,) actions; the policy is CartPole's
    recorder = VideoRecorder(tmp_path / "v", env_id="Pendulum-v1")
    with pytest.raises(
        ValueError, match=r"VideoRecorder env_id 'Pendulum-v1' does not fit"
    ) as info:
        build(hooks=[recorder])
    message = str(info.value)
    assert "Box(shape=(4,), float32)" in message and "Box(shape=(3,), float32)" in message
    assert "env_id=None" in message
    assert not list(tmp_path.glob("v/*.mp4"))


def test_an_env_of_the_same_spaces_is_accepted_and_recorded(tmp_path: Path) -> None:
    recorder = VideoRecorder(tmp_path / "v", env_id="CartPole-v1", max_steps=5)
    trainer = build(hooks=[recorder], max_epoch=1)
    trainer.run()
    assert [p.name for p in recorder.videos] == ["epoch_0001.mp4"]


@pytest.mark.parametrize(
    ("env_id", "expected"),
    [
        ("Pendulum-v1", r"env_id 'Pendulum-v1' does not fit the policy: .*observation space"),
        ("Nope-v0", r"env_id 'Nope-v0' is not a registered gymnasium env"),
    ],
)
def test_record_video_refuses_an_env_it_cannot_record_before_any_work(
    tmp_path: Path, made: list[dict[str, Any]], env_id: str, expected: str
) -> None:
    policy = TinyPolicy(make_envs(1))
    made.clear()
    with pytest.raises(ValueError, match=expected):
        record_video(policy, env_id, tmp_path / "new" / "x.mp4")
    assert not (tmp_path / "new").exists()
    assert all("render_mode" not in kwargs for kwargs in made)  # no rendering env


def test_a_bad_fps_max_steps_or_seed_is_refused_when_the_hook_is_built(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"fps must be an int >= 1, got 0"):
        VideoRecorder(tmp_path / "v", fps=0)
    with pytest.raises(ValueError, match=r"max_steps must be an int >= 1, got -1"):
        VideoRecorder(tmp_path / "v", max_steps=-1)
    half: Any = 1.5
    with pytest.raises(ValueError, match=r"seed must be an int >= 0, got 1.5"):
        VideoRecorder(tmp_path / "v", seed=half)
