"""Env-stepping throughput of make_envs backends: gymnasium sync, gymnasium async, EnvPool.

Each measurement is one ``Collector.collect(n_step=...)`` with uniform random actions into
a replay buffer (the path a trainer's collect step takes, minus the policy), reported as
env steps per second. Backends are interleaved in one process (sync, async, envpool,
sync, ...) so that load on the machine affects them alike; the median over repeats is
printed, one JSON line per (task, num_envs, backend).

    python benchmarks/envpool_throughput.py --env CartPole-v1 --num-envs 8 32 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from epochtrain.data import Collector, ReplayBuffer
from epochtrain.data.batch import ActResult, Obs
from epochtrain.envs import BACKENDS, make_envs


class RandomOnly:
    """An actor for ``collect(random=True)``, which never asks it for an action."""

    def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
        raise AssertionError("random collects do not call the policy")

    def to_tensor(self, obs: Obs) -> Obs:
        return obs


def measure(env_id: str, num_envs: int, steps: int, repeats: int) -> list[dict[str, object]]:
    """Steps per second of each backend, ``repeats`` interleaved rounds."""
    collectors = {}
    for backend in BACKENDS:
        envs = make_envs(env_id, num_envs, backend=backend)
        envs.action_space.seed(0)
        buffer = ReplayBuffer(steps + 4 * num_envs, num_envs)
        collectors[backend] = Collector(RandomOnly(), envs, buffer)
        collectors[backend].reset(seed=0)
        collectors[backend].collect(n_step=10 * num_envs, random=True)  # warm-up
    speeds: dict[str, list[float]] = {backend: [] for backend in BACKENDS}
    for _ in range(repeats):
        for backend, collector in collectors.items():
            assert collector.buffer is not None
            collector.buffer.clear()
            start = time.perf_counter()
            stats = collector.collect(n_step=steps, random=True)
            speeds[backend].append(stats.n_collected_steps / (time.perf_counter() - start))
    for collector in collectors.values():
        collector.env.close()
    return [
        {
            "env_id": env_id,
            "num_envs": num_envs,
            "backend": backend,
            "steps_per_s_median": round(statistics.median(values)),
            "steps_per_s_all": [round(v) for v in values],
        }
        for backend, values in speeds.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per measurement")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for num_envs in args.num_envs:
        for row in measure(args.env, num_envs, args.steps, args.repeats):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
