"""Collector throughput against a plain env loop, measured side by side in one process.

Workload: CartPole-v1, 8 envs in a ``gymnasium`` SyncVectorEnv (``make_vec(...,
vectorization_mode="sync")``), a 2x64 tanh MLP acting greedily (argmax), no learning.
Contenders, each on its own identically built vector env:

* ``collector``: ``Collector`` with a ``ReplayBuffer`` attached (every transition written);
* ``plain``: ``obs -> torch -> MLP (inference_mode) -> argmax -> numpy -> env.step``;
* ``collector_nobuf``: ``Collector`` without a buffer (skip with ``--no-nobuf``);
* ``collector_dqn``: ``Collector`` with a buffer and the library's own ``DQN`` policy (2x64
  ReLU Q-network) acting epsilon-greedily as in training, epsilon 0.04 (skip with
  ``--no-dqn``).

After an unmeasured warm-up, each round resets every contender's env with the same seed
and has each make ``--transitions`` transitions, interleaved in ``--chunks`` alternating
slices (A, B, C, A, B, C, ...) so that drifting machine load hits all of them alike.
A transition is one env's step inside an episode: with NEXT_STEP autoreset the step that
only resets a finished env is none (the collector stores it as invalid and does not
count it), so the plain loop does not count it either. Prints a markdown table of
transitions/s per round and the ratio collector/plain (median, min, max); ``--out``
appends one JSON line per round.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/throughput.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from torch import Tensor

from epochtrain.algorithms import DQN
from epochtrain.data import Collector, Obs, ReplayBuffer
from epochtrain.nets import MLP, flat_dim

ENV_ID = "CartPole-v1"


class GreedyMLPActor:
    """A minimal ``Actor``: argmax of an MLP's outputs; observations already on CPU."""

    def __init__(self, net: MLP) -> None:
        self.net = net

    def to_tensor(self, obs: Obs) -> Obs:
        return obs

    def act(self, obs: Obs, deterministic: bool = False) -> tuple[Tensor, dict[str, Tensor]]:
        assert isinstance(obs, Tensor)
        return self.net(obs).argmax(-1), {}


def make_env(num_envs: int, mode: AutoresetMode) -> gym.vector.VectorEnv[Any, Any, Any]:
    return gym.make_vec(
        ENV_ID,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode},
    )


class PlainLoop:
    """``obs -> torch -> MLP -> argmax -> numpy -> env.step``, nothing else."""

    def __init__(self, env: gym.vector.VectorEnv[Any, Any, Any], net: MLP) -> None:
        self.env, self.net = env, net
        self.next_step = env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        self.obs: Any = None
        self.resetting = np.zeros(env.num_envs, dtype=bool)

    def reset(self, seed: int) -> None:
        self.obs, _ = self.env.reset(seed=seed)
        self.resetting[:] = False

    def run(self, n: int) -> int:
        """Step until ``n`` real transitions are made; returns how many were."""
        env, net, obs, resetting = self.env, self.net, self.obs, self.resetting
        num_envs = env.num_envs
        made = 0
        while made < n:
            with torch.inference_mode():
                act = net(torch.as_tensor(obs)).argmax(-1).numpy()
            obs, _, terminated, truncated, _ = env.step(act)
            if self.next_step:
                made += num_envs - int(np.count_nonzero(resetting))
                resetting = terminated | truncated
            else:
                made += num_envs
        self.obs, self.resetting = obs, resetting
        return made


class CollectorRun:
    """``Collector.collect(n_step=n)``, continuing in-flight episodes between calls."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def reset(self, seed: int) -> None:
        self.collector.reset(seed=seed)

    def run(self, n: int) -> int:
        return self.collector.collect(n_step=n).n_collected_steps


def measure_round(
    contenders: dict[str, PlainLoop | CollectorRun], transitions: int, chunks: int, seed: int
) -> dict[str, float]:
    """Transitions/s of each contender over one round, alternating ``chunks`` slices."""
    made = dict.fromkeys(contenders, 0)
    seconds = dict.fromkeys(contenders, 0.0)
    for contender in contenders.values():
        contender.reset(seed)
    chunk = -(-transitions // chunks)
    for _ in range(chunks):
        for name, contender in contenders.items():
            start = time.perf_counter()
            made[name] += contender.run(chunk)
            seconds[name] += time.perf_counter() - start
    return {name: made[name] / seconds[name] for name in contenders}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds")
    parser.add_argument(
        "--transitions", type=int, default=100_000, help="transitions per contender per round"
    )
    parser.add_argument(
        "--chunks", type=int, default=10, help="alternating slices a round is cut into"
    )
    parser.add_argument("--warmup", type=int, default=5_000, help="unmeasured transitions")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument(
        "--autoreset", choices=["next_step", "same_step"], default="next_step", help="env mode"
    )
    parser.add_argument("--capacity", type=int, default=100_000, help="buffer capacity")
    parser.add_argument("--no-nobuf", action="store_true", help="skip the collector_nobuf run")
    parser.add_argument("--no-dqn", action="store_true", help="skip the collector_dqn run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="append JSON lines here")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    mode = AutoresetMode[args.autoreset.upper()]
    names = ("collector", "plain", "nobuf", "dqn")
    envs = {name: make_env(args.num_envs, mode) for name in names}
    action_space = envs["plain"].single_action_space
    assert isinstance(action_space, gym.spaces.Discrete)
    obs_dim = flat_dim(envs["plain"].single_observation_space)
    net = MLP(obs_dim, int(action_space.n), hidden=(64, 64))
    net.eval()
    actor = GreedyMLPActor(net)
    buffer = ReplayBuffer(args.capacity, args.num_envs)
    contenders: dict[str, PlainLoop | CollectorRun] = {
        "collector": CollectorRun(Collector(actor, envs["collector"], buffer, exploration=False)),
        "plain": PlainLoop(envs["plain"], net),
    }
    if not args.no_nobuf:
        contenders["collector_nobuf"] = CollectorRun(
            Collector(actor, envs["nobuf"], exploration=False)
        )
    if not args.no_dqn:
        dqn = DQN(
            envs["dqn"].single_observation_space,
            action_space,
            hidden=(64, 64),
            epsilon_start=0.04,
            epsilon_end=0.04,
        )
        dqn_buffer = ReplayBuffer(args.capacity, args.num_envs)
        contenders["collector_dqn"] = CollectorRun(Collector(dqn, envs["dqn"], dqn_buffer))

    measure_round(contenders, args.warmup, 1, args.seed)
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        row: dict[str, Any] = {"round": r + 1}
        row.update(measure_round(contenders, args.transitions, args.chunks, args.seed + r + 1))
        row["ratio"] = row["collector"] / row["plain"]
        if "collector_nobuf" in row:
            row["ratio_nobuf"] = row["collector_nobuf"] / row["plain"]
        if "collector_dqn" in row:
            row["ratio_dqn"] = row["collector_dqn"] / row["plain"]
        rows.append(row)
        print(f"round {r + 1}/{args.rounds}: ratio {row['ratio']:.3f}", flush=True)
    for env in envs.values():
        env.close()

    columns = [
        c for c in ("collector", "plain", "collector_nobuf", "collector_dqn") if c in contenders
    ]
    ratios = [c for c in ("ratio", "ratio_nobuf", "ratio_dqn") if c in rows[0]]
    print(
        f"\n{ENV_ID}, {args.num_envs} sync envs ({args.autoreset}), greedy 2x64 tanh MLP, "
        f"{args.transitions} transitions per contender per round in {args.chunks} "
        f"alternating chunks, buffer capacity {args.capacity}, torch threads 1\n"
    )
    header = [*(f"{c} (transitions/s)" for c in columns), *(f"{c}" for c in ratios)]
    print("| round | " + " | ".join(header) + " |")
    print("|---" * (len(header) + 1) + "|")
    for row in rows:
        cells = [f"{row[c]:,.0f}" for c in columns] + [f"{row[c]:.3f}" for c in ratios]
        print(f"| {row['round']} | " + " | ".join(cells) + " |")
    for label, fn in (("median", statistics.median), ("min", min), ("max", max)):
        cells = [f"{fn(r[c] for r in rows):,.0f}" for c in columns]
        cells += [f"{fn(r[c] for r in rows):.3f}" for c in ratios]
        print(f"| **{label}** | " + " | ".join(cells) + " |")

    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            for row in rows:
                meta = {"env": ENV_ID, "num_envs": args.num_envs, "autoreset": args.autoreset}
                f.write(json.dumps({**meta, "transitions": args.transitions, **row}) + "\n")


if __name__ == "__main__":
    main()
