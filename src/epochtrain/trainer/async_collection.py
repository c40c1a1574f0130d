"""Asynchronous collection: the off-policy trainer's next collect step runs in a worker
thread while the current update step's gradient steps run (``async_collection=True``).

This module holds :class:`AsyncCollection`, the machinery for one trainer: the actor copy,
the shadow collector, the worker thread and the grace period of a stop. The rows and
statistics a collect step stages are in :mod:`epochtrain.trainer.async_staging`; the training
step that drives it and the trainer-state entry of the actor's stream are in
:mod:`epochtrain.trainer.async_training`. Every public name of both is re-exported here.

Contract (``docs/async-collection.md``), for an epoch of N collect steps:

* Collect 1 runs first, in the main thread. At training step k the buffer holds the data
  of collects 1..k; the actor copy receives the learner's weights (those after update
  k-1), collect k+1 starts in the worker thread on it, update k's gradient steps run in
  the main thread on the buffer (data up to collect k), then the thread is joined and
  collect k+1's rows are added to the buffer, counted, logged and checked (``on_nonfinite``,
  env errors, ``test_in_train``) in the main thread; the actor copy's actions are checked
  in the worker before the env gets them, as in synchronous collection (weights the
  learner left non-finite stop the run naming the weight, not the env). The last training
  step of an epoch starts no collect: nothing is in flight between epochs, so tests,
  checkpoints and resumes work as in synchronous training.
* Every training collect acts with the actor copy (a copy of the policy without
  optimizers, acting in inference mode) whose exploration draws from its own generator
  (``Policy.act_generator``), seeded from the run's seed and saved in checkpoints; the
  learner keeps the trainer's torch stream. Runs are reproducible given their seed; they
  differ from synchronous runs of the same settings (weights one update step older, another
  random stream for exploration).
* The worker never writes to the replay buffer the learner samples from: it records the
  rows its collect writes (:class:`StagedRows`) and the main thread adds them in time
  order, so n-step returns, episode ends and new priorities are those of synchronous
  collection. Statistics the policy's observations update as they arrive (an
  ``ObservationNormalizer``'s) are staged the same way (:class:`StagedActObsTransform`):
  the worker updates a copy, which lands with the rows; until then the learner's
  minibatches are normalised with the statistics of collects 1..k.

Python envs hold the GIL while they step; torch releases it inside its kernels, so the
overlap is partial (``train/overlap_time`` logs it per collect step).

A collect step still running when the grace period of a stop ends (an env that hangs in
``step``) is given up (:meth:`AsyncCollection.stop`): env processes (``AsyncVectorEnv``)
then take no further call and are ended when the envs close, which frees the thread; a
thread hung in an in-process env cannot be freed, and the trainer refuses to collect again
while it is (``RuntimeError``).
"""

from __future__ import annotations

import copy
import pickle
import queue
import random
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from epochtrain.algorithms.base import Policy
from epochtrain.data.batch import Obs
from epochtrain.data.collector import Collector
from epochtrain.stats import CollectStats
from epochtrain.trainer.async_staging import StagedActObsTransform, StagedRows
from epochtrain.trainer.async_training import (
    async_training_step,
    check_async_state,
    initial_actor_rng_state,
    load_async_state,
    save_async_state,
)

__all__ = [
    "AsyncCollection",
    "StagedActObsTransform",
    "StagedRows",
    "async_training_step",
    "check_async_state",
    "initial_actor_rng_state",
    "load_async_state",
    "save_async_state",
]

_GRACE_SECONDS = 10.0
"""Ctrl-C (or SIGTERM) while a collect step is in flight: how long it may still finish, counted
once from the interrupt over the whole stop (join, stop, thread end); a hung env is then left
to the daemon worker thread, which does not keep the process alive."""


@dataclass
class _Outcome:
    """What a collect step in the worker produced: its stats or its exception."""

    stat: CollectStats | None
    error: BaseException | None
    start: float
    end: float


def _serve(jobs: queue.SimpleQueue[Callable[[], None] | None]) -> None:
    """The worker thread: run jobs until ``None`` arrives (holds no worker reference)."""
    while True:
        job = jobs.get()
        if job is None:
            return
        job()
        del job  # nothing of a finished job stays alive while the thread waits


def _as_tensor(obs: Any) -> Obs:
    if isinstance(obs, dict):
        return {k: _as_tensor(v) for k, v in obs.items()}
    return torch.as_tensor(np.asarray(obs))


def _global_streams(
    device: torch.device,
) -> tuple[tuple[Any, ...], dict[str, Any], Tensor, Tensor | None]:
    """The states of python's, numpy's and torch's global generators (and CUDA's)."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return random.getstate(), np.random.get_state(legacy=False), torch.get_rng_state(), cuda


def _check_act_uses_generator(actor: Policy[Any]) -> None:
    """Act once on a sampled batch; raise if that drew from a global random stream.

    Acting in the worker thread must not draw from the streams the learner uses (the runs
    would not be reproducible), so ``act`` must draw from ``actor.act_generator``.
    """
    space = copy.deepcopy(gym.vector.utils.batch_space(actor.observation_space, 2))
    space.seed(0)  # a copy: the policy's own space and its random state are untouched
    obs = actor.to_tensor(_as_tensor(space.sample()))
    before = _global_streams(actor.device)
    try:
        with torch.inference_mode():
            actor.act(obs, False)
        after = _global_streams(actor.device)
    except Exception as exc:
        raise ValueError(
            f"async_collection=True acts once with {type(actor).__name__} on a sample of its "
            f"observation space to check where act draws its random numbers, and act raised "
            f"{type(exc).__name__}: {exc}; set async_collection=False for this policy"
        ) from exc
    finally:
        random.setstate(before[0])
        np.random.set_state(before[1])
        torch.set_rng_state(before[2])
        if before[3] is not None:
            torch.cuda.set_rng_state(before[3], actor.device)
    torch_drew = not all(
        x is y or (x is not None and y is not None and torch.equal(x, y))
        for x, y in zip(after[2:], before[2:], strict=True)
    )
    numpy_drew = pickle.dumps(after[1]) != pickle.dumps(before[1])
    if torch_drew or numpy_drew or after[0] != before[0]:
        raise ValueError(
            f"async_collection=True needs a policy whose act draws its exploration from "
            f"policy.act_generator, but {type(actor).__name__}.act drew from a global random "
            "stream (torch, numpy or python), which the learner uses at the same time: pass "
            "generator=self.act_generator to its torch.rand/randn/multinomial calls, or set "
            "async_collection=False"
        )


class AsyncCollection:
    """The machinery of asynchronous collection for one trainer.

    ``actor``: a copy of ``policy`` without optimizers or optimizer hooks and without
    gradients, with its own ``act_generator``; ``shadow``: a collector over the training
    envs that acts with it and writes to :class:`StagedRows` (and acts on observations
    mapped by the training collector's ``act_obs_transform``, or by the fork of
    :attr:`act_obs_staging`); one daemon worker thread.
    Built when the trainer is, before any work; the checks raise ``ValueError``.
    """

    def __init__(self, policy: Policy[Any], collector: Collector) -> None:
        memo: dict[int, Any] = {id(policy.optimizers): {}, id(policy.optimizer_hooks): []}
        self.actor: Policy[Any] = copy.deepcopy(policy, memo)
        self.actor.requires_grad_(False)
        self.generator = torch.Generator(device=policy.device)
        self.actor.act_generator = self.generator
        _check_act_uses_generator(self.actor)
        targets = {id(t) for _, target in policy.target_pairs() for t in _tensors(target)}
        own = dict(_named_tensors(policy))
        names = [name for name, t in own.items() if id(t) not in targets]
        copies = dict(_named_tensors(self.actor))
        self._src = [own[name] for name in names]
        self._dst = [copies[name] for name in names]
        self.staged = StagedRows(collector.num_envs)
        self.shadow = Collector(
            self.actor, collector.env, self.staged, exploration=collector.exploration
        )
        self._collector = collector
        self.act_obs_staging: StagedActObsTransform | None = None
        """Set by a hook whose ``act_obs_transform`` keeps state (``ObservationNormalizer``):
        the shadow collector then acts with its :meth:`~StagedActObsTransform.fork`, landed
        with the rows; otherwise it uses the training collector's ``act_obs_transform``."""
        self._forked = False  # a fork of act_obs_staging awaits its land
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._hung: threading.Thread | None = None  # given up by stop(), still in its job
        self._done = threading.Event()
        self._outcome: _Outcome | None = None
        self._deadline: float | None = None  # time.monotonic() when waiting for it ends

    def start(
        self,
        policy: Policy[Any],
        collector: Collector,
        *,
        env_step: int,
        rng_state: Tensor,
        n_step: int | None,
        n_episode: int | None,
        background: bool,
    ) -> None:
        """Sync the actor copy with ``policy`` (weights, exploration, progress ``env_step``)
        and the shadow collector with ``collector``'s episodes, then run one collect step:
        in the worker thread (``background``) or now in this thread. ``EnvError`` for envs
        given up at a stop before, ``RuntimeError`` while the collect step given up then
        still runs (:meth:`stop`)."""
        with torch.no_grad():
            torch._foreach_copy_(self._dst, self._src)
        actor = self.actor
        actor.exploration = policy.exploration
        actor.set_progress(env_step)
        if actor.training != policy.training:
            actor.train(policy.training)
        self.generator.set_state(rng_state)
        self.shadow.obs_transform = collector.obs_transform
        self.shadow.load_state_dict(collector.state_dict())
        self._refuse_if_hung()
        staging = self.act_obs_staging  # forked last: nothing below raises before the job
        self._forked = staging is not None
        self.shadow.act_obs_transform = (
            collector.act_obs_transform if staging is None else staging.fork()
        )
        self.staged.staged.clear()
        self._done.clear()
        self._outcome = None
        self._deadline = None

        def job() -> None:
            start = time.perf_counter()
            try:
                stat = self.shadow.collect(n_step, n_episode)
            except BaseException as exc:  # handed to the main thread at join
                self._outcome = _Outcome(None, exc, start, time.perf_counter())
            else:
                self._outcome = _Outcome(stat, None, start, time.perf_counter())
            finally:
                self._done.set()

        if not background:
            job()
            return
        if self._thread is None:
            self._jobs = queue.SimpleQueue()  # its own: a given-up thread keeps the old one
            weakref.finalize(self, self._jobs.put, None)  # the thread ends with this object
            self._thread = threading.Thread(
                target=_serve, args=(self._jobs,), name="epochtrain-collect", daemon=True
            )
            self._thread.start()
        self._jobs.put(job)

    def _refuse_if_hung(self) -> None:
        """Raise ``RuntimeError`` while a collect step :meth:`stop` gave up still runs."""
        if self._hung is None:
            return
        if not self._done.is_set():
            raise RuntimeError(
                "this trainer's asynchronous-collection worker thread is still hung in the "
                f"collect step it gave up {_GRACE_SECONDS:g} s after the run was stopped "
                "(Ctrl-C or SIGTERM): an env's step() that does not return; this trainer "
                "cannot collect any more (a thread cannot be stopped; it is a daemon thread, "
                "so it does not keep the process alive): build a new trainer that resumes "
                "from the last checkpoint, in a new process if the env holds a lock"
            )
        self._hung = None  # it returned at last; its thread ends (stop() told it to)

    def join(self) -> _Outcome:
        """Wait for the collect step started last; its stats or exception. Ctrl-C while
        waiting gives it what is left of the grace period (:meth:`wait_grace`), then is
        raised."""
        try:
            # in slices: Python runs signal handlers in this thread only, and a SIGINT the
            # kernel gave another thread (the collect thread) or that came just before this
            # one blocked did not wake it: the Ctrl-C waited for the collect step to end
            while not self._done.wait(0.1):
                pass
        except KeyboardInterrupt:
            # the trainer rolls its envs back next: let the collect in flight finish first
            self.wait_grace()
            raise
        assert self._outcome is not None
        return self._outcome

    def wait_grace(self) -> bool:
        """Wait for the collect step in flight, at most until the grace period ends; True
        when it has finished. The period (``_GRACE_SECONDS``) starts at the first call after
        :meth:`start`, so the waits of one stop add up to it, not to a multiple of it; a
        second Ctrl-C while waiting ends it at once (and is raised)."""
        if self._deadline is None:
            self._deadline = time.monotonic() + _GRACE_SECONDS
        try:
            return self._done.wait(timeout=max(0.0, self._deadline - time.monotonic()))
        except KeyboardInterrupt:
            self._deadline = time.monotonic()
            raise

    def stop(self) -> None:
        """Let a collect step in flight finish, within the grace period
        (:meth:`wait_grace`), then end the worker thread. A collect still running then (a
        hung env) is given up: it is left to the daemon thread, and the training envs, if
        in processes, take no further call (``Collector.give_up``: closing them ends their
        processes, which frees the thread); :meth:`start` refuses while it runs. Safe to
        call more than once; a later :meth:`start` starts a new thread."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        try:
            self.wait_grace()
        finally:  # a second Ctrl-C too: the thread ends once its job does
            self._jobs.put(None)
            if not self._done.is_set():
                self._give_up(thread)
        assert self._deadline is not None
        thread.join(timeout=max(0.0, self._deadline - time.monotonic()))

    def _give_up(self, thread: threading.Thread) -> None:
        """The collect step ``thread`` runs is given up (see :meth:`stop`)."""
        self._hung = thread
        reason = (
            "a step() of theirs was given up, still running in the asynchronous-collection "
            f"worker thread {_GRACE_SECONDS:g} s after the run was stopped (Ctrl-C or "
            "SIGTERM): an env that hangs"
        )
        for collector in (self._collector, self.shadow):
            collector.give_up(reason)

    def land(self, collector: Collector, *, keep_rows: bool = True) -> None:
        """Add the staged rows to ``collector.buffer`` (``keep_rows``), land the staged
        ``act_obs_transform`` state with them (:attr:`act_obs_staging`, kept or dropped as
        the rows are) and hand the in-flight episodes back to ``collector`` (main thread,
        after :meth:`join`)."""
        if keep_rows:
            assert collector.buffer is not None
            self.staged.replay_into(collector.buffer)
            collector.last_collect_rows = self.shadow.last_collect_rows
        self.staged.staged.clear()
        if self._forked and self.act_obs_staging is not None:
            self.act_obs_staging.land(keep_rows)
        self._forked = False
        collector.load_state_dict(self.shadow.state_dict())
        if self.shadow.given_up is not None:  # a step cut short by Ctrl-C in this thread
            collector.give_up(self.shadow.given_up)


def _named_tensors(module: torch.nn.Module) -> list[tuple[str, Tensor]]:
    return [*module.named_parameters(), *module.named_buffers()]


def _tensors(module: torch.nn.Module) -> list[Tensor]:
    return [t for _, t in _named_tensors(module)]
