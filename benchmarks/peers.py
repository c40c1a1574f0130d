"""Time to solve against Stable-Baselines3 and Tianshou, interleaved per seed in one process.

Tasks (the env, the threshold on the mean of 10 deterministic test episodes):
PPO and DQN on CartPole-v1 (475), SAC and TD3 on Pendulum-v1 (-250). Per seed and task the
libraries run one after another in this process (epochtrain, then Stable-Baselines3, then
Tianshou), so the machine's drift over minutes hits the three alike, and the ratios are
paired per seed. Each library uses its own tuned settings:

* **epochtrain**: ``make_trainer(algo, env_id, seed=s)`` with its tuned per-env settings; a
  test (10 episodes on 10 envs) after every epoch.
* **Stable-Baselines3 2.9.2**: rl-baselines3-zoo's hyper-parameters (``hyperparams/*.yml``,
  release v2.8.0; rl_zoo3 itself is not used), ``EvalCallback(n_eval_episodes=10,
  deterministic=True)`` on a separate 1-env eval env every 2,000 env transitions on
  CartPole and 1,000 on Pendulum, stopped by ``StopTrainingOnRewardThreshold``.
* **Tianshou 2.0.1**: the hyper-parameters of its own tests at tag v2.0.1
  (``test/discrete/test_ppo_discrete.py``, ``test_dqn.py``,
  ``test/continuous/test_sac_with_il.py`` (SAC part), ``test_td3.py``), its own
  ``stop_fn`` and ``test_in_training=True``, 10 test episodes on 10 test envs instead of
  100; DQN tests greedily (``eps_inference=0``, the tests use 0.05, which is not the
  protocol's deterministic test) and runs without an epoch limit, up to the cap.

The clock starts when training starts (env and network construction excluded) and stops
when the library stops; random warm-up and every evaluation are included. A run that
reaches neither the threshold nor its library's budget within ``--cap`` seconds is
stopped there and counts as not reached. No library logs anywhere (no TensorBoard).

Prints one line per run, appends one JSON line per run to ``--out`` (with versions,
command and date), then a table per task: each library's median (min-max) seconds and env
steps, and the paired per-seed ratios epochtrain / peer (median, min, max) for every peer
and for the best peer of each seed, and, unpaired, the probability that a run of
epochtrain is faster than a run of the peer over all pairs of seeds (seed numbers of two
libraries draw from unrelated random streams).

Run it in the separate peers venv (never a test dependency)::

    python3 -m venv /work/peers-venv
    /work/peers-venv/bin/pip install torch==2.13.0          # first: any other spec pulls CUDA
    echo torch==2.13.0 > /tmp/c.txt
    /work/peers-venv/bin/pip install -c /tmp/c.txt -e '.[peers]'
    OMP_NUM_THREADS=1 /work/peers-venv/bin/python benchmarks/peers.py --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
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

from epochtrain.factory import make_trainer

TASKS: dict[str, tuple[str, float]] = {
    "ppo": ("CartPole-v1", 475.0),
    "dqn": ("CartPole-v1", 475.0),
    "sac": ("Pendulum-v1", -250.0),
    "td3": ("Pendulum-v1", -250.0),
}
"""Algorithm -> (env id, threshold on the mean of 10 deterministic test episodes)."""

LIBRARIES = ("epochtrain", "sb3", "tianshou")
"""In the order they run for each seed and task."""

EVAL_EVERY = {"CartPole-v1": 2_000, "Pendulum-v1": 1_000}
"""Stable-Baselines3's evaluation cadence in env transitions (as in ``baselines.md``)."""


class TimeCap(Exception):
    """Raised inside a peer's training loop when a run passes the wall-clock cap."""


def _result(
    seconds: float, env_steps: int, best: float, threshold: float, test_seconds: float
) -> dict[str, Any]:
    return {
        "seconds": round(seconds, 3),
        "env_steps": int(env_steps),
        "best_test_return": float(best),
        "reached": bool(best >= threshold),
        "test_seconds": round(test_seconds, 3),
    }


# ------------------------------------------------------------------------- epochtrain
def run_epochtrain(
    algo: str, env_id: str, threshold: float, seed: int, cap: float
) -> dict[str, Any]:
    """``make_trainer(algo, env_id, seed=seed)`` until a test reaches ``threshold``."""
    setup = time.perf_counter()
    trainer = make_trainer(
        algo, env_id, seed=seed, show_progress=False, stop_fn=lambda best: best >= threshold
    )
    start = time.perf_counter()
    for _ in trainer:
        if time.perf_counter() - start > cap:
            break
    seconds = time.perf_counter() - start
    info = trainer.info_stat()
    out = _result(seconds, info.env_step, info.best_test_return, threshold, info.test_time)
    out["setup_seconds"] = round(start - setup, 3)
    out["settings"] = "make_trainer defaults (tuned per env)"
    return out


# ------------------------------------------------------------------ Stable-Baselines3
def run_sb3(algo: str, env_id: str, threshold: float, seed: int, cap: float) -> dict[str, Any]:
    """rl-zoo's settings for ``algo`` on ``env_id``, stopped by an ``EvalCallback``."""
    from stable_baselines3 import DQN, PPO, SAC, TD3
    from stable_baselines3.common.callbacks import (
        BaseCallback,
        CallbackList,
        EvalCallback,
        StopTrainingOnRewardThreshold,
    )
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    class TimedEval(EvalCallback):
        """``EvalCallback`` that adds up the seconds its evaluations take."""

        eval_seconds = 0.0

        def _on_step(self) -> bool:
            t0 = time.perf_counter()
            keep_going = super()._on_step()
            if self.eval_freq > 0 and self.n_calls % self.eval_freq == 0:
                self.eval_seconds += time.perf_counter() - t0
            return keep_going

    class Cap(BaseCallback):
        """Stops ``learn`` once ``cap`` seconds have passed since ``start``."""

        start = 0.0

        def _on_step(self) -> bool:
            return time.perf_counter() - self.start <= cap

    def lin(value: float) -> Callable[[float], float]:
        return lambda progress_remaining: progress_remaining * value

    setup = time.perf_counter()
    model: Any
    if algo == "ppo":
        n_envs, budget = 8, 100_000
        env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
        model = PPO(
            "MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
            n_epochs=20, ent_coef=0.0, learning_rate=lin(1e-3), clip_range=lin(0.2),
            seed=seed, device="cpu",
        )  # fmt: skip
    elif algo == "dqn":
        n_envs, budget = 1, 50_000
        env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
        model = DQN(
            "MlpPolicy", env, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
            learning_starts=1000, gamma=0.99, target_update_interval=10, train_freq=256,
            gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,
            policy_kwargs={"net_arch": [256, 256]}, seed=seed, device="cpu",
        )  # fmt: skip
    elif algo == "sac":
        n_envs, budget = 1, 20_000
        env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
        model = SAC("MlpPolicy", env, learning_rate=1e-3, seed=seed, device="cpu")
    elif algo == "td3":
        n_envs, budget = 1, 20_000
        env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
        n_act = int(np.prod(env.action_space.shape))
        model = TD3(
            "MlpPolicy", env, gamma=0.98, buffer_size=200_000, learning_starts=10_000,
            action_noise=NormalActionNoise(np.zeros(n_act), 0.1 * np.ones(n_act)),
            gradient_steps=1, train_freq=1, learning_rate=1e-3,
            policy_kwargs={"net_arch": [400, 300]}, seed=seed, device="cpu",
        )  # fmt: skip
    else:
        raise ValueError(f"no Stable-Baselines3 settings for {algo!r}")
    eval_env = make_vec_env(env_id, n_envs=1, seed=seed + 10_000)
    stop = StopTrainingOnRewardThreshold(reward_threshold=threshold, verbose=0)
    evaluator = TimedEval(
        eval_env,
        callback_on_new_best=stop,
        n_eval_episodes=10,
        eval_freq=max(EVAL_EVERY[env_id] // n_envs, 1),
        deterministic=True,
        verbose=0,
    )
    capper = Cap()
    start = time.perf_counter()
    capper.start = start
    model.learn(total_timesteps=budget, callback=CallbackList([evaluator, capper]))
    seconds = time.perf_counter() - start
    best = float(evaluator.best_mean_reward)
    out = _result(seconds, model.num_timesteps, best, threshold, evaluator.eval_seconds)
    out["setup_seconds"] = round(start - setup, 3)
    out["settings"] = f"rl-zoo v2.8.0 hyperparams, budget {budget}"
    env.close()
    eval_env.close()
    return out


# --------------------------------------------------------------------------- Tianshou
def run_tianshou(algo: str, env_id: str, threshold: float, seed: int, cap: float) -> dict[str, Any]:
    """Tianshou's own test settings for ``algo``, 10 test episodes, its own stopping."""
    from tianshou.algorithm import DQN, PPO, SAC, TD3
    from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.algorithm.modelfree.reinforce import DiscreteActorPolicy
    from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, CollectStats, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.exploration import GaussianNoise
    from tianshou.trainer import OffPolicyTrainerParams, OnPolicyTrainerParams
    from tianshou.utils.net.common import ActorCritic, Net
    from tianshou.utils.net.continuous import (
        ContinuousActorDeterministic,
        ContinuousActorProbabilistic,
        ContinuousCritic,
    )
    from tianshou.utils.net.discrete import DiscreteActor, DiscreteCritic
    from tianshou.utils.space_info import SpaceInfo
    from tianshou.utils.torch_utils import policy_within_training_step

    setup = time.perf_counter()
    np.random.seed(seed)
    torch.manual_seed(seed)
    env = gym.make(env_id)
    info = SpaceInfo.from_env(env)
    state_shape = info.observation_info.obs_shape
    action_shape = info.action_info.action_shape
    n_train = {"ppo": 20, "dqn": 10, "sac": 10, "td3": 8}[algo]
    train_envs = DummyVectorEnv([lambda: gym.make(env_id) for _ in range(n_train)])
    test_envs = DummyVectorEnv([lambda: gym.make(env_id) for _ in range(10)])
    train_envs.seed(seed)
    test_envs.seed(seed + n_train)

    def continuous_critic(hidden: list[int]) -> ContinuousCritic:
        net = Net(state_shape=state_shape, action_shape=action_shape, hidden_sizes=hidden,
                  concat=True)  # fmt: skip
        return ContinuousCritic(preprocess_net=net)

    algorithm: Any
    params: dict[str, Any]
    buffer_size = 20_000
    if algo == "ppo":
        net = Net(state_shape=state_shape, hidden_sizes=[64, 64])
        actor = DiscreteActor(preprocess_net=net, action_shape=action_shape)
        critic = DiscreteCritic(preprocess_net=net)
        for m in ActorCritic(actor, critic).modules():
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.orthogonal_(m.weight)
                torch.nn.init.zeros_(m.bias)
        policy = DiscreteActorPolicy(
            actor=actor, dist_fn=torch.distributions.Categorical,
            action_space=env.action_space, deterministic_eval=True,
        )  # fmt: skip
        algorithm = PPO(
            policy=policy, critic=critic, optim=AdamOptimizerFactory(lr=3e-4), gamma=0.99,
            max_grad_norm=0.5, eps_clip=0.2, vf_coef=0.5, ent_coef=0.0, gae_lambda=0.95,
            return_scaling=False, dual_clip=None, value_clip=False,
            advantage_normalization=False, recompute_advantage=False,
        )  # fmt: skip
        params = {"max_epochs": 10, "epoch_num_steps": 50_000, "batch_size": 64,
                  "collection_step_num_env_steps": 2000,
                  "update_step_num_repetitions": 10}  # fmt: skip
    elif algo == "dqn":
        net = Net(state_shape=state_shape, action_shape=action_shape,
                  hidden_sizes=[128, 128, 128, 128])  # fmt: skip
        dqn_policy = DiscreteQLearningPolicy(
            model=net, action_space=env.action_space, observation_space=env.observation_space,
            eps_training=0.1, eps_inference=0.0,
        )  # fmt: skip
        algorithm = DQN(
            policy=dqn_policy, optim=AdamOptimizerFactory(lr=1e-3), gamma=0.9,
            n_step_return_horizon=3, target_update_freq=320,
        )  # fmt: skip

        def eps_schedule(epoch: int, env_step: int) -> None:
            if env_step <= 10_000:
                dqn_policy.set_eps_training(0.1)
            elif env_step <= 50_000:
                dqn_policy.set_eps_training(0.1 - (env_step - 10_000) / 40_000 * 0.09)
            else:
                dqn_policy.set_eps_training(0.01)

        params = {"max_epochs": 10_000, "epoch_num_steps": 10_000, "batch_size": 64,
                  "collection_step_num_env_steps": 10,
                  "update_step_num_gradient_steps_per_sample": 0.1}  # fmt: skip
    elif algo == "sac":
        net = Net(state_shape=state_shape, hidden_sizes=[128, 128])
        actor = ContinuousActorProbabilistic(
            preprocess_net=net, action_shape=action_shape, unbounded=True
        )
        algorithm = SAC(
            policy=SACPolicy(actor=actor, action_space=env.action_space),
            policy_optim=AdamOptimizerFactory(lr=1e-3),
            critic=continuous_critic([128, 128]), critic_optim=AdamOptimizerFactory(lr=1e-3),
            critic2=continuous_critic([128, 128]), critic2_optim=AdamOptimizerFactory(lr=1e-3),
            tau=0.005, gamma=0.99,
            alpha=AutoAlpha(-info.action_info.action_dim, 0.0, AdamOptimizerFactory(lr=3e-4)),
            n_step_return_horizon=3,
        )  # fmt: skip
        params = {"max_epochs": 10, "epoch_num_steps": 24_000, "batch_size": 128,
                  "collection_step_num_env_steps": 10,
                  "update_step_num_gradient_steps_per_sample": 0.1}  # fmt: skip
    elif algo == "td3":
        net = Net(state_shape=state_shape, hidden_sizes=[128, 128])
        actor = ContinuousActorDeterministic(
            preprocess_net=net, action_shape=action_shape,
            max_action=info.action_info.max_action,
        )  # fmt: skip
        algorithm = TD3(
            policy=ContinuousDeterministicPolicy(
                actor=actor, action_space=env.action_space,
                exploration_noise=GaussianNoise(sigma=0.1),
            ),
            policy_optim=AdamOptimizerFactory(lr=1e-4),
            critic=continuous_critic([128, 128]), critic_optim=AdamOptimizerFactory(lr=1e-3),
            critic2=continuous_critic([128, 128]), critic2_optim=AdamOptimizerFactory(lr=1e-3),
            tau=0.005, gamma=0.99, policy_noise=0.2, update_actor_freq=2, noise_clip=0.5,
            n_step_return_horizon=3,
        )  # fmt: skip
        params = {"max_epochs": 5, "epoch_num_steps": 20_000, "batch_size": 128,
                  "collection_step_num_env_steps": 8,
                  "update_step_num_gradient_steps_per_sample": 0.125}  # fmt: skip
    else:
        raise ValueError(f"no Tianshou settings for {algo!r}")
    train_collector = Collector[CollectStats](
        algorithm, train_envs, VectorReplayBuffer(buffer_size, n_train),
        exploration_noise=algo != "ppo",
    )  # fmt: skip
    test_collector = Collector[CollectStats](algorithm, test_envs)

    # Tianshou 2.0.1's collect_time does not accumulate: count steps, time and returns here
    tally = {"env_steps": 0, "test_seconds": 0.0, "best": float("-inf")}
    train_collect, test_collect = train_collector.collect, test_collector.collect

    def counted_collect(*args: Any, **kwargs: Any) -> Any:
        stat = train_collect(*args, **kwargs)
        tally["env_steps"] += stat.n_collected_steps
        return stat

    def timed_test(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        stat = test_collect(*args, **kwargs)
        tally["test_seconds"] += time.perf_counter() - t0
        if stat.n_collected_episodes:
            tally["best"] = max(tally["best"], float(stat.returns_stat.mean))
        return stat

    train_collector.collect = counted_collect
    test_collector.collect = timed_test
    start = 0.0

    def training_fn(epoch: int, env_step: int) -> None:
        if time.perf_counter() - start > cap:
            raise TimeCap
        if algo == "dqn":
            eps_schedule(epoch, env_step)

    trainer_params = {
        "training_collector": train_collector,
        "test_collector": test_collector,
        "test_step_num_episodes": 10,
        "stop_fn": lambda mean: mean >= threshold,
        "training_fn": training_fn,
        "test_in_training": True,
        "show_progress": False,
        "verbose": False,
        **params,
    }
    start = time.perf_counter()
    try:
        if algo == "dqn":  # the test's initial random-policy collection, timed
            with policy_within_training_step(algorithm.policy):
                train_collector.reset()
                train_collector.collect(n_step=64 * n_train)
        if algo == "ppo":
            algorithm.run_training(OnPolicyTrainerParams(**trainer_params))
        else:
            algorithm.run_training(OffPolicyTrainerParams(**trainer_params))
    except TimeCap:
        pass
    seconds = time.perf_counter() - start
    out = _result(seconds, tally["env_steps"], tally["best"], threshold, tally["test_seconds"])
    out["setup_seconds"] = round(start - setup, 3)
    out["settings"] = "Tianshou v2.0.1 test hyper-parameters, 10 test episodes"
    train_envs.close()
    test_envs.close()
    return out


RUNNERS = {"epochtrain": run_epochtrain, "sb3": run_sb3, "tianshou": run_tianshou}


# ---------------------------------------------------------------------------- summary
def _versions() -> dict[str, str]:
    versions = {"torch": torch.__version__, "gymnasium": gym.__version__,
                "numpy": np.__version__, "python": platform.python_version()}  # fmt: skip
    for name, module in (("stable_baselines3", "stable_baselines3"), ("tianshou", "tianshou")):
        try:
            versions[name] = __import__(module).__version__
        except ImportError:
            versions[name] = "missing"
    import epochtrain

    src = Path(epochtrain.__file__).resolve().parent.parent
    versions["epochtrain_src"] = str(src)
    snapshot = src.parent / "COMMIT"  # a `git archive` copy of a commit, e.g. for long runs
    if snapshot.exists():
        versions["epochtrain"] = snapshot.read_text().strip()
        return versions
    repo = src.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no", "src"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        versions["epochtrain"] = commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        versions["epochtrain"] = "unknown"
    return versions


def _mmm(values: list[float], fmt: str) -> str:
    if not values:
        return "–"
    med, lo, hi = statistics.median(values), min(values), max(values)
    return f"**{med:{fmt}}** ({lo:{fmt}}–{hi:{fmt}})"


def _p_faster(ours: dict[int, dict[str, Any]], theirs: dict[int, dict[str, Any]]) -> str:
    """P(a run of ours takes less time than a run of theirs) over every pair of seeds.

    Seed ``s`` of two libraries draws from unrelated random streams, so the pairing by seed
    number carries no information; this compares the two distributions instead (Agarwal
    et al. 2021's probability of improvement, ties 1/2, with a 95% bootstrap interval from
    :func:`epochtrain.experiment.pairwise_improvement`; a capped run counts with its cap).
    """
    from epochtrain.experiment import pairwise_improvement

    scores = {
        "ours": [[-r["seconds"]] for r in ours.values()],
        "theirs": [[-r["seconds"]] for r in theirs.values()],
    }
    if len(scores["ours"]) < 2 or len(scores["theirs"]) < 2:
        return "–"
    est = pairwise_improvement(scores, pairs=[("ours", "theirs")], seed=0)[("ours", "theirs")]
    return f"{est:.2f}"


def summary(runs: list[dict[str, Any]], algos: list[str], libraries: list[str]) -> str:
    """Markdown: per task and library, then the paired ratios epochtrain / peer."""
    lines = [
        "| task | library | reached | seconds median (min–max) | env steps median (min–max) "
        "| test seconds median | seconds per seed |",
        "|---|---|---|---|---|---|---|",
    ]
    ratio_lines = [
        "| task | peer | seeds | epochtrain / peer, median (min–max) | seeds epochtrain faster "
        "| P(epochtrain faster) [95% CI], all seed pairs |",
        "|---|---|---|---|---|---|",
    ]
    for algo in algos:
        env_id, threshold = TASKS[algo]
        task = f"{algo.upper()} {env_id} → {threshold:g}"
        by_lib = {
            lib: {r["seed"]: r for r in runs if r["algo"] == algo and r["library"] == lib}
            for lib in libraries
        }
        for lib in libraries:
            rows = list(by_lib[lib].values())
            if not rows:
                continue
            secs = [r["seconds"] for r in rows]
            marks = ["" if r["reached"] else "*" for r in rows]
            per_seed = ", ".join(f"{s:.1f}{m}" for s, m in zip(secs, marks, strict=True))
            lines.append(
                f"| {task} | {lib} | {sum(r['reached'] for r in rows)}/{len(rows)} "
                f"| {_mmm(secs, '.1f')} | {_mmm([r['env_steps'] for r in rows], ',.0f')} "
                f"| {statistics.median(r['test_seconds'] for r in rows):.2f} "
                f"| {per_seed} |"
            )
        ours = by_lib.get("epochtrain", {})
        peers = [lib for lib in libraries if lib != "epochtrain"]
        # a run that did not reach the threshold counts with its (capped) time: a lower
        # bound on the peer's time, so the ratio against it is an upper bound
        for peer in [*peers, "best peer"]:
            ratios = []
            for seed, mine in ours.items():
                if peer == "best peer":
                    theirs = [by_lib[p][seed]["seconds"] for p in peers if seed in by_lib[p]]
                    if not theirs:
                        continue
                    ratios.append(mine["seconds"] / min(theirs))
                elif seed in by_lib[peer]:
                    ratios.append(mine["seconds"] / by_lib[peer][seed]["seconds"])
            if ratios:
                faster = sum(r < 1 for r in ratios)
                unpaired = "–" if peer == "best peer" else _p_faster(ours, by_lib[peer])
                ratio_lines.append(
                    f"| {task} | {peer} | {len(ratios)} | {_mmm(ratios, '.2f')} "
                    f"| {faster}/{len(ratios)} | {unpaired} |"
                )
    return "\n".join(lines) + "\n\n" + "\n".join(ratio_lines)


def main(argv: list[str] | None = None) -> None:
    """Parse the flags, run every (seed, task, library), print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--algos", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=LIBRARIES)
    parser.add_argument("--cap", type=float, default=240.0, help="wall-clock cap per run (s)")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "peers.jsonl",
        help="append one JSON line per run here",
    )  # fmt: skip
    parser.add_argument(
        "--table-from", type=Path, default=None,
        help="print the tables of the runs in this JSONL file and exit",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.table_from is not None:
        runs = [json.loads(line) for line in args.table_from.read_text().splitlines() if line]
        print(summary(runs, args.algos, args.libraries))
        return
    torch.set_num_threads(1)
    versions = _versions()
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    command = " ".join(["python", *sys.argv])
    print(f"versions: {versions}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    runs: list[dict[str, Any]] = []
    for seed in args.seeds:
        for algo in args.algos:
            env_id, threshold = TASKS[algo]
            for lib in args.libraries:
                run = RUNNERS[lib](algo, env_id, threshold, seed, args.cap)
                load = os.getloadavg()[0]
                run = {"library": lib, "algo": algo, "env": env_id, "threshold": threshold,
                       "seed": seed, **run, "cap": args.cap, "loadavg_1min": round(load, 2),
                       "versions": versions, "torch_threads": torch.get_num_threads(),
                       "command": command, "date": date}  # fmt: skip
                runs.append(run)
                print(
                    f"seed {seed} {algo:4s} {lib:10s}: {run['seconds']:7.2f} s, "
                    f"{run['env_steps']:>7,} env steps, best {run['best_test_return']:8.1f}, "
                    f"reached={run['reached']}, test {run['test_seconds']:.2f} s, "
                    f"load {load:.1f}",
                    flush=True,
                )
                if args.out is not None:
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    with args.out.open("a") as f:
                        f.write(json.dumps(run) + "\n")
    print()
    print(summary(runs, args.algos, args.libraries))


if __name__ == "__main__":
    main()
