"""Time to solve of a preset against variants of it, interleaved per seed in one process.

For each seed, runs the preset, then each ``--variant``, one after another (preset s0,
variant 1 s0, ..., preset s1, ...), each under the time-to-solve protocol of
``time_to_solve.py`` (until 10 deterministic test episodes reach ``--threshold``; training,
warm-up and every test timed, setup not). Env and gradient steps repeat exactly per seed
on CPU; seconds drift with the machine, so they are compared per seed against the preset
run minutes apart. Prints one line per run, then per variant: seeds reached, median
(min-max) seconds, env steps and gradient steps, and the median (min-max) of the per-seed
ratios variant / preset. ``--out`` appends one JSON line per run (``variant`` and
``overrides`` added to ``time_to_solve.py``'s fields).

    python benchmarks/variants.py --algo ppo --seeds 0-39 \\
        --variant zoo:gamma=0.98,gae_lambda=0.8,step_per_epoch=1024,max_epoch=100
    python benchmarks/variants.py --algo dqn --seeds 0-9 --variant ep512:step_per_epoch=512

A variant is ``NAME:setting=value,...``; values are JSON (``hidden=[64,64]``), settings
any name ``--set`` takes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from time_to_solve import THRESHOLDS, run_one


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME:key=value,...`` -> (name, overrides); values parsed as JSON."""
    name, _, body = text.partition(":")
    if not name or name == "preset":
        raise argparse.ArgumentTypeError(f"--variant needs a name other than 'preset': {text!r}")
    items: list[str] = []
    for part in filter(None, body.split(",")):
        if "=" not in part and items:  # a comma inside a JSON list: hidden=[64,64]
            items[-1] += "," + part
        else:
            items.append(part)
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"--variant {name}: {item!r} is not key=value")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    return name, overrides


def parse_seeds(values: list[str]) -> list[int]:
    """``0 1 2`` or ``0-9`` (both ends included)."""
    seeds: list[int] = []
    for v in values:
        first, _, last = v.partition("-")
        seeds += list(range(int(first), int(last or first) + 1))
    return seeds


def _mmm(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def summary(runs: list[dict[str, Any]], names: list[str]) -> str:
    """Markdown: per variant, seeds reached, medians and the per-seed ratio to the preset."""
    preset = {r["seed"]: r for r in runs if r["variant"] == "preset"}
    lines = [
        "| variant | reached | seconds median (min-max) | env steps median (min-max) "
        "| gradient steps median | seconds / preset per seed, median (min-max) |",
        "|---|---|---|---|---|---|",
    ]
    for name in names:
        rows = [r for r in runs if r["variant"] == name]
        ratios = [r["seconds"] / preset[r["seed"]]["seconds"] for r in rows if r["seed"] in preset]
        lines.append(
            f"| {name} | {sum(r['reached'] for r in rows)}/{len(rows)} "
            f"| {_mmm([r['seconds'] for r in rows], '.2f')} "
            f"| {_mmm([r['env_steps'] for r in rows], ',.0f')} "
            f"| {statistics.median(r['gradient_steps'] for r in rows):,.0f} "
            f"| {_mmm(ratios, '.2f')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", required=True)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--threshold", type=float, default=None)
    parser.add_argument("--seeds", nargs="+", default=["0-9"], help="e.g. 0 1 2 or 0-39")
    parser.add_argument("--variant", type=parse_variant, action="append", default=[])
    parser.add_argument("--out", type=Path, default=None, help="append one JSON line per run")
    args = parser.parse_args(argv)
    threshold = args.threshold if args.threshold is not None else THRESHOLDS.get(args.env)
    if threshold is None:
        parser.error(f"--threshold is needed for {args.env}")
    torch.set_num_threads(1)
    variants = [("preset", {}), *args.variant]
    runs = []
    for seed in parse_seeds(args.seeds):
        for name, overrides in variants:
            run = run_one(args.algo, args.env, threshold, seed, overrides)
            run = {**run, "variant": name, "reached": run["best_test_return"] >= threshold}
            runs.append(run)
            print(
                f"{name} seed {seed}: {run['seconds']:.2f} s, {run['env_steps']:,} env steps, "
                f"{run['gradient_steps']:,} gradient steps, reached={run['reached']}",
                flush=True,
            )
            if args.out is not None:
                with args.out.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(run) + "\n")
    print()
    print(summary(runs, [name for name, _ in variants]))


if __name__ == "__main__":
    main()
