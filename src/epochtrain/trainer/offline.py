"""OfflineTrainer: learn from a fixed buffer; no training envs.

A training step is one gradient step on a minibatch of ``batch_size`` sampled from
``buffer``; ``step_per_epoch`` therefore counts gradient steps here. The dataset is not
saved in checkpoints; its fingerprint is (:meth:`OfflineTrainer.dataset_record`), so a
resume onto other data is refused.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable
from typing import Any, ClassVar

import gymnasium as gym
import torch

from epochtrain.algorithms.base import Policy, TrainerKind
from epochtrain.algorithms.bc import BC
from epochtrain.data.buffer import ReplayBuffer
from epochtrain.data.collector import Collector
from epochtrain.dataset import dataset_fingerprint
from epochtrain.stats import CollectStats, TTrainingStats
from epochtrain.trainer.base import BaseTrainer
from epochtrain.trainer.checks import check_priority_updates
from epochtrain.trainer.hooks import call_callback
from epochtrain.trainer.params import OfflineParams, TrainerParams

__all__ = ["OfflineTrainer", "check_dataset_spaces", "check_dataset_values", "dataset_batch_note"]


def check_dataset_values(policy: Policy[Any], buffer: ReplayBuffer) -> None:
    """Refuse a dataset holding NaN or inf in a float field the policy learns from
    (``ValueError`` naming the file, the field and the first such transition): it would
    surface only later, as a NaN loss. A field the policy does not read (BC reads only
    ``obs`` and ``act``, not ``rew`` nor ``obs_next``) gets a warning instead: the run is
    sound, but the dataset is not. One vectorised pass per field
    (:meth:`ReplayBuffer.nonfinite_fields`), once, when the trainer is built."""
    name = "the dataset (buffer=)" if buffer.source is None else f"the dataset {buffer.source!r}"
    _refuse_complex(buffer, name)
    found = buffer.nonfinite_fields()
    if not found:
        return
    algo = type(policy).__name__
    # BC fits actions to observations: it reads no reward, no next observation, no flag
    read = [f for f in found if not isinstance(policy, BC) or f.split(".")[0] in ("obs", "act")]
    where = ", ".join(
        f"{f!r} (first at transition {_position(buffer, i)})" for f, i in found.items()
    )
    if read:
        raise ValueError(
            f"{name} holds NaN or inf in {where}: {algo} reads {_words(read, 'and')} and "
            "would learn NaN. Replace or drop those transitions and save the buffer again "
            "(ReplayBuffer.load, edit its state_dict(), load_state_dict, save), or record the "
            "dataset again (`epochtrain collect`)"
        )
    warnings.warn(
        f"{name} holds NaN or inf in {where}: {algo} does not read {_words(found, 'or')}, "
        "so it learns as usual; an algorithm that does (CQL, TD3+BC) refuses this dataset",
        stacklevel=4,
    )


def dataset_batch_note(batch_size: int, buffer: ReplayBuffer) -> str | None:
    """What to say when ``batch_size`` exceeds the dataset's valid transitions, else None:
    minibatches are drawn with replacement, so each then holds every transition several
    times, and a gradient step costs that many passes over the data for nothing more. A
    warning, not an error, as the on-policy :func:`~epochtrain.trainer.checks.minibatch_size_note`:
    the run is sound, and a sweep over datasets may cross the line in a few runs."""
    n = buffer.n_valid
    if batch_size <= n:
        return None
    name = "the dataset (buffer=)" if buffer.source is None else f"the dataset {buffer.source!r}"
    times = f"{batch_size / n:.0f}" if batch_size >= 2 * n else f"{batch_size / n:.1f}"
    return (
        f"batch_size={batch_size:,} is larger than {name} of {n:,} transitions: each "
        f"minibatch samples every transition about {times} times (with replacement), so a "
        f"gradient step costs {times} times one on the whole dataset and learns nothing more. "
        f"Lower batch_size to at most {n:,}"
    )


def _refuse_complex(buffer: ReplayBuffer, name: str) -> None:
    """Refuse complex numbers in any field: a loss of them fails (or, cast, drops the
    imaginary part) deep inside torch, naming neither the dataset nor the field."""
    first = buffer.get(torch.zeros(1, dtype=torch.long))
    for field in ("obs", "act", "rew", "obs_next"):
        value = getattr(first, field)
        leaves = value.items() if isinstance(value, dict) else [("", value)]
        for key, leaf in leaves:
            if isinstance(leaf, torch.Tensor) and leaf.is_complex():
                label = f"{field}.{key}" if key else field
                raise ValueError(
                    f"{name}'s field {label!r} holds complex numbers ({leaf.dtype}): "
                    "rewards, observations and actions must be real; store the real values "
                    f"(ReplayBuffer.load, state_dict()['storage'][{field!r}].real, "
                    "load_state_dict, save) or record the dataset again (`epochtrain collect`)"
                )


def _words(fields: Iterable[str], conjunction: str) -> str:
    return f" {conjunction} ".join(repr(f) for f in fields)


def _position(buffer: ReplayBuffer, flat_index: int) -> str:
    """A flat transition index in words (its row and env when there are several envs)."""
    if buffer.num_envs == 1:
        return str(flat_index)
    row, env = divmod(flat_index, buffer.num_envs)
    return f"{flat_index} (row {row}, env {env})"


def check_dataset_spaces(policy: Policy[Any], buffer: ReplayBuffer) -> None:
    """The dataset's observations and actions must fit the policy's spaces: shapes (and
    dict vs array observations) from one transition, then the observations (Discrete only:
    ``obs`` and ``obs_next`` integers in range, refused) and the actions of every valid
    transition in one vectorised pass each (Discrete: integers in range, refused; Box:
    outside the bounds, a warning)."""
    first = buffer.get(torch.zeros(1, dtype=torch.long))
    obs_space, act_space = policy.observation_space, policy.action_space
    name = "the dataset" if buffer.source is None else f"the dataset {buffer.source!r}"
    if isinstance(first.obs, dict) != isinstance(obs_space, gym.spaces.Dict):
        kind = "a dict" if isinstance(first.obs, dict) else "an array"
        raise ValueError(
            f"{name} holds {kind} observation per transition, the policy's observation "
            f"space is {obs_space}: use a dataset recorded on the policy's env"
        )
    if isinstance(first.obs, torch.Tensor) and obs_space.shape is not None:
        shape = tuple(first.obs.shape[1:])
        if shape != tuple(obs_space.shape):
            raise ValueError(
                f"the observations of {name} have shape {shape}, the policy's observation "
                f"space is {obs_space}: use a dataset recorded on the policy's env"
            )
    if isinstance(obs_space, gym.spaces.Discrete):
        _check_discrete_obs(buffer, obs_space, name)
    if isinstance(act_space, gym.spaces.Discrete):
        expected: tuple[int, ...] = ()
    else:
        expected = tuple(act_space.shape or ())
    shape = tuple(first.act.shape[1:])
    if shape != expected:
        raise ValueError(
            f"the actions of {name} have shape {shape}, the policy's action space is "
            f"{act_space}: use a dataset recorded on the policy's env"
        )
    if isinstance(act_space, gym.spaces.Discrete):
        _check_discrete_actions(buffer.valid_values("act"), act_space, name)
    elif isinstance(act_space, gym.spaces.Box):
        _warn_box_actions(buffer.valid_values("act"), act_space, name)


def _check_discrete_actions(act: torch.Tensor, space: gym.spaces.Discrete, name: str) -> None:
    low, high = 0, int(space.n)  # buffers hold the policy's index (data.actions), not start+i
    bad = (act < low) | (act >= high)
    if act.is_floating_point():
        bad |= act != act.round()  # a fraction, a nan (nan != nan) or an inf
    n_bad = int(bad.sum())
    if n_bad:
        values = ", ".join(f"{v:.4g}" for v in torch.unique(act[bad])[:5].tolist())
        raise ValueError(
            f"{name} holds {n_bad} of {act.numel()} actions that are not integers in "
            f"[{low}, {high}) (e.g. {values}), the policy's action space is {space}: use a "
            "dataset recorded on the policy's env, or map its actions into the space"
        )


def _check_discrete_obs(buffer: ReplayBuffer, space: gym.spaces.Discrete, name: str) -> None:
    """Refuse observations (``obs``, ``obs_next``) that are not the env's values of
    ``space`` (``start .. start+n-1``): the policy's one-hot encoding would fail on the
    first minibatch that holds one, mid-run."""
    rollout = buffer.rollout()
    low, high = int(space.start), int(space.start) + int(space.n)
    for field in ("obs", "obs_next"):
        values = getattr(rollout, field)
        bad = (values < low) | (values >= high)
        if values.is_floating_point():
            bad |= values != values.round()  # a fraction, a nan or an inf
        if rollout.valid is not None:
            bad &= rollout.valid
        where = bad.reshape(-1).nonzero()
        if len(where):
            seen = ", ".join(f"{v:.4g}" for v in torch.unique(values[bad])[:5].tolist())
            raise ValueError(
                f"{name} holds {len(where)} {field} values that are not integers in "
                f"[{low}, {high}) (e.g. {seen}; first at transition "
                f"{_position(buffer, int(where[0, 0]))}), the policy's observation space is "
                f"{space}: use a dataset recorded on the policy's env, or drop those "
                "transitions and save the buffer again"
            )


def _warn_box_actions(act: torch.Tensor, space: gym.spaces.Box, name: str) -> None:
    low = torch.as_tensor(space.low, dtype=act.dtype if act.is_floating_point() else None)
    high = torch.as_tensor(space.high, dtype=low.dtype)
    outside = ((act < low) | (act > high)).flatten(1).any(dim=1)
    n_outside = int(outside.sum())
    if n_outside:
        seen = act[outside]
        warnings.warn(
            f"{name} holds {n_outside} of {len(act)} actions outside the policy's action "
            f"space {space} (they range over [{float(seen.min()):.3g}, "
            f"{float(seen.max()):.3g}]): they are learnt as they are; clip them to the "
            "bounds if they should not be",
            stacklevel=3,
        )


class OfflineTrainer(BaseTrainer[TTrainingStats]):
    """Trainer for offline algorithms (BC, TD3+BC, CQL) on a fixed dataset ``buffer``;
    ``params``: :class:`OfflineParams`.

    The dataset is an input, not part of the run's state: checkpoints do not hold it, so
    resume with the same ``buffer`` (its content: a checkpoint records its fingerprint,
    and a resume onto other data is refused; the file may have moved). A
    :class:`~epochtrain.data.PrioritizedReplayBuffer` dataset needs a policy that updates
    its priorities (CQL, TD3+BC; not BC), as for the off-policy trainer.
    """

    kind: ClassVar[TrainerKind] = "offline"
    params: OfflineParams
    params_cls: ClassVar[type[TrainerParams]] = OfflineParams
    buffer: ReplayBuffer

    def _attach(self, train_collector: Collector | None, buffer: ReplayBuffer | None) -> None:
        if train_collector is not None:
            raise TypeError(
                "OfflineTrainer takes no train_collector: it learns from buffer= (a filled "
                "ReplayBuffer); for training on envs use OffpolicyTrainer"
            )
        if not isinstance(buffer, ReplayBuffer):
            raise TypeError(
                f"buffer must be a filled ReplayBuffer (the dataset), got "
                f"{type(buffer).__name__}: load one with ReplayBuffer.load(path)"
            )
        if buffer.n_valid == 0:
            raise ValueError(
                "buffer is empty: fill it (e.g. ReplayBuffer.load(path)) before offline training"
            )
        check_priority_updates(self.policy, buffer, param="buffer")
        note = dataset_batch_note(self.params.batch_size, buffer)
        if note is not None:  # at the line that builds the trainer (or calls make_trainer)
            warnings.warn(note, UserWarning, stacklevel=3)
        self.buffer = buffer
        self._dataset_sha256: tuple[ReplayBuffer, str] | None = None  # at the first save/load

    def _check_spaces(self) -> None:
        super()._check_spaces()
        check_dataset_values(self.policy, self.buffer)  # first: NaN actions pass range checks
        check_dataset_spaces(self.policy, self.buffer)

    def dataset_record(self) -> dict[str, Any]:
        """What a checkpoint records about the dataset: ``sha256``, the fingerprint of its
        transitions (:func:`~epochtrain.dataset.dataset_fingerprint`, computed once),
        ``transitions`` (the valid ones) and ``path`` (the spec's ``dataset``, or ``None``
        for a buffer passed in)."""
        if self._dataset_sha256 is None or self._dataset_sha256[0] is not self.buffer:
            self._dataset_sha256 = (self.buffer, dataset_fingerprint(self.buffer))
        path = None if self.spec is None else self.spec.get("dataset")
        sha256 = self._dataset_sha256[1]
        return {"sha256": sha256, "transitions": self.buffer.n_valid, "path": path}

    def _buffer_kind(self) -> str | None:
        return type(self.buffer).__name__

    def _training_step(self) -> int:
        if self.train_fn is not None:
            call_callback("train_fn", self.train_fn, self.state.epoch, self.state.env_step)
        self._ops.call("pre_optim_steps")
        self.policy_update_fn(None)
        self._ops.call("post_steps")
        return 1

    def policy_update_fn(self, collect_stats: CollectStats | None) -> TTrainingStats | None:
        """One gradient step on a sampled minibatch."""
        start = time.perf_counter()
        self._learn_sampled(self.buffer, self.params.batch_size)
        return self._finish_update(time.perf_counter() - start)
