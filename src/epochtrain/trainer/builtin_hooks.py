"""Built-in trainer hooks: logging, target networks, learning rates, gradients, stopping.

Each is a :class:`~epochtrain.trainer.hooks.TrainerHook`: pass it in ``hooks=[...]``;
its state (running statistics, counters, schedulers) is saved in checkpoints, and the
constructor arguments of those that change what is computed (all but the logging ones
and ``ClearCudaCache``) are compared on resume (``resume_settings``).
``docs/hooks.md`` has an example of each.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from epochtrain.data.batch import Batch
from epochtrain.nets import SoftUpdate
from epochtrain.stats import CollectStats, TrainingStats
from epochtrain.trainer.hook_settings import constructor_settings
from epochtrain.trainer.hooks import TrainerHook, online_collector

if TYPE_CHECKING:
    from epochtrain.trainer.base import BaseTrainer

__all__ = [
    "ClearCudaCache",
    "EarlyStopping",
    "GradClip",
    "LRScheduler",
    "LogScalar",
    "TargetNetUpdater",
    "UTDRatio",
]

_REDUCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "mean": torch.mean,
    "sum": torch.sum,
    "min": torch.min,
    "max": torch.max,
    "std": lambda t: t.std(correction=0),
}


def _positive(name: str, value: object, kind: type = int) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    if not ok or (kind is int and not isinstance(value, int)):
        raise ValueError(f"{name} must be a positive {kind.__name__}, got {value!r}")


class LogScalar(TrainerHook):
    """Log a reduction (``mean``, ``sum``, ``min``, ``max``, ``std``) of a collected-batch
    field, e.g. the mean per-step reward, as ``train/<key>_<reduction>``.

    ``point`` is ``"pre_steps_log"`` (default) or ``"post_steps_log"``; ``log_pbar``
    also shows the value in the progress bar. Rows without a transition are left out.
    """

    def __init__(
        self,
        key: str = "rew",
        reduction: str = "mean",
        *,
        point: str = "pre_steps_log",
        log_pbar: bool = False,
    ) -> None:
        fields = {f.name for f in dataclasses.fields(Batch)}
        if key not in fields:
            raise ValueError(f"key must be a Batch field ({sorted(fields)}), got {key!r}")
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {sorted(_REDUCTIONS)}, got {reduction!r}")
        if point not in ("pre_steps_log", "post_steps_log"):
            raise ValueError(f"point must be 'pre_steps_log' or 'post_steps_log', got {point!r}")
        self.key, self.reduction, self.point, self.log_pbar = key, reduction, point, log_pbar

    def register(self, trainer: BaseTrainer[Any]) -> None:
        """Log at ``self.point`` (online trainers only)."""
        online_collector(trainer, "LogScalar")
        trainer.register_op(self.point, self._log)

    def _log(self, batch: Batch) -> dict[str, Any]:
        value = getattr(batch, self.key)
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"LogScalar: the batch field {self.key!r} is not a tensor ({value!r})")
        if batch.valid is not None:
            value = value[batch.valid]
        reduced = float(_REDUCTIONS[self.reduction](value.double())) if value.numel() else math.nan
        return {f"{self.key}_{self.reduction}": reduced, "log_pbar": self.log_pbar}


class TargetNetUpdater(TrainerHook):
    """Update the policy's target networks (``policy.target_pairs()``) after gradient steps.

    ``tau=None``: hard update (copy) every ``period`` gradient steps; ``tau`` in (0, 1]:
    Polyak update ``target <- (1 - tau) * target + tau * online`` every ``period`` steps.
    """

    def __init__(self, *, tau: float | None = None, period: int = 1) -> None:
        if tau is not None and not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1] or None (hard updates), got {tau!r}")
        _positive("period", period)
        self.tau, self.period = tau, period
        self.n_steps = 0
        self._pairs: list[tuple[nn.Module, nn.Module]] = []
        self._soft_update: SoftUpdate | None = None

    def register(self, trainer: BaseTrainer[Any]) -> None:
        """Update after every gradient step (``post_optim``)."""
        self._pairs = trainer.policy.target_pairs()
        if not self._pairs:
            raise ValueError(
                f"TargetNetUpdater: {type(trainer.policy).__name__}.target_pairs() is empty; "
                "the policy has no target networks to update"
            )
        self._soft_update = SoftUpdate(self._pairs)  # the parameters listed once
        trainer.register_op("post_optim", self._step)

    def _step(self) -> None:
        self.n_steps += 1
        if self.n_steps % self.period:
            return
        if self.tau is not None:
            assert self._soft_update is not None  # built in register()
            self._soft_update(self.tau)
            return
        for online, target in self._pairs:
            target.load_state_dict(online.state_dict())

    def state_dict(self) -> dict[str, Any]:
        """Gradient steps seen (drives the period)."""
        return {"n_steps": self.n_steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the step count."""
        self.n_steps = int(state["n_steps"])

    def reset(self) -> None:
        """Start counting again."""
        self.n_steps = 0

    def resume_settings(self) -> dict[str, Any]:
        """``tau`` and ``period``, compared on resume."""
        return constructor_settings(self)


class LRScheduler(TrainerHook):
    """Drive a ``torch.optim.lr_scheduler`` on the policy's optimizers.

    ``make_scheduler(optimizer)`` builds one scheduler per optimizer (``optimizer``: the
    name of one, ``None``: all); it steps after every gradient step (``every="gradient_step"``)
    or every epoch (``every="epoch"``). Schedulers are saved in checkpoints. Do not combine
    with a policy that sets its own learning rate (``lr_anneal_steps`` of PG, A2C, PPO and DQN).
    """

    def __init__(
        self,
        make_scheduler: Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler],
        *,
        optimizer: str | None = None,
        every: str = "gradient_step",
    ) -> None:
        if not callable(make_scheduler):
            raise TypeError(f"make_scheduler must be callable, got {make_scheduler!r}")
        if every not in ("gradient_step", "epoch"):
            raise ValueError(f"every must be 'gradient_step' or 'epoch', got {every!r}")
        self.make_scheduler, self.optimizer, self.every = make_scheduler, optimizer, every
        self.schedulers: dict[str, torch.optim.lr_scheduler.LRScheduler] = {}

    def register(self, trainer: BaseTrainer[Any]) -> None:
        """Build the schedulers and step them at ``post_optim`` or ``epoch_end``."""
        optimizers = trainer.policy.optimizers
        if self.optimizer is not None and self.optimizer not in optimizers:
            raise ValueError(
                f"optimizer must name one of the policy's optimizers {sorted(optimizers)}, "
                f"got {self.optimizer!r}"
            )
        names = [self.optimizer] if self.optimizer is not None else list(optimizers)
        self.schedulers = {name: self.make_scheduler(optimizers[name]) for name in names}
        point = "post_optim" if self.every == "gradient_step" else "epoch_end"
        trainer.register_op(point, self._step)

    def _step(self, *_: Any) -> None:
        for scheduler in self.schedulers.values():
            scheduler.step()

    def state_dict(self) -> dict[str, Any]:
        """Each scheduler's state."""
        return {name: s.state_dict() for name, s in self.schedulers.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore each scheduler."""
        for name, scheduler in self.schedulers.items():
            scheduler.load_state_dict(state[name])

    def resume_settings(self) -> dict[str, Any]:
        """``every`` and, per scheduled optimizer (so ``optimizer=None`` on a policy with
        one optimizer equals naming it), the scheduler's class and the constructor arguments
        it keeps (``step_size``, ``gamma``, ...; not its position ``last_epoch``), compared
        on resume: a scheduler's ``load_state_dict`` would otherwise silently bring back
        the saved ones."""
        schedulers = {
            name: {
                "type": type(scheduler).__qualname__,
                **constructor_settings(scheduler, exclude=("last_epoch", "verbose")),
            }
            for name, scheduler in self.schedulers.items()
        }
        return {"every": self.every, "schedulers": schedulers}


class GradClip(TrainerHook):
    """Clip gradients before every optimizer step: by total norm (``max_norm``) or
    element-wise by value (``max_value``); exactly one of them."""

    def __init__(
        self,
        *,
        max_norm: float | None = None,
        max_value: float | None = None,
        norm_type: float = 2.0,
    ) -> None:
        if (max_norm is None) == (max_value is None):
            raise ValueError(
                f"give exactly one of max_norm and max_value, got max_norm={max_norm!r}, "
                f"max_value={max_value!r}"
            )
        for name, value in (("max_norm", max_norm), ("max_value", max_value)):
            if value is not None:
                _positive(name, value, float)
        self.max_norm, self.max_value, self.norm_type = max_norm, max_value, norm_type

    def register(self, trainer: BaseTrainer[Any]) -> None:
        """Run at the ``optimizer`` point (``Policy.optimizer_hooks``)."""
        trainer.register_op("optimizer", self._clip)

    def _clip(self, name: str, optimizer: torch.optim.Optimizer) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if self.max_norm is not None:
            nn.utils.clip_grad_norm_(params, self.max_norm, norm_type=self.norm_type)
        else:
            assert self.max_value is not None
            nn.utils.clip_grad_value_(params, self.max_value)

    def resume_settings(self) -> dict[str, Any]:
        """``max_norm``, ``max_value`` and ``norm_type``, compared on resume."""
        return constructor_settings(self)


class EarlyStopping(TrainerHook):
    """Stop the run when the test return stops improving, or when a loss is not finite.

    After each test step: an improvement is a mean test return above the best so far by
    more than ``min_delta``; without one for ``patience`` env steps (gradient steps for
    the offline trainer) the run stops with ``stop_reason="early_stopping"``.
    ``patience=None`` disables that check. With ``check_finite``, a NaN or infinite loss
    stops the run at once with ``stop_reason="non_finite_loss"``.
    """

    def __init__(
        self, *, patience: int | None = None, min_delta: float = 0.0, check_finite: bool = True
    ) -> None:
        if patience is not None:
            _positive("patience", patience)
        if not min_delta >= 0:
            raise ValueError(f"min_delta must be >= 0, got {min_delta!r}")
        if patience is None and not check_finite:
            raise ValueError("EarlyStopping with patience=None and check_finite=False does nothing")
        self.patience, self.min_delta, self.check_finite = patience, min_delta, check_finite
        self._trainer: BaseTrainer[Any] | None = None
        self.reset()

    def reset(self) -> None:
        """Forget the best return."""
        self.best = -math.inf
        self.best_step = 0

    def register(self, trainer: BaseTrainer[Any]) -> None:
        """Watch ``test_end`` (patience) and ``post_loss`` (finite losses)."""
        if self.patience is not None:
            if trainer.test_collector is None:
                raise ValueError(
                    "EarlyStopping(patience=...) needs a trainer with a test_collector"
                )
            trainer.register_op("test_end", self._on_test)
        if self.check_finite:
            trainer.register_op("post_loss", self._on_loss)
        self._trainer = trainer

    def _progress(self, trainer: BaseTrainer[Any]) -> int:
        state = trainer.state
        return state.gradient_step if trainer.kind == "offline" else state.env_step

    def _on_test(self, stat: CollectStats) -> None:
        trainer = self._trainer
        assert trainer is not None and stat.returns_stat is not None and self.patience is not None
        now = self._progress(trainer)
        if stat.returns_stat.mean > self.best + self.min_delta:
            self.best, self.best_step = stat.returns_stat.mean, now
        elif now - self.best_step >= self.patience:
            trainer.request_stop("early_stopping")

    def _on_loss(self, stats: TrainingStats) -> None:
        assert self._trainer is not None
        if not all(math.isfinite(v) for v in stats.loss_stats().values()):
            self._trainer.request_stop("non_finite_loss")

    def state_dict(self) -> dict[str, Any]:
        """Best return and the step it was reached at."""
        return {"best": self.best, "best_step": self.best_step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the best record."""
        self.best, self.best_step = float(state["best"]), int(state["best_step"])

    def resume_settings(self) -> dict[str, Any]:
        """``patience``, ``min_delta`` and ``check_finite``, compared on resume."""
        return constructor_settings(self)


class UTDRatio(TrainerHook):
    """Log the update-to-data ratio ``train/utd_ratio``: transitions learned from (summed
    over gradient steps) per env step collected, after every update step."""

    def __init__(self, *, log_pbar: bool = False) -> None:
        self.log_pbar = log_pbar
        self.samples = 0
        self._trainer: BaseTrainer[Any] | None = None

    def register(self, trainer: BaseTrainer[Any]) -> None:
        """Count minibatch sizes (``process_optim_batch``), log at ``post_steps_log``."""
        online_collector(trainer, "UTDRatio")
        self._trainer = trainer
        trainer.register_op("process_optim_batch", self._count)
        trainer.register_op("post_steps_log", self._log)

    def _count(self, batch: Batch) -> Batch:
        self.samples += len(batch)
        return batch

    def _log(self, batch: Batch) -> dict[str, Any]:
        assert self._trainer is not None
        env_step = max(self._trainer.state.env_step, 1)
        return {"utd_ratio": self.samples / env_step, "log_pbar": self.log_pbar}

    def state_dict(self) -> dict[str, Any]:
        """Transitions learned from so far."""
        return {"samples": self.samples}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the count."""
        self.samples = int(state["samples"])

    def reset(self) -> None:
        """Start counting again."""
        self.samples = 0


class ClearCudaCache(TrainerHook):
    """Release PyTorch's cached CUDA memory every ``interval`` update steps (before the
    gradient steps); does nothing without CUDA."""

    def __init__(self, interval: int = 1) -> None:
        _positive("interval", interval)
        self.interval = interval
        self.count = 0

    def register(self, trainer: BaseTrainer[Any]) -> None:
        """Run at ``pre_optim_steps``."""
        trainer.register_op("pre_optim_steps", self._maybe_clear)

    def _maybe_clear(self) -> None:
        self.count += 1
        if self.count % self.interval == 0 and torch.cuda.is_available():
            torch.cuda.empty_cache()

    def state_dict(self) -> dict[str, Any]:
        """Update steps seen."""
        return {"count": self.count}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the count."""
        self.count = int(state["count"])
