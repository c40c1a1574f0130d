"""Built-in hooks that change the data learned from: normalisers and minibatch sub-sampling.

``ObservationNormalizer`` and ``RewardNormalizer`` keep running statistics (mean and
variance, Chan et al.'s parallel update, float64) of the training data, as
Stable-Baselines3's ``VecNormalize`` and gymnasium's ``NormalizeObservation`` /
``NormalizeReward`` do; their statistics are hook state, saved in checkpoints, and their
constructor arguments are compared on resume (``resume_settings``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

import gymnasium as gym
import numpy as np
import torch

from epochtrain.data.batch import Batch
from epochtrain.data.collector import ObsTransform
from epochtrain.trainer.hook_settings import constructor_settings
from epochtrain.trainer.hooks import TrainerHook, online_collector

if TYPE_CHECKING:
    from epochtrain.trainer.base import BaseTrainer
    from epochtrain.trainer.offpolicy import OffpolicyTrainer

__all__ = ["BatchSubSampler", "ObservationNormalizer", "RewardNormalizer", "RunningMeanStd"]


class RunningMeanStd:
    """Running mean and variance of arrays shaped ``shape``."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape)
        self.var = np.ones(shape)
        self.count = 1e-4  # as Stable-Baselines3: no division by zero before the first data

    def update(self, x: np.ndarray) -> None:
        """Fold the rows of ``x`` (shape ``[n, *shape]``) into the statistics."""
        if len(x) == 0:
            return
        batch_mean, batch_var, n = x.mean(axis=0), x.var(axis=0), len(x)
        delta, total = batch_mean - self.mean, self.count + n
        self.mean = self.mean + delta * n / total
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        self.var, self.count = m2 / total, total

    def state_dict(self) -> dict[str, Any]:
        """Mean, variance and count."""
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.mean = np.array(state["mean"], dtype=np.float64)
        self.var = np.array(state["var"], dtype=np.float64)
        self.count = float(state["count"])


def _tensor_obs(obs: Any) -> torch.Tensor:
    """A Box observation batch (the only kind ``ObservationNormalizer`` accepts)."""
    assert isinstance(obs, torch.Tensor), "ObservationNormalizer registers on Box spaces only"
    return obs


def _check_clip(clip: float | None) -> None:
    if clip is not None and not clip > 0:
        raise ValueError(f"clip must be positive or None, got {clip!r}")


class ObservationNormalizer(TrainerHook):
    """Normalise observations to ``(obs - mean) / sqrt(var + epsilon)``, clipped to
    ``[-clip, clip]``, with running statistics of the training observations (updated with
    each new observation the training collector receives, before the policy acts on it).

    The policy always acts on normalised observations. On-policy the training collector's
    ``obs_transform`` normalises them before the buffer stores them too: each rollout is
    learned from once, with the statistics it was collected with. Off-policy the buffer
    keeps the raw observations (the collector's ``act_obs_transform`` normalises only what
    the policy acts on) and each sampled minibatch's ``obs`` and ``obs_next`` are normalised
    with the current statistics (``process_optim_batch``), as Stable-Baselines3's
    ``VecNormalize`` does: a transition replayed long after it was collected is not fed
    with the statistics of its time. The test collector uses the training statistics and
    never updates them. Box observation spaces only; online trainers only.

    A resume, or a Ctrl-C roll-back, restores the statistics first; training envs that do
    not pickle then restart their episodes, and the new first observations update the
    restored statistics once, as the run's first reset did (the run differs from the
    uninterrupted one from there; envs that pickle continue it bit for bit).

    With ``async_collection=True`` the collect step in the worker thread updates a copy of
    the statistics (and its policy acts on observations normalised with that copy, as in
    synchronous collection); the copy becomes :attr:`rms` in the main thread when the
    step's rows land in the buffer
    (:class:`~epochtrain.trainer.async_collection.StagedActObsTransform`). So update k's
    minibatches, like a synchronous run's, are normalised with the statistics of collects
    1..k, never with those the worker is changing, and the run is reproducible given its seed.
    """

    def __init__(self, *, epsilon: float = 1e-8, clip: float | None = 10.0) -> None:
        _check_clip(clip)
        self.epsilon, self.clip = epsilon, clip
        self.rms = RunningMeanStd()
        self.buffer_obs: Literal["normalised", "raw"] = "normalised"
        """What the training buffer holds: ``"raw"`` once registered on an off-policy
        trainer (saved in the state; a resume of another kind is refused)."""
        self._cached: tuple[Any, ...] = ()  # (mean, var, device, (shift, scale)) of the last batch

    def register(self, trainer: BaseTrainer[Any]) -> None:
        """Install the transforms on the training and test collectors; a collector that
        has one already (another ``ObservationNormalizer``'s) is refused."""
        collector = online_collector(trainer, "ObservationNormalizer")
        space = collector.env.single_observation_space
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(f"ObservationNormalizer needs a Box observation space, got {space!r}")
        for label, target in (
            ("train_collector", collector),
            ("test_collector", trainer.test_collector),
        ):
            installed_fn = None if target is None else target.obs_transform
            if target is not None and installed_fn is None:
                installed_fn = target.act_obs_transform
            if installed_fn is not None:
                installed = getattr(installed_fn, "__qualname__", repr(installed_fn))
                raise ValueError(
                    f"ObservationNormalizer: the {label} already has an obs_transform "
                    f"({installed}), which this one would replace and leave unused: register "
                    "one ObservationNormalizer per trainer, and build each trainer's "
                    "collectors anew"
                )
        if self.rms.mean.shape != space.shape:  # statistics loaded before registering stay
            self.rms = RunningMeanStd(tuple(space.shape))
        if trainer.kind == "onpolicy":
            collector.obs_transform = self._train_transform
        else:
            self.buffer_obs = "raw"
            collector.act_obs_transform = self._train_transform
            trainer.register_op("process_optim_batch", self.normalize_batch)
            runner = cast("OffpolicyTrainer[Any]", trainer).async_collection
            if runner is not None:  # the worker's updates land with its rows
                runner.act_obs_staging = _StagedStatistics(self)
        if trainer.test_collector is not None:
            trainer.test_collector.obs_transform = self._test_transform

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` normalised with the current statistics (float32)."""
        return self._normalize_with(self.rms, obs)

    def _normalize_with(self, rms: RunningMeanStd, obs: np.ndarray) -> np.ndarray:
        out = (obs - rms.mean) / np.sqrt(rms.var + self.epsilon)
        if self.clip is not None:
            out = np.clip(out, -self.clip, self.clip)
        return out.astype(np.float32)

    def normalize_batch(self, batch: Batch) -> Batch:
        """``batch`` with ``obs`` and ``obs_next`` normalised with the current statistics:
        :meth:`normalize` of the raw observations, bit for bit, as tensors on their device
        (off-policy ``process_optim_batch``)."""
        shift, scale = self._tensors(_tensor_obs(batch.obs).device)
        low = None if self.clip is None else -self.clip

        def norm(obs: torch.Tensor) -> torch.Tensor:
            out = (obs.double() - shift) / scale  # float64, as normalize(): the same bits
            return (out if low is None else out.clamp(low, self.clip)).float()

        obs_next = batch.obs_next
        return dataclasses.replace(
            batch,
            obs=norm(_tensor_obs(batch.obs)),
            obs_next=None if obs_next is None else norm(_tensor_obs(obs_next)),
        )

    def _tensors(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean and ``sqrt(var + epsilon)`` as float64 tensors on ``device``; made
        again only when the statistics changed (each update makes new arrays)."""
        mean, var = self.rms.mean, self.rms.var
        cached = self._cached
        if cached and cached[0] is mean and cached[1] is var and cached[2] == device:
            pair: tuple[torch.Tensor, torch.Tensor] = cached[3]
            return pair
        pair = (
            torch.as_tensor(mean, dtype=torch.float64, device=device),
            torch.as_tensor(np.sqrt(var + self.epsilon), dtype=torch.float64, device=device),
        )
        self._cached = (mean, var, device, pair)
        return pair

    def _train_transform(self, obs: np.ndarray, update: bool) -> np.ndarray:
        return self._transform_with(self.rms, obs, update)

    def _transform_with(self, rms: RunningMeanStd, obs: np.ndarray, update: bool) -> np.ndarray:
        """``obs`` normalised with ``rms``, which it updates first (``update``)."""
        if update:
            rms.update(np.asarray(obs, dtype=np.float64))
        return self._normalize_with(rms, obs)

    def _test_transform(self, obs: np.ndarray, update: bool) -> np.ndarray:
        return self.normalize(obs)

    def state_dict(self) -> dict[str, Any]:
        """The running statistics, ``epsilon`` and ``clip`` to rebuild the transform, and
        what the training buffer holds (``buffer_obs``)."""
        return {
            "rms": self.rms.state_dict(),
            "epsilon": self.epsilon,
            "clip": self.clip,
            "buffer_obs": self.buffer_obs,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the running statistics and take the saved ``epsilon`` and ``clip`` (how
        ``epochtrain eval`` rebuilds a run's normaliser). A resume never changes them: it
        is refused first when they differ from this hook's (:meth:`resume_settings`).

        Registered on an off-policy trainer (its buffer keeps raw observations), a state
        whose run stored normalised ones (an off-policy run of epochtrain before raw
        storage; no ``buffer_obs``) is refused, changing nothing: its buffer would be
        normalised twice. Load such a state into a hook before registering it to act with
        its statistics only (``epochtrain eval``)."""
        saved = state.get("buffer_obs", "normalised")
        if self.buffer_obs == "raw" and saved != "raw":
            raise ValueError(
                "ObservationNormalizer: the checkpoint's replay buffer holds observations "
                f"normalised when they were collected (buffer_obs={saved!r}: written by an "
                "epochtrain version that stored them so off-policy); this version stores raw "
                "observations and normalises each sampled minibatch, so resuming would "
                "normalise them twice: start a new run (or resume with the version that "
                "wrote the checkpoint); nothing was restored"
            )
        self.rms.load_state_dict(state["rms"])
        self.epsilon = float(state.get("epsilon", self.epsilon))
        self.clip = state.get("clip", self.clip)

    def resume_settings(self) -> dict[str, Any]:
        """``epsilon`` and ``clip``, compared on resume."""
        return constructor_settings(self)

    def reset(self) -> None:
        """Forget the statistics."""
        self.rms = RunningMeanStd(self.rms.mean.shape)


class _StagedStatistics:
    """An ``ObservationNormalizer``'s statistics staged for asynchronous collection
    (:class:`~epochtrain.trainer.async_collection.StagedActObsTransform`): each collect
    step in the worker thread updates its own copy of ``hook.rms``, which becomes
    ``hook.rms`` when the step lands; the main thread never sees a half-made update."""

    def __init__(self, hook: ObservationNormalizer) -> None:
        self.hook = hook
        self.copy: RunningMeanStd | None = None
        """The copy the collect step in flight updates (None when none is)."""

    def fork(self) -> ObsTransform:
        """The worker collector's ``act_obs_transform``: the hook's, on a copy of its
        statistics (an update makes new arrays, so a shallow copy is enough)."""
        rms = copy.copy(self.hook.rms)
        self.copy = rms
        return functools.partial(self.hook._transform_with, rms)

    def land(self, keep: bool) -> None:
        """Take the copy's statistics into ``hook.rms`` (``keep``), or drop them."""
        rms, self.copy = self.copy, None
        if keep and rms is not None:
            own = self.hook.rms
            own.mean, own.var, own.count = rms.mean, rms.var, rms.count


class RewardNormalizer(TrainerHook):
    """Scale rewards by the running standard deviation of the discounted return
    (``rew / sqrt(var(ret) + epsilon)``, clipped to ``[-clip, clip]``); no mean is
    subtracted, so the sign of every reward is kept.

    The statistics update from each collect step's rows (``batch_process``). On-policy
    the rollout is scaled there, before advantages are computed; off-policy the buffer
    keeps raw rewards and each sampled minibatch is scaled with the current statistics
    (``process_optim_batch``). Online trainers only.

    ``returns`` holds each training env's discounted return so far in its current episode;
    it is hook state, so a resume or a Ctrl-C roll-back whose envs continue their episodes
    continues it. Envs that do not pickle restart their episodes then instead, and
    :meth:`episodes_restarted` sets it to zero (the statistics are kept).
    """

    def __init__(
        self, *, gamma: float = 0.99, epsilon: float = 1e-8, clip: float | None = 10.0
    ) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
        _check_clip(clip)
        self.gamma, self.epsilon, self.clip = gamma, epsilon, clip
        self.rms = RunningMeanStd()
        self.returns = np.zeros(0)

    def register(self, trainer: BaseTrainer[Any]) -> None:
        """Update (and on-policy scale) at ``batch_process``; off-policy scale at
        ``process_optim_batch``."""
        collector = online_collector(trainer, "RewardNormalizer")
        self.returns = np.zeros(collector.num_envs)
        if trainer.kind == "onpolicy":
            trainer.register_op("batch_process", self._update_and_scale)
        else:
            trainer.register_op("batch_process", self._update)
            trainer.register_op("process_optim_batch", self.scale)

    def _update(self, batch: Batch) -> Batch:
        rew = batch.rew.double().cpu().numpy()
        done = batch.done.cpu().numpy()
        valid = np.ones_like(done) if batch.valid is None else batch.valid.cpu().numpy()
        seen = []
        for t in range(rew.shape[0]):
            v = valid[t]
            self.returns[v] = self.returns[v] * self.gamma + rew[t, v]
            seen.append(self.returns[v])
            self.returns[v & done[t]] = 0.0
        self.rms.update(np.concatenate(seen))
        return batch

    def _update_and_scale(self, batch: Batch) -> Batch:
        return self.scale(self._update(batch))

    def scale(self, batch: Batch) -> Batch:
        """``batch`` with its rewards scaled by the current statistics."""
        rew = batch.rew / float(np.sqrt(self.rms.var + self.epsilon))
        if self.clip is not None:
            rew = rew.clamp(-self.clip, self.clip)
        return dataclasses.replace(batch, rew=rew)

    def state_dict(self) -> dict[str, Any]:
        """The running statistics and each env's running discounted return."""
        return {"rms": self.rms.state_dict(), "returns": self.returns.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the statistics and running returns."""
        self.rms.load_state_dict(state["rms"])
        self.returns = np.array(state["returns"], dtype=np.float64)

    def resume_settings(self) -> dict[str, Any]:
        """``gamma``, ``epsilon`` and ``clip``, compared on resume."""
        return constructor_settings(self)

    def episodes_restarted(self) -> None:
        """The training envs abandoned their episodes for new ones (a resume or a Ctrl-C
        roll-back of envs that do not pickle, after this hook's state was restored; the
        trainer calls it): their running returns start again from zero."""
        self.returns = np.zeros_like(self.returns)

    def reset(self) -> None:
        """Forget the statistics."""
        self.rms = RunningMeanStd()
        self.returns = np.zeros_like(self.returns)


class BatchSubSampler(TrainerHook):
    """Learn from a random subset of ``batch_size`` transitions of each minibatch
    (``process_optim_batch``; drawn from torch's generator, which the trainer owns)."""

    def __init__(self, batch_size: int) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.batch_size = batch_size

    def register(self, trainer: BaseTrainer[Any]) -> None:
        """Sub-sample at ``process_optim_batch``."""
        trainer.register_op("process_optim_batch", self._subsample)

    def _subsample(self, batch: Batch) -> Batch:
        n = len(batch)
        if n <= self.batch_size:
            return batch
        index = torch.randperm(n, device=batch.rew.device)[: self.batch_size]
        return batch[index]

    def resume_settings(self) -> dict[str, Any]:
        """``batch_size``, compared on resume."""
        return constructor_settings(self)
