"""Policy: the abstract interface every algorithm implements for the trainers.

A policy acts (``act``), prepares a collected rollout for learning (``process_rollout``:
returns, advantages, targets) and takes one gradient step per ``learn`` call, returning
its own typed :class:`~epochtrain.stats.TrainingStats`. Its optimizers belong to it and
travel in its ``state_dict`` (through ``get_extra_state``).
"""

from __future__ import annotations

import copy
import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, ParamSpec, TypeVar

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from epochtrain.config import Config
from epochtrain.config_ignored import keeps_ignored, refuse_ignored
from epochtrain.data.batch import ActResult, Batch, Obs
from epochtrain.errors import NonFiniteError
from epochtrain.nets import SoftUpdate, check_has_elements, clip_grad_norm, is_uint8_pixels
from epochtrain.stats import TTrainingStats

if TYPE_CHECKING:
    from epochtrain.data.buffer import ReplayBuffer

__all__ = [
    "TRAINER_KINDS",
    "ActResult",
    "NStepReplay",
    "ObsEncoding",
    "OptimizerHook",
    "Policy",
    "TrainerKind",
    "anneal_lr",
    "bootstrap_discount",
    "categorical_sample",
    "n_step_sample",
    "normal_like",
    "resolve_config",
    "row_means",
    "size_groups",
]

TrainerKind = Literal["onpolicy", "offpolicy", "offline"]
"""How a trainer feeds a policy: fresh rollouts, replay samples, or a fixed dataset."""

TRAINER_KINDS: tuple[TrainerKind, ...] = ("onpolicy", "offpolicy", "offline")

ObsEncoding = Literal["as_is", "one_hot", "pixels"]
"""How :meth:`Policy.obs_input` hands observations to the networks, chosen once from the
observation space: ``"one_hot"`` for a ``Discrete(n, start=k)`` (``n`` inputs),
``"pixels"`` for a uint8 Box over ``[0, 255]`` (:func:`~epochtrain.nets.is_uint8_pixels`:
uint8 values divided by 255), ``"as_is"`` for any other Box."""

TConfig = TypeVar("TConfig", bound=Config)
P = ParamSpec("P")


def resolve_config(
    config_cls: type[TConfig], config: TConfig | None, overrides: Mapping[str, object]
) -> TConfig:
    """``config`` (default: ``config_cls()``) with the keyword ``overrides`` applied.

    So ``PPO(obs_space, act_space, PPOConfig(lr=3e-4))`` and ``PPO(obs_space, act_space,
    lr=3e-4)`` build the same policy; a misspelt keyword is a ``TypeError`` naming it.
    """
    if config is None:
        return config_cls.from_dict(overrides)
    if type(config) is not config_cls:
        raise TypeError(
            f"config must be a {config_cls.__name__}, got {type(config).__name__}: build it "
            f"with {config_cls.__name__}(...) or pass the settings as keywords"
        )
    return config.replace(**overrides) if overrides else config


OptimizerHook = Callable[[str, torch.optim.Optimizer], None]
"""``hook(optimizer_name, optimizer)``: runs after ``backward`` and before ``step``."""


def n_step_sample(batch: Batch, buffer: ReplayBuffer, n_step: int, gamma: float) -> Batch:
    """``batch`` as ``n_step``-step transitions (:meth:`ReplayBuffer.n_step_batch`), or as
    is when ``n_step == 1`` or it carries ``discount`` already (sampled as n-step
    transitions: :meth:`Policy.sample_batch`): the ``process_sample`` of every policy with
    an ``n_step``."""
    if n_step == 1 or batch.discount is not None:
        return batch
    return buffer.n_step_batch(batch, n_step, gamma)


def anneal_lr(
    optimizers: Mapping[str, torch.optim.Optimizer], lr: float, env_step: int, steps: int | None
) -> None:
    """Set every optimizer's learning rate to ``lr`` decayed linearly to 0 over ``steps``
    env steps (``lr_anneal_steps``; None: leave it as it is)."""
    if steps is None:
        return
    now = lr * max(0.0, 1.0 - env_step / steps)
    for opt in optimizers.values():
        for group in opt.param_groups:
            group["lr"] = now


class NStepReplay:
    """Mixin of the policies that learn from ``n_step`` transitions of a replay buffer
    (DQN, SAC, DDPG/TD3 and their offline kin; listed before :class:`Policy` among the
    bases): minibatches are sampled as such, and a batch from ``get`` is turned into them.
    The policy sets ``n_step`` and ``gamma``."""

    n_step: int
    gamma: float

    def replay_n_step(self) -> tuple[int, float]:
        """``(n_step, gamma)``: :meth:`Policy.sample_batch` draws ``n_step`` transitions."""
        return self.n_step, self.gamma

    def process_sample(self, batch: Batch, buffer: ReplayBuffer) -> Batch:
        """``batch`` as ``n_step`` transitions (as is when ``n_step=1`` or already so)."""
        return n_step_sample(batch, buffer, self.n_step, self.gamma)


def size_groups(sizes: Iterable[int]) -> list[list[int]]:
    """Positions of ``sizes`` grouped by equal size, first seen first: the records of
    :class:`~epochtrain.stats.DeferredReads` whose tensors stack into one batch."""
    groups: dict[int, list[int]] = {}
    for i, size in enumerate(sizes):
        groups.setdefault(size, []).append(i)
    return list(groups.values())


def row_means(tensors: list[Tensor]) -> list[list[float]]:
    """``[[mean], ...]``, one per 1-d tensor (a ``DeferredReads`` compute): one stack and
    one mean per size, read back together."""
    values = [0.0] * len(tensors)
    with torch.no_grad():
        for members in size_groups(t.shape[0] for t in tensors):
            means = torch.stack([tensors[i] for i in members]).mean(dim=1).tolist()
            for i, mean in zip(members, means, strict=True):
                values[i] = mean
    return [[v] for v in values]


def normal_like(like: Tensor, generator: torch.Generator | None) -> Tensor:
    """``N(0, 1)`` draws shaped as ``like``, from ``generator`` (the default one when None).

    The same numbers as ``torch.randn(like.shape, generator=generator)``, at about half
    its cost per call on the CPU (``randn_like``'s path when no generator is set), which
    counts when acting one env step at a time.
    """
    if generator is None:
        return torch.randn_like(like)
    return torch.empty_like(like).normal_(generator=generator)


def categorical_sample(logits: Tensor, generator: torch.Generator | None) -> Tensor:
    """One index per row of ``logits`` ``[batch, n]``, drawn with the probabilities
    ``softmax(logits)``, from ``generator`` (the default one when None).

    Gumbel-max: ``argmax(logits + G)`` with ``G = -log E``, ``E ~ Exp(1)``, follows the
    softmax distribution exactly (Gumbel 1954; Maddison et al. 2014), and costs about a
    third of ``torch.multinomial(logits.softmax(-1), 1)`` per call on the CPU, which counts
    when acting one env step at a time. The draws are those of ``torch.multinomial`` from
    the same generator state (for one sample it takes ``argmax(p / E)``, the same
    exponentials). Masked actions (logit ``-inf``) are never drawn.
    """
    log_e = torch.empty_like(logits).exponential_(generator=generator).log_()
    return (logits - log_e).argmax(dim=-1)


def bootstrap_discount(batch: Batch, gamma: float, like: Tensor) -> Tensor:
    """The factor on the bootstrap value of ``obs_next``, in ``like``'s dtype.

    ``batch.discount`` when set (n-step: ``gamma**m``, 0 after a termination), else
    ``gamma * (1 - terminated)``: only termination cuts the bootstrap; a truncated
    transition still bootstraps from its true final observation.
    """
    if batch.discount is None:
        return gamma * (~batch.terminated).to(like.dtype)
    return batch.discount.to(like.dtype)


_WITHOUT_GRAD = "_epochtrain_without_grad"
"""Marks an ``act`` that :func:`_without_grad` wrapped (so it is wrapped once)."""


def _without_grad(act: Callable[P, ActResult]) -> Callable[P, ActResult]:
    """``act`` run under ``torch.no_grad()``: its actions and extras track no gradient and
    no autograd graph is built. :class:`Policy` wraps every subclass's own ``act`` so.

    Where grad is off already (the collector acts under ``torch.inference_mode()``) it
    only checks that: one C call per step.
    """

    @functools.wraps(act)
    def act_without_grad(*args: P.args, **kwargs: P.kwargs) -> ActResult:
        if not torch.is_grad_enabled():
            return act(*args, **kwargs)
        with torch.no_grad():
            return act(*args, **kwargs)

    act_without_grad.__dict__[_WITHOUT_GRAD] = True
    return act_without_grad


def _trainable(opt: torch.optim.Optimizer) -> list[Tensor]:
    """The parameters of ``opt`` that require a gradient."""
    return [p for group in opt.param_groups for p in group["params"] if p.requires_grad]


def _check_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device``; ValueError if it is malformed or not available."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(
            f"device must be a torch device such as 'cpu' or 'cuda:0', got {device!r}"
        ) from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available here: use device='cpu'")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={device!r} but MPS is not available here: use device='cpu'")
    if dev.type == "meta":
        raise ValueError(f"device={device!r} holds shapes, not values: use device='cpu'")
    try:
        torch.zeros(1, device=dev)
    except (RuntimeError, NotImplementedError) as exc:
        raise ValueError(f"device={device!r} is not usable here ({exc}): use device='cpu'") from exc
    return dev


class Policy(nn.Module, Generic[TTrainingStats], ABC):
    """Abstract policy, generic in the training statistics its ``learn`` returns.

    Subclasses create their networks and fill ``self.optimizers`` (name to optimizer) in
    ``__init__``; everything else in this base is shared machinery. ``config`` holds the
    algorithm's settings (a frozen :class:`~epochtrain.config.Config`); ``trainer_kinds``
    declares which trainers can feed the policy, checked when a trainer is built.
    """

    trainer_kinds: ClassVar[frozenset[TrainerKind]] = frozenset(TRAINER_KINDS)
    """The trainer kinds this policy learns under (default: all)."""
    bounded_actions: ClassVar[bool] = False
    """True when ``act`` keeps Box actions inside the bounds by construction (a tanh scaled
    to them), so the collector need not clip them (:mod:`epochtrain.data.actions`)."""

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: Config | None = None,
        *,
        device: str | torch.device = "cpu",
    ) -> None:
        check_has_elements(observation_space, "observation_space")
        check_has_elements(action_space, "action_space")
        if config is not None and not keeps_ignored():  # a spec judged them already
            refuse_ignored(config.ignored_for(action_space), f"{type(config).__name__}.")
        super().__init__()
        self.config = config if config is not None else Config()
        """The algorithm's settings (read-only)."""
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = _check_device(device)
        self.exploration: float | None = None
        """The user's explicit exploration setting (DQN: epsilon; DDPG/TD3: noise scale),
        which wins over the config's schedule while it is not ``None``; set it in
        ``train_fn``/``test_fn`` (it holds for that phase) and set ``None`` to hand control
        back to the schedule. Policies without a tunable exploration ignore it."""
        self.act_generator: torch.Generator | None = None
        """Where :meth:`act`'s exploration draws its random numbers (``None``: the global
        torch generator). An asynchronous collector's actor copy gets its own, so acting
        in a thread never draws from the stream the learner uses."""
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.optimizer_hooks: list[OptimizerHook] = []
        """Called by :meth:`optimize` between ``backward`` and ``step`` (e.g. GradClip)."""
        self.skip_nonfinite = False
        """True: :meth:`optimize` skips a step whose loss or gradient norm is NaN or inf
        (counted in :attr:`skipped_steps`); False: it raises ``NonFiniteError``. The
        trainer sets it from ``on_nonfinite``."""
        self.skipped_steps = 0
        """Optimizer steps skipped for a non-finite loss or gradient norm."""
        self._soft_update: SoftUpdate | None = None
        # decided once: obs_input runs on every act and learn, and a float Box pays one compare
        self._obs_encoding: ObsEncoding = (
            "pixels" if is_uint8_pixels(observation_space) else "as_is"
        )
        self._obs_start = self._obs_n = 0
        if isinstance(observation_space, gym.spaces.Discrete):
            self._obs_encoding = "one_hot"
            self._obs_start, self._obs_n = int(observation_space.start), int(observation_space.n)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Wrap the ``act`` a subclass defines in :func:`_without_grad`, so that every
        policy's ``act`` runs without grad, called by a collector or by a user."""
        super().__init_subclass__(**kwargs)
        act = cls.__dict__.get("act")
        if callable(act) and not getattr(act, _WITHOUT_GRAD, False):
            type.__setattr__(cls, "act", _without_grad(act))

    @abstractmethod
    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        """Actions (and extras to store) for a batch of observations.

        Runs without grad (under ``torch.no_grad()``, which this base adds to every
        subclass's ``act``): the tensors returned track no gradient.
        """

    def process_rollout(self, batch: Batch) -> Batch:
        """Add learning targets to a ``[time, env]`` rollout; the default changes nothing."""
        return batch

    @abstractmethod
    def learn(self, batch: Batch) -> TTrainingStats:
        """One gradient step on ``batch``; returns the stats of that step."""

    def set_progress(self, env_step: int) -> None:
        """Tell the policy how many env steps have been collected (drives schedules)."""

    def replay_n_step(self) -> tuple[int, float]:
        """``(n_step, gamma)`` of the transitions :meth:`sample_batch` draws; default
        ``(1, 0.99)``: one-step transitions (``gamma`` unused)."""
        return 1, 0.99

    def sample_batch(self, buffer: ReplayBuffer, batch_size: int) -> Batch:
        """The minibatch of one gradient step, as the off-policy and offline trainers draw it.

        ``batch_size`` transitions sampled from ``buffer`` (as :meth:`replay_n_step`
        transitions: an n-step policy gets them in one gather per field, not a sample and
        then :meth:`ReplayBuffer.n_step_batch`), then :meth:`process_sample`.
        """
        n_step, gamma = self.replay_n_step()
        if n_step == 1:  # a buffer subclass's sample(batch_size) works as before
            return self.process_sample(buffer.sample(batch_size), buffer)
        return self.process_sample(buffer.sample(batch_size, n_step=n_step, gamma=gamma), buffer)

    def process_sample(self, batch: Batch, buffer: ReplayBuffer) -> Batch:
        """Prepare a minibatch sampled from ``buffer`` (e.g. n-step targets); default: as is.

        ``batch.index`` holds the flat buffer indices of the sampled transitions.
        """
        return batch

    def post_learn(self, batch: Batch, buffer: ReplayBuffer) -> None:
        """Called after each :meth:`learn` on a sampled minibatch (e.g. priority updates)."""

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """``(online, target)`` network pairs, for target updates by hooks; default none."""
        return []

    def soft_update_targets(self, tau: float) -> None:
        """Polyak update of every :meth:`target_pairs` pair with rate ``tau``.

        The parameter lists are built on the first call and again whenever a pair's
        network object changed (:class:`~epochtrain.nets.SoftUpdate`).
        """
        pairs = self.target_pairs()
        if self._soft_update is None or not self._soft_update.serves(pairs):
            self._soft_update = SoftUpdate(pairs)
        self._soft_update(tau)

    def optimize(
        self,
        name: str,
        loss: Tensor,
        *,
        max_grad_norm: float | None = None,
        params: Iterable[nn.Parameter] | None = None,
        isolated: bool = False,
    ) -> float:
        """One optimizer step of ``self.optimizers[name]`` on ``loss``; returns the loss as
        a Python float (read back once, here: the stats reuse it).

        ``zero_grad`` → ``backward`` → optional clipping of the gradient norm of ``params``
        (default: the optimizer's parameters) to ``max_grad_norm`` → the
        :attr:`optimizer_hooks` → ``step``. Every algorithm steps through here, so hooks
        see every optimizer step.

        Only this optimizer's parameters get gradients: a loss through other networks (an
        actor's through the critics) computes none for theirs. ``isolated=True`` declares
        that ``loss`` reaches no other trainable parameter (a critic's TD loss), so a plain
        ``backward`` gives the same gradients without autograd first working out which
        ones are wanted (about 15 microseconds a step on a small network).

        A NaN or inf loss (or clipped gradient norm) never reaches the weights: the step
        is skipped (:attr:`skip_nonfinite`) or ``NonFiniteError`` naming ``name`` is raised
        before ``step``. The check reads back the loss (and the clipped norm) as Python
        floats, as the stats' ``loss.item()`` already does; no parameter is scanned.
        """
        opt = self.optimizers[name]
        opt.zero_grad(set_to_none=True)
        if isolated:
            if loss.requires_grad:  # else all frozen (fine-tuning other parts): no step
                torch.autograd.backward(loss)
        else:
            own = _trainable(opt)
            if own:  # all frozen: the step changes nothing
                torch.autograd.backward(loss, inputs=own)
        # one scalar read back each (``loss`` is a scalar: backward needs one); a Python
        # check costs a microsecond where tensor isfinite/and/bool cost about forty
        loss_value = loss.item()
        finite = math.isfinite(loss_value)
        if max_grad_norm is not None:
            norm = clip_grad_norm(_trainable(opt) if params is None else params, max_grad_norm)
            finite = math.isfinite(norm) and finite
        if not finite:
            opt.zero_grad(set_to_none=True)
            if self.skip_nonfinite:
                self.skipped_steps += 1
                return loss_value
            what = "loss" if not math.isfinite(loss_value) else "gradient norm"
            raise NonFiniteError(
                f"the {what} of optimizer {name!r} of {type(self).__name__} is "
                f"{loss_value if what == 'loss' else 'NaN or inf'}; the step was not applied",
                where=f"{what} {name!r}",
            )
        for hook in self.optimizer_hooks:
            try:
                hook(name, opt)
            except Exception as exc:
                hook_name = getattr(hook, "__qualname__", repr(hook))
                exc.add_note(
                    f"epochtrain: raised by hook op {hook_name} at hook point 'optimizer' "
                    f"(optimizer {name!r} of {type(self).__name__})"
                )
                raise
        opt.step()
        return loss_value

    def get_extra_state(self) -> dict[str, Any]:
        """Optimizer states and the user's exploration setting, so ``state_dict`` carries them."""
        return {
            "optimizers": {k: v.state_dict() for k, v in self.optimizers.items()},
            "exploration": self.exploration,
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore the optimizer states saved by :meth:`get_extra_state`."""
        saved = state["optimizers"]
        if set(saved) != set(self.optimizers):
            raise ValueError(
                f"state_dict holds optimizers {sorted(saved)}, this policy has "
                f"{sorted(self.optimizers)}: load a state_dict of the same algorithm"
            )
        for name, opt_state in saved.items():
            # a copy: torch keeps the given tensors, and two live policies must not share them
            self.optimizers[name].load_state_dict(copy.deepcopy(opt_state))
        self.exploration = state.get("exploration")

    @property
    def obs_encoding(self) -> ObsEncoding:
        """How :meth:`obs_input` encodes this policy's observations (:data:`ObsEncoding`)."""
        return self._obs_encoding

    def obs_input(self, obs: Obs) -> Tensor:
        """``obs`` as the flat networks take it (the buffer keeps the env's values), as
        Stable-Baselines3's ``preprocess_obs`` does: a ``Discrete(n, start=k)`` observation
        one-hot encoded (float32, ``[..., n]``: ``obs - k`` is the hot index), a uint8 Box
        over ``[0, 255]`` divided by 255 (float32 in ``[0, 1]``), any other Box as is.

        A pixel policy scales uint8 tensors only: observations an ``ObservationNormalizer``
        made float32 are normalised already and pass as they are. A Discrete observation
        outside the space is a ``ValueError``.
        """
        # flat_dim rejected dict observation spaces in the built-in policies' constructors
        assert isinstance(obs, Tensor)
        encoding = self._obs_encoding
        if encoding == "as_is":
            return obs
        if encoding == "pixels":
            return obs.to(torch.float32).div_(255.0) if obs.dtype == torch.uint8 else obs
        return self._one_hot(obs)

    def _one_hot(self, obs: Tensor) -> Tensor:
        """``obs`` of a ``Discrete(n, start=k)`` as one-hot float32 rows ``[..., n]``."""
        index = obs.long()
        if self._obs_start:
            index = index - self._obs_start
        try:
            return F.one_hot(index, self._obs_n).to(torch.float32)
        except RuntimeError as exc:  # an index below 0 or from n on
            bad = sorted(set(obs[(index < 0) | (index >= self._obs_n)].tolist()))[:5]
            raise ValueError(
                f"observations {bad} lie outside the policy's observation_space "
                f"{self.observation_space!r} (one-hot encoded, values {self._obs_start} .. "
                f"{self._obs_start + self._obs_n - 1}): give the policy observations of that "
                "space, or build it from the env's observation space"
            ) from exc

    def state_mismatch_note(self, own: torch.Size, saved: torch.Size) -> str | None:
        """Why a saved tensor shaped ``saved`` does not fit this policy's tensor shaped
        ``own``, when the reason is that this epochtrain one-hot encodes a ``Discrete(n)``
        observation (``n`` inputs) where the version that saved it fed its index (one
        input); None otherwise. Checkpoint loading adds it to its error."""
        n = self._obs_n
        if n < 2 or len(own) != len(saved):
            return None
        differ = [i for i, (a, b) in enumerate(zip(own, saved, strict=True)) if a != b]
        if len(differ) != 1 or own[differ[0]] - saved[differ[0]] != n - 1:
            return None
        return (
            f"saved by an older epochtrain, which fed the {self.observation_space!r} "
            f"observation to the networks as one number: a Discrete observation is now "
            f"one-hot encoded ({n} inputs), so these weights cannot be loaded; load them "
            "with the epochtrain version that wrote them, or train the policy anew"
        )

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        """Name the one-hot change (:meth:`state_mismatch_note`) beside torch's size errors."""
        if self._obs_n >= 2:
            for name, tensor in self.named_parameters():
                saved = state_dict.get(prefix + name)
                if isinstance(saved, Tensor) and saved.shape != tensor.shape:
                    note = self.state_mismatch_note(tensor.shape, saved.shape)
                    if note is not None:
                        error_msgs.append(f"{prefix + name!r}: {note}")
                        break
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def to_tensor(self, obs: Obs) -> Obs:
        """Observations moved to the policy's device as float tensors where needed."""
        if isinstance(obs, Tensor):
            return obs if obs.device == self.device else obs.to(self.device)
        return {k: self.to_tensor(v) for k, v in obs.items()}
