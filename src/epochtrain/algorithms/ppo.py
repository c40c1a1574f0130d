"""PPO: proximal policy optimisation with the clipped surrogate objective and GAE.

Papers: Schulman et al. 2017, "Proximal Policy Optimization Algorithms"
(arXiv:1707.06347) for the clipped objective; Schulman et al. 2016, "High-Dimensional
Continuous Control Using Generalized Advantage Estimation" (ICLR) for the advantages.
Implementation details follow Stable-Baselines3 and Huang et al. 2022, "The 37
Implementation Details of PPO": separate actor and critic MLPs with orthogonal init,
per-minibatch advantage normalisation, gradient-norm clipping, Adam with eps 1e-5.

Data flow: the collector calls :meth:`PPO.act` (stores ``logp``), the on-policy trainer
hands the whole ``[time, env]`` rollout to :meth:`PPO.process_rollout` (values, GAE
advantages, returns), then calls :meth:`PPO.learn` on shuffled minibatches.
Discrete actions use a categorical policy; Box actions a Gaussian with a
state-independent log-std (actions are not clipped: wrap the env with
``gymnasium.wrappers.ClipAction``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from epochtrain.algorithms.base import Policy
from epochtrain.data.batch import ActResult, Batch, Obs
from epochtrain.nets import MLP, flat_dim
from epochtrain.stats import SequenceSummaryStats, TrainingStats

__all__ = ["PPO", "PPOTrainingStats"]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(kw_only=True)
class PPOTrainingStats(TrainingStats):
    """Stats of PPO gradient steps.

    ``loss_actor`` is the clipped surrogate loss, ``loss_critic`` the value MSE,
    ``loss_entropy`` minus the mean entropy, ``loss`` their weighted sum; ``approx_kl``
    estimates KL(old || new), ``clip_fraction`` is the share of clipped ratios.
    """

    loss: SequenceSummaryStats
    loss_actor: SequenceSummaryStats
    loss_critic: SequenceSummaryStats
    loss_entropy: SequenceSummaryStats
    approx_kl: SequenceSummaryStats
    clip_fraction: SequenceSummaryStats
    explained_variance: SequenceSummaryStats
    entropy: SequenceSummaryStats


def _tensor(obs: Obs) -> Tensor:
    # flat_dim rejected dict observation spaces in the constructor
    assert isinstance(obs, Tensor)
    return obs


class PPO(Policy[PPOTrainingStats]):
    """Clipped PPO with GAE for Discrete or Box action spaces.

    ``lr_anneal_steps`` / ``clip_anneal_steps`` (env steps, or ``None`` for constant)
    decay the learning rate and clip range linearly to zero, driven by
    :meth:`set_progress` as in rl-baselines3-zoo's ``lin_`` schedules.
    """

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        *,
        lr: float = 1e-3,
        gamma: float = 0.98,
        gae_lambda: float = 0.8,
        clip_range: float = 0.2,
        vf_coef: float = 0.5,
        ent_coef: float = 0.0,
        max_grad_norm: float | None = 0.5,
        normalize_advantage: bool = True,
        hidden: Sequence[int] = (64, 64),
        lr_anneal_steps: int | None = 100_000,
        clip_anneal_steps: int | None = 100_000,
        log_std_init: float = 0.0,
        device: str | torch.device = "cpu",
    ) -> None:
        discrete = isinstance(action_space, gym.spaces.Discrete)
        if isinstance(action_space, gym.spaces.Discrete):
            act_dim = int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            act_dim = int(action_space.shape[0])
        else:
            raise ValueError(
                "action_space must be gymnasium.spaces.Discrete or a 1-d gymnasium.spaces.Box "
                f"for PPO, got {action_space!r}"
            )
        for name, value in (("lr", lr), ("clip_range", clip_range)):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        for name, value in (("gamma", gamma), ("gae_lambda", gae_lambda)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        anneal = {"lr_anneal_steps": lr_anneal_steps, "clip_anneal_steps": clip_anneal_steps}
        for name, steps in anneal.items():
            if steps is not None and steps <= 0:
                raise ValueError(f"{name} must be a positive int or None, got {steps!r}")
        if max_grad_norm is not None and max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be positive or None, got {max_grad_norm!r}")
        super().__init__(observation_space, action_space, device=device)
        self.discrete = discrete
        self.lr, self.clip_range = lr, clip_range
        self.clip_range_now = clip_range
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.vf_coef, self.ent_coef = vf_coef, ent_coef
        self.max_grad_norm = max_grad_norm
        self.normalize_advantage = normalize_advantage
        self.lr_anneal_steps, self.clip_anneal_steps = lr_anneal_steps, clip_anneal_steps
        obs_dim = flat_dim(observation_space)
        self.actor = MLP(obs_dim, act_dim, hidden, nn.Tanh, out_gain=0.01)
        self.critic = MLP(obs_dim, 1, hidden, nn.Tanh, out_gain=1.0)
        # unused (and frozen) for discrete actions, so every PPO has the same state keys
        log_std = torch.full((act_dim,), log_std_init)
        self.log_std = nn.Parameter(log_std, requires_grad=not discrete)
        self.to(self.device)
        params = [p for p in self.parameters() if p.requires_grad]
        self.optimizers["ppo"] = torch.optim.Adam(params, lr=lr, eps=1e-5, fused=True)

    # ------------------------------------------------------------------ acting
    def set_progress(self, env_step: int) -> None:
        """Anneal the learning rate and clip range for ``env_step`` collected steps."""
        if self.lr_anneal_steps is not None:
            lr = self.lr * max(0.0, 1.0 - env_step / self.lr_anneal_steps)
            for group in self.optimizers["ppo"].param_groups:
                group["lr"] = lr
        if self.clip_anneal_steps is not None:
            frac = max(0.0, 1.0 - env_step / self.clip_anneal_steps)
            self.clip_range_now = self.clip_range * frac

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        """Sampled (or most likely) actions and their log-probability ``logp``."""
        out = self.actor(_tensor(obs))
        if self.discrete:
            logp_all = out.log_softmax(dim=-1)
            if deterministic:
                actions = out.argmax(dim=-1)
            else:
                actions = torch.multinomial(logp_all.exp(), 1).squeeze(-1)
            logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
            return actions, {"logp": logp}
        if deterministic:
            return out, {"logp": self._gaussian_logp(out, out)}
        actions = out + self.log_std.exp() * torch.randn_like(out)
        return actions, {"logp": self._gaussian_logp(out, actions)}

    def _gaussian_logp(self, mean: Tensor, actions: Tensor) -> Tensor:
        z = (actions - mean) * torch.exp(-self.log_std)
        return (-0.5 * z.pow(2) - self.log_std - _LOG_SQRT_2PI).sum(dim=-1)

    def log_prob_entropy(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Log-probability of ``actions`` and entropy of the current policy at ``obs``."""
        out = self.actor(obs)
        if self.discrete:
            logp_all = out.log_softmax(dim=-1)
            logp = logp_all.gather(-1, actions.long().reshape(-1, 1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(dim=-1)
            return logp, entropy
        entropy = (0.5 + _LOG_SQRT_2PI + self.log_std).sum().expand(out.shape[0])
        return self._gaussian_logp(out, actions), entropy

    # ---------------------------------------------------------------- learning
    @torch.no_grad()
    def process_rollout(self, batch: Batch) -> Batch:
        """Fill ``value``, GAE advantages ``adv`` and returns ``ret = adv + value``.

        ``delta_t = r_t + gamma * V(obs_next_t) * (1 - terminated_t) - V(obs_t)`` and
        ``adv_t = delta_t + gamma * lambda * (1 - done_t) * adv_{t+1}``: termination cuts
        the bootstrap, truncation bootstraps from the true final ``obs_next``, and any
        episode end stops the recursion. The last row bootstraps from its ``obs_next``.
        """
        batch = batch.to(self.device)
        n_time, n_env = batch.shape
        obs = _tensor(batch.obs)
        obs_next = _tensor(batch.obs_next)
        both = torch.cat([obs, obs_next]).reshape(2 * n_time * n_env, *obs.shape[2:])
        values = self.critic(both).reshape(2, n_time, n_env)
        value, value_next = values[0], values[1]
        not_terminated = (~batch.terminated).to(value.dtype)
        not_done = (~batch.done).to(value.dtype)
        delta = batch.rew + self.gamma * value_next * not_terminated - value
        decay = self.gamma * self.gae_lambda * not_done
        adv = torch.empty_like(delta)
        last = torch.zeros(n_env, dtype=delta.dtype, device=delta.device)
        for t in range(n_time - 1, -1, -1):
            last = delta[t] + decay[t] * last
            adv[t] = last
        return dataclasses.replace(batch, value=value, adv=adv, ret=adv + value)

    def learn(self, batch: Batch) -> PPOTrainingStats:
        """One gradient step of the clipped PPO loss on a minibatch."""
        batch = batch.to(self.device)
        adv, ret, old_logp = batch.adv, batch.ret, batch.logp
        assert adv is not None and ret is not None and old_logp is not None, (
            "PPO.learn needs a batch with logp that went through process_rollout"
        )
        obs = _tensor(batch.obs)
        if self.normalize_advantage and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        logp, entropy = self.log_prob_entropy(obs, batch.act)
        log_ratio = logp - old_logp
        ratio = log_ratio.exp()
        clip = self.clip_range_now
        surrogate = torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv)
        loss_actor = -surrogate.mean()
        value = self.critic(obs).squeeze(-1)
        loss_critic = F.mse_loss(value, ret)
        loss_entropy = -entropy.mean()
        loss = loss_actor + self.vf_coef * loss_critic + self.ent_coef * loss_entropy
        self.optimize("ppo", loss, max_grad_norm=self.max_grad_norm)
        with torch.no_grad():
            approx_kl = ((ratio - 1.0) - log_ratio).mean()
            clip_fraction = ((ratio - 1.0).abs() > clip).float().mean()
            ret_var = float(ret.var(correction=0))
            residual_var = float((ret - value).var(correction=0))
            explained = 1.0 - residual_var / ret_var if ret_var > 0 else float("nan")
        single = SequenceSummaryStats.single
        return PPOTrainingStats(
            loss=single(loss.item()),
            loss_actor=single(loss_actor.item()),
            loss_critic=single(loss_critic.item()),
            loss_entropy=single(loss_entropy.item()),
            approx_kl=single(approx_kl.item()),
            clip_fraction=single(clip_fraction.item()),
            explained_variance=single(explained),
            entropy=single(-loss_entropy.item()),
        )

    # ------------------------------------------------------------- persisting
    def get_extra_state(self) -> dict[str, Any]:
        """Optimizer states plus the current (annealed) clip range."""
        state = super().get_extra_state()
        state["clip_range_now"] = self.clip_range_now
        return state

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_extra_state` returned."""
        super().set_extra_state(state)
        self.clip_range_now = float(state["clip_range_now"])
