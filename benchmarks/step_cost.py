"""Per-step cost: a gradient step and a collector step against hand-written floors.

**Gradient step** (``grad``), per algorithm with its tuned settings (DQN and PPO as on
CartPole-v1, SAC and TD3 as on Pendulum-v1, 64x64 networks): milliseconds per gradient
step of

* ``epochtrain``: what the off-policy trainer runs per gradient step,
  ``Policy.sample_batch`` (``buffer.sample`` of n-step transitions -> ``process_sample``)
  -> ``Policy.learn`` -> ``Policy.post_learn`` (PPO: ``learn``
  on a minibatch of a processed rollout), stats included. Between gradient steps it also
  reads every step's stats at the end of each update step, as the trainer does
  (``loss_stats()``), and writes env steps into the buffer as the tuned settings' collect
  steps do
  (``WRITES``: DQN 256 env steps before every 128 gradient steps, SAC 2 before each, TD3
  1), so the buffer's n-step sums are brought up to date as in training; the writes are
  the collector's work in a real run and are charged to this contender all the same;
* ``minimal``: one hand-written function with copies of the same networks, the same loss
  and the same optimizer settings (fused Adam, gradient clipping, target updates), fed by
  ``torch.randint`` indexing into flat tensors (CleanRL's replay), no stats read back.

The DQN rows are the tuned CartPole setting (3-step returns, dueling head, uniform replay;
the minimal update uses the same dueling network and double-Q Huber loss on 3-step
transitions precomputed once), ``dqn-per``, the same with prioritized replay (the minimal
update weights its loss by importance weights, on uniform samples), and plain DQN (1-step,
MLP, uniform replay). SAC and TD3 learn from 3-step returns, as their
Pendulum settings do; their minimal updates read 3-step transitions precomputed once. The
two contenders alternate in chunks of ``--chunk`` steps (A, B, A, B, ...), so the
machine's drift hits both alike; a round is ``--chunks`` pairs, and the ratio epochtrain /
minimal is paired per round.

**Collector** (``collect``), per built-in policy: env steps per second of
``Collector.collect`` with a ``ReplayBuffer`` (every transition written), the policy
acting as in training (DQN epsilon-greedy with epsilon 0.04 on CartPole-v1, PPO sampling
on CartPole-v1, SAC sampling and TD3 with Gaussian noise on Pendulum-v1) against a plain
loop over an identical vector env: ``obs -> torch -> the same network (inference_mode)
-> argmax / sample / noise -> numpy -> env.step``, with numpy epsilon-greedy for DQN and
no buffer; at 1, 8 and 32 sync envs (SAME_STEP autoreset, as the trainers use).

Prints a table per part and appends one JSON line per round to ``--out``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/step_cost.py
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/step_cost.py --parts grad --algos sac
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from gymnasium.vector import AutoresetMode
from throughput import CollectorRun  # the same Collector driver as benchmarks/throughput.py
from torch import Tensor, nn

from epochtrain.algorithms import DQN, PPO, SAC, TD3
from epochtrain.data import Collector, PrioritizedReplayBuffer, ReplayBuffer
from epochtrain.nets import EnsembleQCritic, QCritic

GRAD_ALGOS = ("dqn", "dqn-per", "dqn-plain", "ppo", "sac", "td3")
COLLECT_ALGOS = ("dqn", "ppo", "sac", "td3")
ENVS = {"dqn": "CartPole-v1", "dqn-per": "CartPole-v1", "dqn-plain": "CartPole-v1",
        "ppo": "CartPole-v1",
        "sac": "Pendulum-v1", "td3": "Pendulum-v1"}  # fmt: skip
WRITES = {"dqn": (256, 128), "dqn-per": (256, 128), "dqn-plain": (256, 128), "sac": (2, 1),
          "td3": (1, 1)}  # fmt: skip
"""``(env steps, gradient steps)``: a collect step's env steps written to the buffer
before that many gradient steps (an update step), as the tuned settings'
``step_per_collect`` and ``update_per_step`` do."""
PPO_UPDATE = 20
"""PPO's gradient steps per update step on CartPole-v1 (20 passes over a rollout of 256,
one minibatch each)."""
BATCH = {"dqn": 64, "dqn-per": 64, "dqn-plain": 64, "ppo": 256, "sac": 256, "td3": 256}
"""Minibatch sizes of the tuned settings."""


def make_env(env_id: str, num_envs: int) -> gym.vector.VectorEnv[Any, Any, Any]:
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})  # fmt: skip


def make_policy(algo: str, env: gym.vector.VectorEnv[Any, Any, Any]) -> Any:
    """The policy with its tuned settings (``presets.py``) for the algorithm's env."""
    spaces = (env.single_observation_space, env.single_action_space)
    if algo in ("dqn", "dqn-per"):
        return DQN(*spaces, hidden=(64, 64), lr=2.3e-3, n_step=3, dueling=True)
    if algo == "dqn-plain":
        return DQN(*spaces, hidden=(64, 64), lr=2.3e-3, n_step=1, dueling=False)
    if algo == "ppo":
        return PPO(*spaces)
    if algo == "sac":
        return SAC(*spaces, hidden=(64, 64), actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3,
                   n_step=3)  # fmt: skip
    if algo == "td3":
        return TD3(*spaces, hidden=(64, 64), actor_lr=1e-3, critic_lr=1e-3, gamma=0.98,
                   n_step=3)  # fmt: skip
    raise ValueError(algo)


def flat(batch: Any) -> dict[str, Tensor]:
    """The tensors of a sampled ``Batch`` the minimal updates read."""
    out = {k: getattr(batch, k) for k in ("obs", "act", "rew", "terminated", "obs_next")}
    for k in ("discount", "weight"):
        if getattr(batch, k, None) is not None:
            out[k] = getattr(batch, k)
    return out


# ------------------------------------------------------------------- minimal updates
def separate_critics(critics: Any) -> list[QCritic]:
    """The members of an ``EnsembleQCritic`` as separate ``QCritic`` networks (the plain
    way to write twin critics) with the same weights."""
    assert isinstance(critics, EnsembleQCritic)
    ens = critics.net
    layers = ens.layers()
    hidden = [weight.shape[2] for weight, _ in layers[:-1]]
    act_dim = ens.in_dim - critics.obs_dim
    out = []
    for i in range(ens.n):
        q = QCritic(critics.obs_dim, act_dim, hidden, nn.ReLU)
        linears = [m for m in q.net.net if isinstance(m, nn.Linear)]
        with torch.no_grad():
            for lin, (weight, bias) in zip(linears, layers, strict=True):
                lin.weight.copy_(weight[i].T)
                lin.bias.copy_(bias[i, 0])
        out.append(q)
    return out


def minimal_dqn(policy: DQN, weighted: bool) -> Callable[[dict[str, Tensor]], None]:
    """Double-Q Huber step (importance-weighted when ``weighted``: prioritized replay)."""
    q_net = copy.deepcopy(policy.q_net).requires_grad_(True)
    target = copy.deepcopy(q_net).requires_grad_(False)
    params = list(q_net.parameters())
    opt = torch.optim.Adam(params, lr=2.3e-3, fused=True)
    gamma, n = policy.gamma, [0]

    def update(b: dict[str, Tensor]) -> None:
        with torch.no_grad():
            best = q_net(b["obs_next"]).argmax(-1, keepdim=True)
            q_next = target(b["obs_next"]).gather(-1, best).squeeze(-1)
            disc = b["discount"] if "discount" in b else gamma * (~b["terminated"]).float()
            y = b["rew"] + disc * q_next
        q = q_net(b["obs"]).gather(-1, b["act"].long().reshape(-1, 1)).squeeze(-1)
        per_sample = F.smooth_l1_loss(q, y, reduction="none")
        loss = (per_sample * b["weight"]).mean() if weighted else per_sample.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 10.0)
        opt.step()
        n[0] += 1
        if n[0] % 128 == 0:
            target.load_state_dict(q_net.state_dict())

    return update


def minimal_ppo(policy: PPO) -> Callable[[dict[str, Tensor]], None]:
    """Clipped PPO loss, advantage normalisation, value MSE, grad-norm clip 0.5."""
    actor = copy.deepcopy(policy.actor)
    critic = copy.deepcopy(policy.critic)
    assert critic is not None
    params = [*actor.parameters(), *critic.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3, eps=1e-5, fused=True)

    def update(b: dict[str, Tensor]) -> None:
        adv = b["adv"]
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        logp_all = actor(b["obs"]).log_softmax(-1)
        logp = logp_all.gather(-1, b["act"].long().reshape(-1, 1)).squeeze(-1)
        ratio = (logp - b["logp"]).exp()
        surrogate = torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
        loss = -surrogate.mean() + 0.5 * F.mse_loss(critic(b["obs"]).squeeze(-1), b["ret"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()

    return update


def minimal_sac(policy: SAC) -> Callable[[dict[str, Tensor]], None]:
    """Twin soft critics, reparameterised tanh-Gaussian actor, auto temperature, Polyak."""
    actor = copy.deepcopy(policy.actor)
    q1, q2 = separate_critics(policy.critics)
    q1t, q2t = copy.deepcopy(q1).requires_grad_(False), copy.deepcopy(q2).requires_grad_(False)
    actor_params = list(actor.parameters())
    critic_params = [*q1.parameters(), *q2.parameters()]
    target_params = [*q1t.parameters(), *q2t.parameters()]
    log_alpha = torch.zeros((), requires_grad=True)
    opt_actor = torch.optim.Adam(actor_params, lr=1e-3, fused=True)
    opt_critic = torch.optim.Adam(critic_params, lr=1e-3, fused=True)
    opt_alpha = torch.optim.Adam([log_alpha], lr=1e-3)
    center, half = policy.action_center, policy.action_half_range
    target_entropy, tau = -1.0, 0.005

    def sample(obs: Tensor) -> tuple[Tensor, Tensor]:
        mean, log_std = actor(obs).chunk(2, -1)
        log_std = log_std.clamp(-20.0, 2.0)
        noise = torch.randn_like(mean)
        u = mean + log_std.exp() * noise
        logp = (-0.5 * noise.pow(2) - log_std - 0.9189385332046727).sum(-1)
        logp = logp - (2.0 * (0.6931471805599453 - u - F.softplus(-2.0 * u))).sum(-1)
        return torch.tanh(u), logp

    def update(b: dict[str, Tensor]) -> None:
        obs, obs_next = b["obs"], b["obs_next"]
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            a_next, logp_next = sample(obs_next)
            q_next = torch.min(q1t(obs_next, a_next), q2t(obs_next, a_next))
            y = b["rew"] + b["discount"] * (q_next - alpha * logp_next)
        act = (b["act"] - center) / half
        loss_q = 0.5 * (F.mse_loss(q1(obs, act), y) + F.mse_loss(q2(obs, act), y))
        opt_critic.zero_grad(set_to_none=True)
        loss_q.backward()
        opt_critic.step()
        a, logp = sample(obs)
        loss_pi = (alpha * logp - torch.min(q1(obs, a), q2(obs, a))).mean()
        opt_actor.zero_grad(set_to_none=True)
        torch.autograd.backward(loss_pi, inputs=actor_params)
        opt_actor.step()
        loss_alpha = log_alpha * (-logp.detach().mean() - target_entropy)
        opt_alpha.zero_grad(set_to_none=True)
        loss_alpha.backward()
        opt_alpha.step()
        with torch.no_grad():
            torch._foreach_lerp_(target_params, critic_params, tau)

    return update


def minimal_td3(policy: TD3) -> Callable[[dict[str, Tensor]], None]:
    """Twin critics, target policy smoothing, actor and targets every 2nd step."""
    actor = copy.deepcopy(policy.actor)
    q1, q2 = separate_critics(policy.critics)
    actor_t = copy.deepcopy(actor).requires_grad_(False)
    q1t, q2t = copy.deepcopy(q1).requires_grad_(False), copy.deepcopy(q2).requires_grad_(False)
    actor_params = list(actor.parameters())
    critic_params = [*q1.parameters(), *q2.parameters()]
    online = [*actor_params, *critic_params]
    targets = [*actor_t.parameters(), *q1t.parameters(), *q2t.parameters()]
    opt_actor = torch.optim.Adam(actor_params, lr=1e-3, fused=True)
    opt_critic = torch.optim.Adam(critic_params, lr=1e-3, fused=True)
    center, half = policy.action_center, policy.action_half_range
    tau, n = 0.005, [0]

    def update(b: dict[str, Tensor]) -> None:
        obs, obs_next = b["obs"], b["obs_next"]
        with torch.no_grad():
            a_next = torch.tanh(actor_t(obs_next))
            noise = (0.2 * torch.randn_like(a_next)).clamp(-0.5, 0.5)
            a_next = (a_next + noise).clamp(-1.0, 1.0)
            q_next = torch.min(q1t(obs_next, a_next), q2t(obs_next, a_next))
            y = b["rew"] + b["discount"] * q_next
        act = (b["act"].reshape(len(obs), -1) - center) / half
        loss_q = F.mse_loss(q1(obs, act), y) + F.mse_loss(q2(obs, act), y)
        opt_critic.zero_grad(set_to_none=True)
        loss_q.backward()
        opt_critic.step()
        n[0] += 1
        if n[0] % 2 == 0:
            loss_pi = -q1(obs, torch.tanh(actor(obs))).mean()
            opt_actor.zero_grad(set_to_none=True)
            torch.autograd.backward(loss_pi, inputs=actor_params)
            opt_actor.step()
            with torch.no_grad():
                torch._foreach_lerp_(targets, online, tau)

    return update


# ---------------------------------------------------------------- gradient-step setup
class GradContenders:
    """The two contenders of one algorithm: ``step_ours()`` and ``step_minimal()``."""

    def __init__(self, algo: str, seed: int) -> None:
        torch.manual_seed(seed)
        self.unread: list[Any] = []
        env_id, bs = ENVS[algo], BATCH[algo]
        self.algo, self.bs = algo, bs
        if algo == "ppo":
            env = make_env(env_id, 8)
            policy = make_policy(algo, env)
            buffer = ReplayBuffer(8 * 32, 8)
            collector = Collector(policy, env, buffer)
            collector.reset(seed=seed)
            collector.collect(n_step=8 * 32)
            rollout = policy.process_rollout(buffer.rollout())
            self.rollout = rollout.map(lambda t: t.reshape(-1, *t.shape[2:]))
            self.policy = policy
            self.minimal = minimal_ppo(policy)
            env.close()
            return
        env = make_env(env_id, 1)
        policy = make_policy(algo, env)
        if algo == "dqn-per":
            buffer: ReplayBuffer = PrioritizedReplayBuffer(100_000, 1, alpha=0.6, beta=0.4)
        else:
            buffer = ReplayBuffer(100_000, 1)
        collector = Collector(policy, env, buffer)
        collector.reset(seed=seed)
        collector.collect(n_step=5_000, random=True)
        env.close()
        self.policy, self.buffer = policy, buffer
        # rows re-written one by one before each gradient step, as the collector would
        pool = buffer.get(torch.arange(1_000))
        self.rows = [
            (pool.obs[i : i + 1].numpy(), pool.act[i : i + 1].numpy(),
             pool.rew[i : i + 1].numpy(), pool.terminated[i : i + 1].numpy(),
             pool.truncated[i : i + 1].numpy(), pool.obs_next[i : i + 1].numpy())
            for i in range(1_000)
        ]  # fmt: skip
        self.next_row = self.steps = 0
        # the minimal replay: flat tensors of 20,000 transitions drawn from the same buffer
        # (3-step, and importance-weighted for prioritized DQN), indexed with torch.randint
        store = policy.process_sample(ReplayBuffer.sample(buffer, 20_000), buffer)
        self.store = flat(store)
        if algo == "dqn-per":
            self.store["weight"] = torch.rand(20_000) + 0.5
        self.minimal = {
            "dqn": lambda: minimal_dqn(policy, weighted=False),
            "dqn-per": lambda: minimal_dqn(policy, weighted=True),
            "dqn-plain": lambda: minimal_dqn(policy, weighted=False),
            "sac": lambda: minimal_sac(policy),
            "td3": lambda: minimal_td3(policy),
        }[algo]()

    def step_ours(self) -> None:
        if self.algo == "ppo":
            idx = torch.randint(len(self.rollout), (self.bs,))
            # the on-policy trainer's minibatch: rollout[order] (Batch indexing), as here
            self.read_stats(self.policy.learn(self.rollout[idx]), PPO_UPDATE)
            return
        rows, every = WRITES[self.algo]
        if self.steps % every == 0:
            for _ in range(rows):
                self.buffer.add(*self.rows[self.next_row])
                self.next_row = (self.next_row + 1) % len(self.rows)
        self.steps += 1
        batch = self.policy.sample_batch(self.buffer, self.bs)
        self.read_stats(self.policy.learn(batch), every)
        self.policy.post_learn(batch, self.buffer)

    def read_stats(self, stats: Any, per_update: int) -> None:
        """Read every step's stats at the end of each update step of ``per_update``
        gradient steps, as the trainer does (``loss_stats()``: its non-finite check and
        moving averages), so stats a policy defers are paid for here."""
        self.unread.append(stats)
        if len(self.unread) >= per_update:
            for s in self.unread:
                s.loss_stats()
            self.unread.clear()

    def step_minimal(self) -> None:
        if self.algo == "ppo":
            idx = torch.randint(len(self.rollout), (self.bs,))
            r = self.rollout
            self.minimal({"obs": r.obs[idx], "act": r.act[idx], "logp": r.logp[idx],
                          "adv": r.adv[idx], "ret": r.ret[idx]})  # fmt: skip
            return
        idx = torch.randint(20_000, (self.bs,))
        self.minimal({k: v[idx] for k, v in self.store.items()})


def measure_pair(
    a: Callable[[], Any], b: Callable[[], Any], chunk: int, chunks: int
) -> tuple[float, float]:
    """Seconds per call of ``a`` and ``b``, alternating chunks of ``chunk`` calls."""
    ta = tb = 0.0
    for _ in range(chunks):
        t0 = time.perf_counter()
        for _ in range(chunk):
            a()
        t1 = time.perf_counter()
        for _ in range(chunk):
            b()
        t2 = time.perf_counter()
        ta += t1 - t0
        tb += t2 - t1
    n = chunk * chunks
    return ta / n, tb / n


# ------------------------------------------------------------------------- collectors
class PlainLoop:
    """``obs -> torch -> network -> action -> numpy -> env.step``, no buffer."""

    def __init__(self, algo: str, env: gym.vector.VectorEnv[Any, Any, Any], policy: Any):
        self.env, self.algo, self.obs = env, algo, None
        self.rng = np.random.default_rng(0)
        self.n_actions = int(getattr(env.single_action_space, "n", 0))
        self.net = policy.q_net if algo == "dqn" else policy.actor
        if algo in ("sac", "td3"):
            self.center = policy.action_center
            self.half = policy.action_half_range

    def reset(self, seed: int) -> None:
        self.obs, _ = self.env.reset(seed=seed)

    def run(self, n: int) -> int:
        env, net, obs, algo = self.env, self.net, self.obs, self.algo
        made, num_envs = 0, env.num_envs
        while made < n:
            with torch.inference_mode():
                out = net(torch.as_tensor(obs))
                if algo == "dqn":
                    act = out.argmax(-1).numpy()
                    explore = self.rng.random(num_envs) < 0.04
                    if explore.any():
                        act[explore] = self.rng.integers(self.n_actions, size=int(explore.sum()))
                elif algo == "ppo":
                    act = torch.multinomial(out.softmax(-1), 1).squeeze(-1).numpy()
                elif algo == "sac":
                    mean, log_std = out.chunk(2, -1)
                    u = mean + log_std.clamp(-20.0, 2.0).exp() * torch.randn_like(mean)
                    act = (self.center + self.half * torch.tanh(u)).numpy()
                else:
                    u = (torch.tanh(out) + 0.1 * torch.randn_like(out)).clamp(-1.0, 1.0)
                    act = (self.center + self.half * u).numpy()
            obs, *_ = env.step(act)
            made += num_envs
        self.obs = obs
        return made


def collect_round(algo: str, num_envs: int, transitions: int, chunks: int, seed: int,
                  setup: dict[str, Any]) -> dict[str, float]:  # fmt: skip
    """Transitions/s of the collector and the plain loop, alternating ``chunks`` slices."""
    ours, plain = setup["ours"], setup["plain"]
    ours.reset(seed)
    plain.reset(seed)
    made = {"collector": 0, "plain": 0}
    secs = {"collector": 0.0, "plain": 0.0}
    chunk = -(-transitions // chunks)
    for _ in range(chunks):
        for name, c in (("collector", ours), ("plain", plain)):
            t0 = time.perf_counter()
            made[name] += c.run(chunk)
            secs[name] += time.perf_counter() - t0
    return {k: made[k] / secs[k] for k in made}


def collect_setup(algo: str, num_envs: int) -> dict[str, Any]:
    env_id = ENVS[algo]
    env_a, env_b = make_env(env_id, num_envs), make_env(env_id, num_envs)
    policy = make_policy(algo, env_a)
    if algo == "dqn":
        policy.epsilon_start = policy.epsilon_end = 0.04
        policy.set_progress(0)
        policy.epsilon = 0.04
    buffer = ReplayBuffer(max(100_000, num_envs * 1000), num_envs)
    return {
        "ours": CollectorRun(Collector(policy, env_a, buffer)),
        "plain": PlainLoop(algo, env_b, policy),
        "envs": (env_a, env_b),
    }


# ------------------------------------------------------------------------------ main
def _meta(argv: list[str]) -> dict[str, Any]:
    repo = Path(__file__).resolve().parent.parent
    try:
        git = ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"]
        commit = subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {
        "torch": torch.__version__, "gymnasium": gym.__version__,
        "python": platform.python_version(), "commit": commit,
        "torch_threads": torch.get_num_threads(),
        "command": " ".join(["python", *argv]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }  # fmt: skip


def _mmm(values: list[float], fmt: str) -> str:
    return f"**{statistics.median(values):{fmt}}** ({min(values):{fmt}}–{max(values):{fmt}})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["grad", "collect"],
                        choices=["grad", "collect"])  # fmt: skip
    parser.add_argument("--algos", nargs="+", default=list(GRAD_ALGOS), choices=GRAD_ALGOS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=20, help="gradient steps per chunk")
    parser.add_argument("--chunks", type=int, default=10, help="chunk pairs per round")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--transitions", type=int, default=20_000,
                        help="collector: transitions per contender per round")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / "step_cost.jsonl")  # fmt: skip
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    meta = _meta(sys.argv if argv is None else ["benchmarks/step_cost.py", *argv])
    print(f"{meta}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}", flush=True)
    lines: list[dict[str, Any]] = []
    grad_rows, collect_rows = [], []
    if "grad" in args.parts:
        for algo in args.algos:
            c = GradContenders(algo, args.seed)
            measure_pair(c.step_ours, c.step_minimal, 20, 2)  # warm-up
            rounds = []
            for r in range(args.rounds):
                ours, minimal = measure_pair(c.step_ours, c.step_minimal, args.chunk, args.chunks)
                row = {"part": "grad", "algo": algo, "round": r + 1, "batch_size": c.bs,
                       "ours_ms": ours * 1e3, "minimal_ms": minimal * 1e3,
                       "ratio": ours / minimal, **meta}  # fmt: skip
                rounds.append(row)
                lines.append(row)
                print(f"grad {algo} round {r + 1}: {ours * 1e3:.3f} ms vs {minimal * 1e3:.3f} ms "
                      f"= {ours / minimal:.3f}", flush=True)  # fmt: skip
            grad_rows.append((algo, c.bs, rounds))
    if "collect" in args.parts:
        for algo in [a for a in args.algos if a in COLLECT_ALGOS]:
            for num_envs in args.num_envs:
                setup = collect_setup(algo, num_envs)
                collect_round(algo, num_envs, 2_000, 1, args.seed, setup)  # warm-up
                rounds = []
                for r in range(args.rounds):
                    res = collect_round(algo, num_envs, args.transitions, 10,
                                        args.seed + r + 1, setup)  # fmt: skip
                    row = {"part": "collect", "algo": algo, "env": ENVS[algo],
                           "num_envs": num_envs, "round": r + 1,
                           "collector_per_s": res["collector"], "plain_per_s": res["plain"],
                           "ratio": res["collector"] / res["plain"], **meta}  # fmt: skip
                    rounds.append(row)
                    lines.append(row)
                med = statistics.median(r["ratio"] for r in rounds)
                print(f"collect {algo} x{num_envs}: ratio median {med:.3f}", flush=True)
                collect_rows.append((algo, num_envs, rounds))
                for env in setup["envs"]:
                    env.close()
    print(f"\nload average {os.getloadavg()}\n")
    if grad_rows:
        print("| algorithm | batch | epochtrain ms/step | minimal ms/step | ratio |")
        print("|---|---|---|---|---|")
        for algo, bs, rounds in grad_rows:
            print(f"| {algo} | {bs} | {_mmm([r['ours_ms'] for r in rounds], '.3f')} "
                  f"| {_mmm([r['minimal_ms'] for r in rounds], '.3f')} "
                  f"| {_mmm([r['ratio'] for r in rounds], '.2f')} |")  # fmt: skip
    if collect_rows:
        print("\n| policy | env | envs | collector steps/s | plain loop steps/s | ratio |")
        print("|---|---|---|---|---|---|")
        for algo, num_envs, rounds in collect_rows:
            print(f"| {algo} | {ENVS[algo]} | {num_envs} "
                  f"| {_mmm([r['collector_per_s'] for r in rounds], ',.0f')} "
                  f"| {_mmm([r['plain_per_s'] for r in rounds], ',.0f')} "
                  f"| {_mmm([r['ratio'] for r in rounds], '.2f')} |")  # fmt: skip
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            for row in lines:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
