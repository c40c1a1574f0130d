"""Videos of a policy's episodes: :func:`record_video` and the :class:`VideoRecorder` hook.

Frames come from a single env made with ``render_mode="rgb_array"`` and are written as
mp4 (H.264) by imageio through imageio-ffmpeg, which bundles its own ffmpeg binary; no
moviepy, no system ffmpeg. Headless machines work: where pygame renders (classic-control
tasks), ``SDL_VIDEODRIVER`` defaults to ``dummy``, so no display is opened.

The episode runs in an env of its own, seeded by the caller and never by the trainer's
random streams, with deterministic actions and no gradient: recording a video changes
nothing in the run it watches.

Needs the ``video`` extra (``pip install 'epochtrain[video]'``: imageio, imageio-ffmpeg,
pygame).
"""

from __future__ import annotations

import errno
import os
import shutil
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from epochtrain.data.actions import env_action_map
from epochtrain.data.collector import Actor, ObsTransform
from epochtrain.data.spaces import check_policy_spaces
from epochtrain.data.writes import check_writable_dir, removing_new_folders, replacing
from epochtrain.envs import env_spec
from epochtrain.extras import require
from epochtrain.logger.tags import video_scope
from epochtrain.suggestions import close_matches
from epochtrain.trainer.hooks import TrainerHook

if TYPE_CHECKING:
    from epochtrain.trainer.base import BaseTrainer

__all__ = ["VideoRecorder", "check_video_path", "record_video"]


def check_video_path(path: str | os.PathLike[str], what: str = "path") -> Path:
    """``path`` as a ``Path`` if a video can be written there (an ``.mp4`` name, not a
    directory, in a directory this process can write or create); else a ``ValueError``
    naming ``what`` (``--video`` from the command line). Nothing is created."""
    out = Path(path)
    if out.suffix.lower() != ".mp4":
        raise ValueError(f"{what} must end in .mp4, got {os.fspath(path)!r}")
    if out.is_dir():
        raise ValueError(f"{what} {os.fspath(path)!r} is a directory: name an .mp4 file")
    check_writable_dir(out.parent, f"{what}'s directory")
    return out


def _batched(obs: Any) -> Any:
    """One observation as a batch of one (dict observations key by key)."""
    if isinstance(obs, Mapping):
        return {k: _batched(v) for k, v in obs.items()}
    return np.expand_dims(np.asarray(obs), 0)


def _as_tensor(obs: Any) -> Any:
    if isinstance(obs, Mapping):
        return {k: _as_tensor(v) for k, v in obs.items()}
    return torch.as_tensor(obs)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


def _check_env_id(env_id: object, what: str = "env_id") -> str:
    """``env_id`` if it is a registered gymnasium id (``"module:EnvId"`` imports ``module``
    first); else a ``ValueError`` naming ``what``, with the closest registered ids. Only
    the registry is read: no env is made."""
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(
            f"{what} must be a gymnasium env id (str) such as 'CartPole-v1', got {env_id!r}"
        )
    try:
        env_spec(env_id)
    except gym.error.Error as exc:
        hint = close_matches(env_id.rpartition(":")[2], gym.registry) or f" ({exc})"
        raise ValueError(
            f"{what} {env_id!r} is not a registered gymnasium env{hint}: pass the id of "
            "the env the policy acts on, or 'your_package.module:YourEnv-v0' to import "
            "the module that registers it"
        ) from exc
    return env_id


def _check_env_fits(
    policy: Actor,
    env_id: str,
    what: str = "env_id",
    fix: str = "pass the id of the env the policy was trained on",
) -> None:
    """``ValueError`` naming ``what`` unless ``env_id`` is registered and its observation
    and action spaces are those ``policy`` was built for
    (:func:`~epochtrain.data.spaces.check_policy_spaces`, as a collector checks its envs).
    The env is made without ``render_mode`` (no renderer, no window) and closed; ``fix``
    ends the message."""
    _check_env_id(env_id, what)
    try:
        env = gym.make(env_id)
    except gym.error.Error as exc:
        raise ValueError(f"{what} {env_id!r} cannot be made ({exc})") from exc
    # one env as a vector of one: check_policy_spaces reads the single spaces of a VectorEnv
    envs = gym.vector.SyncVectorEnv([lambda: env])
    try:
        check_policy_spaces(policy, envs)
    except ValueError as exc:
        why = str(exc).partition(": build the policy")[0]
        raise ValueError(f"{what} {env_id!r} does not fit the policy: {why}: {fix}") from exc
    finally:
        envs.close()


def record_video(
    policy: Actor,
    env_id: str,
    path: str | os.PathLike[str],
    *,
    episodes: int = 1,
    seed: int = 0,
    obs_transform: ObsTransform | None = None,
    fps: int | None = None,
    max_steps: int | None = None,
) -> Path:
    """Run ``episodes`` deterministic episodes of ``policy`` on ``env_id`` and write them,
    one after the other, to the mp4 file ``path``; returns the path.

    :param policy: any :class:`~epochtrain.Policy` (``act`` with ``deterministic=True``).
    :param env_id: a registered gymnasium id whose env renders ``rgb_array`` frames, with
        the observation and action spaces ``policy`` was built for (checked first, before
        anything is written: ``ValueError`` naming ``env_id`` and both spaces).
    :param path: the mp4 file to write (parent directories are created; if the video
        cannot be written, or Ctrl-C or SIGTERM stops it, those that are still empty are
        removed, and an existing file at ``path`` is untouched).
    :param episodes: episodes to record; episode ``i`` is reset with ``seed + i``.
    :param seed: seed of the first episode.
    :param obs_transform: the observation map the policy was trained with (e.g. the
        test collector's ``obs_transform`` set by ``ObservationNormalizer``); called with
        ``update=False``.
    :param fps: frames per second of the video; ``None``: the env's ``render_fps``
        (30 if it declares none).
    :param max_steps: stop an episode after this many env steps (``None``: the env's own
        time limit).
    """
    require("imageio.v2", extra="video")
    require("imageio_ffmpeg", extra="video")
    _positive_int("episodes", episodes)
    if max_steps is not None:
        _positive_int("max_steps", max_steps)
    if fps is not None:
        _positive_int("fps", fps)
    out = check_video_path(path)
    _check_env_fits(policy, env_id)
    return _record_checked(policy, env_id, out, episodes, seed, obs_transform, fps, max_steps)


def _record_checked(
    policy: Actor,
    env_id: str,
    out: Path,
    episodes: int,
    seed: int,
    obs_transform: ObsTransform | None,
    fps: int | None,
    max_steps: int | None,
) -> Path:
    """:func:`record_video` once its arguments are checked: the episodes into ``out``,
    whole or not at all; a video not written leaves no new folder."""
    imageio = require("imageio.v2", extra="video")
    with removing_new_folders(out.parent):
        out.parent.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame: no window, no display
        try:
            env = gym.make(env_id, render_mode="rgb_array")
        except gym.error.Error as exc:
            raise ValueError(
                f"env_id {env_id!r} cannot be made with render_mode='rgb_array' ({exc})"
            ) from exc
        rate = fps if fps is not None else int(env.metadata.get("render_fps") or 30)
        # macro_block_size=2: H.264 needs even sides; 16 (the default) would rescale CartPole
        try:
            with replacing(out, suffix=".mp4") as tmp:  # a video cut short never replaces one
                writer = imageio.get_writer(tmp, fps=rate, codec="libx264", macro_block_size=2)
                try:
                    for episode in range(episodes):
                        _record_episode(
                            policy, env, writer, seed + episode, obs_transform, max_steps
                        )
                except OSError as exc:  # ffmpeg died: "Broken pipe" and its command line
                    raise _unfinished(out, str(exc).split("\n", 1)[0]) from exc
                finally:
                    writer.close()
                if not whole_mp4(tmp):  # imageio-ffmpeg ignores ffmpeg's exit status
                    raise _unfinished(out, "ffmpeg could not write its end (the index)")
        finally:
            env.close()
    return out


def whole_mp4(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` is a sequence of MP4 boxes that fills the file and holds the index
    (``moov``, which ffmpeg writes last): a file ffmpeg did not finish is not."""
    size = os.path.getsize(path)
    kinds, pos = set(), 0
    with open(path, "rb") as f:
        while pos < size:
            f.seek(pos)
            header = f.read(16)
            if len(header) < 8:
                return False
            length, kind = struct.unpack(">I4s", header[:8])
            if length == 1:  # a 64-bit size follows
                length = struct.unpack(">Q", header[8:16])[0] if len(header) == 16 else 0
            elif length == 0:  # to the end of the file
                length = size - pos
            if length < 8:
                return False
            kinds.add(kind)
            pos += length
    return pos == size and b"moov" in kinds


def _unfinished(out: Path, cause: str) -> OSError:
    """The error for a video ffmpeg did not finish: ENOSPC when the disk is (nearly) full."""
    free = shutil.disk_usage(out.parent).free
    kept = f"{os.fspath(out)!r} is untouched (an earlier video stays)"
    if free < 1 << 20:
        return OSError(
            errno.ENOSPC,
            f"No space left on device for the video {os.fspath(out)!r} ({free:,} bytes free; "
            f"{cause}): free space or choose another directory; {kept}",
        )
    return OSError(errno.EIO, f"ffmpeg did not finish the video: {cause}; {kept}")


def _record_episode(
    policy: Actor,
    env: gym.Env[Any, Any],
    writer: Any,
    seed: int,
    obs_transform: ObsTransform | None,
    max_steps: int | None,
) -> None:
    obs, _ = env.reset(seed=seed)
    steps = 0
    to_env = env_action_map(env.action_space)
    with torch.inference_mode():
        while True:
            frame = env.render()
            if not isinstance(frame, np.ndarray):
                raise ValueError(
                    f"{env.spec.id if env.spec else env} rendered {type(frame).__name__}, "
                    "not an rgb_array frame: it cannot be recorded"
                )
            writer.append_data(frame)
            batch = _batched(obs)
            if obs_transform is not None:
                batch = obs_transform(batch, False)
            act, _ = policy.act(policy.to_tensor(_as_tensor(batch)), True)
            acts = act.cpu().numpy()
            obs, _, terminated, truncated, _ = env.step(
                (acts if to_env is None else to_env(acts))[0]
            )
            steps += 1
            if terminated or truncated or (max_steps is not None and steps >= max_steps):
                frame = env.render()
                if isinstance(frame, np.ndarray):
                    writer.append_data(frame)
                return


class VideoRecorder(TrainerHook):
    """Record a test episode as mp4 every ``every`` epochs and hand it to the logger.

    After the test step (``test_end``) of every epoch divisible by ``every`` (and of epoch
    0 with ``test_before_train``), one deterministic episode of the trainer's policy runs
    in a single env made from the test envs' id with ``render_mode="rgb_array"``, is
    written to ``directory/epoch_<epoch>.mp4``, and goes to
    ``trainer.logger.log_video(path, env_step, tag=tag)`` (W&B shows the video, MLflow
    stores it as an artifact, TensorBoard and JSONL keep the path).

    :param directory: where the mp4 files go; created if missing.
    :param every: epochs between two videos.
    :param env_id: the env to record; ``None``: the test envs' id. It must be registered
        (checked when the hook is built) and have the observation and action spaces of the
        trainer's policy (checked when the hook is registered, i.e. when the trainer is
        built): a ``ValueError`` then, not after an epoch's training.
    :param seed: episode seed of the video at epoch ``e`` is ``seed + e`` (the trainer's
        random streams are not touched).
    :param fps: frames per second (``None``: the env's ``render_fps``).
    :param max_steps: cut the episode after this many env steps (``None``: no cut).
    :param tag: the logger tag of the videos (its scope counts env steps).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        every: int = 1,
        env_id: str | None = None,
        seed: int = 0,
        fps: int | None = None,
        max_steps: int | None = None,
        tag: str = "test/video",
    ) -> None:
        require("imageio.v2", extra="video")
        require("imageio_ffmpeg", extra="video")
        if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
            raise ValueError(f"directory must be a non-empty path, got {directory!r}")
        check_writable_dir(directory, "VideoRecorder directory")  # before any epoch is lost
        self.directory = Path(directory)
        self.every = _positive_int("every", every)
        video_scope(tag)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        if fps is not None:
            _positive_int("fps", fps)
        if max_steps is not None:
            _positive_int("max_steps", max_steps)
        if env_id is not None:
            _check_env_id(env_id)  # the spaces are checked against the policy in register
        self.env_id, self.seed, self.fps, self.max_steps, self.tag = (
            env_id,
            seed,
            fps,
            max_steps,
            tag,
        )
        self.videos: list[Path] = []
        """Every video written so far, in order (kept across a resume)."""
        self._trainer: BaseTrainer[Any] | None = None

    def register(self, trainer: BaseTrainer[Any]) -> None:
        """Record at ``test_end``; the trainer needs a test collector, and the env to
        record the spaces of the trainer's policy (checked here, before any work)."""
        test = trainer.test_collector
        if test is None:
            raise ValueError("VideoRecorder needs a trainer with a test_collector")
        if self.env_id is not None:
            _check_env_fits(
                trainer.policy,
                self.env_id,
                "VideoRecorder env_id",
                "pass the id of the env the policy acts on, or leave env_id=None to record "
                "the test envs' env",
            )
        else:
            spec = test.env.spec
            if spec is None:
                raise ValueError(
                    "VideoRecorder: the test envs have no gymnasium spec to take an id from; "
                    "pass env_id='...'"
                )
            _check_env_fits(
                trainer.policy,
                spec.id,
                "VideoRecorder: the test envs' id",
                "their wrappers change the spaces, so pass env_id='...' of a registered env "
                "with the policy's spaces",
            )
            self.env_id = spec.id
        self._trainer = trainer
        trainer.register_op("test_end", self._on_test)

    def _on_test(self, stats: object) -> None:
        assert self._trainer is not None and self.env_id is not None
        info = self._trainer.info_stat()
        if info.epoch % self.every:
            return
        test = self._trainer.test_collector
        path = _record_checked(  # env_id and the other arguments were checked when built
            self._trainer.policy,
            self.env_id,
            check_video_path(self.directory / f"epoch_{info.epoch:04d}.mp4"),
            1,
            self.seed + info.epoch,
            test.obs_transform if test is not None else None,
            self.fps,
            self.max_steps,
        )
        self.videos.append(path)
        self._trainer.logger.log_video(path, info.env_step, tag=self.tag)

    def state_dict(self) -> dict[str, Any]:
        """The paths of the videos written so far."""
        return {"videos": [os.fspath(p) for p in self.videos]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the list of videos."""
        self.videos = [Path(p) for p in state["videos"]]

    def reset(self) -> None:
        """Forget the videos of the previous run (the files stay)."""
        self.videos = []
