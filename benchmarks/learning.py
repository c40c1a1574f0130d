"""Learning bars: each algorithm over several seeds at a fixed budget, the table in the docs.

Protocol, per case and seed: ``make_trainer(algo, env, seed=s, stop_fn=None,
show_progress=False, max_epoch=E)`` with the factory's tuned defaults (plus the per-env settings and
any ``--override``), where E is the number of whole epochs that fit in the budget after
the warm-up (online cases: env steps, warm-up included; offline: gradient steps); a run
that uses more than the budget does not count as reached. The
metric is the **last** epoch's deterministic test return (10 episodes), not the best one.
A case passes when at least 4 of 5 seeds reach its target. One JSON line per run goes to
``--out``; ``--table`` prints the markdown table built from that file (the newest run per
case, seed and overrides) and ``--write-docs`` puts it into docs/benchmarks.md.

    OMP_NUM_THREADS=1 python benchmarks/learning.py sac-pendulum --seeds 0 1 2 3 4 \\
        --out benchmarks/results/learning.jsonl
    python benchmarks/learning.py --table --out benchmarks/results/learning.jsonl --write-docs

Offline cases read the dataset ``benchmarks/data/pendulum_medium.buf`` and, when it is
missing, record it first with ``epochtrain collect`` (see DATASET_COMMAND); their target is
the dataset policy's mean episode return, read from the dataset's ``.json`` sidecar.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from epochtrain.factory import DEFAULTS, make_trainer

ROOT = Path(__file__).resolve().parent.parent
DATASET = ROOT / "benchmarks" / "data" / "pendulum_medium.buf"
DATASET_COMMAND = [
    "collect",
    "--env",
    "Pendulum-v1",
    "--algo",
    "ppo",
    "--train-until",
    "-500",
    "--train-steps",
    "200000",
    "--steps",
    "50000",
    "--seed",
    "0",
    "--out",
    str(DATASET),
]
"""``epochtrain collect`` arguments that record the medium-policy Pendulum dataset."""


@dataclass(frozen=True)
class Case:
    """One learning bar: ``algo`` on ``env`` for ``budget`` steps must reach ``target``."""

    algo: str
    env: str
    budget: int
    target: float | None  # None: the dataset policy's return (offline cases)
    offline: bool = False
    overrides: Mapping[str, Any] = field(default_factory=dict)


_MUJOCO = {"warmup_steps": 10_000, "step_per_epoch": 10_000, "buffer_size": 100_000}

CASES: dict[str, Case] = {
    "dqn-cartpole": Case("dqn", "CartPole-v1", 50_000, 475.0),
    "ppo-cartpole": Case("ppo", "CartPole-v1", 100_000, 475.0),
    "a2c-cartpole": Case("a2c", "CartPole-v1", 200_000, 475.0),
    "pg-cartpole": Case("pg", "CartPole-v1", 200_000, 475.0),
    "sac-cartpole": Case("sac", "CartPole-v1", 50_000, 475.0),
    "ppo-pendulum": Case("ppo", "Pendulum-v1", 200_000, -300.0),
    "sac-pendulum": Case("sac", "Pendulum-v1", 20_000, -200.0),
    "td3-pendulum": Case("td3", "Pendulum-v1", 20_000, -200.0),
    "ddpg-pendulum": Case("ddpg", "Pendulum-v1", 20_000, -200.0),
    "bc-pendulum-medium": Case("bc", "Pendulum-v1", 20_000, None, offline=True),
    "td3bc-pendulum-medium": Case("td3bc", "Pendulum-v1", 20_000, None, offline=True),
    "cql-pendulum-medium": Case("cql", "Pendulum-v1", 20_000, None, offline=True),
    # rl-baselines3-zoo's MuJoCo settings: 10k random warm-up steps, the paper's networks
    "sac-halfcheetah": Case("sac", "HalfCheetah-v5", 100_000, None, overrides=_MUJOCO),
    "td3-halfcheetah": Case("td3", "HalfCheetah-v5", 100_000, None, overrides=_MUJOCO),
}
"""Every learning bar of the project, by name."""


def epochs_for(case: Case, overrides: Mapping[str, Any]) -> int:
    """Whole epochs that fit the budget after the warm-up, with the factory's settings."""
    spec = DEFAULTS[case.algo]
    merged = {**spec.trainer, **spec.per_env.get(case.env, {}), **overrides}
    steps = case.budget - (0 if case.offline else int(merged.get("warmup_steps", 0)))
    epochs = steps // int(merged["step_per_epoch"])
    if epochs < 1:
        raise ValueError(f"budget {case.budget} leaves no whole epoch for {case.algo}")
    return epochs


def dataset_meta() -> dict[str, Any]:
    """The sidecar of the offline dataset, recording it first when it is missing."""
    sidecar = DATASET.with_name(DATASET.name + ".json")
    if not DATASET.exists() or not sidecar.exists():
        cmd = [sys.executable, "-m", "epochtrain", *DATASET_COMMAND]
        print("recording the dataset:", shlex.join(cmd), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
    meta: dict[str, Any] = json.loads(sidecar.read_text())
    return meta


def run_one(name: str, case: Case, seed: int, extra: Mapping[str, Any]) -> dict[str, Any]:
    """Train one seed of ``case`` for its whole budget; return the run's figures."""
    overrides: dict[str, Any] = {**case.overrides, **extra}
    target = case.target
    meta: dict[str, Any] = {}
    if case.offline:
        from epochtrain.data import ReplayBuffer

        meta = dataset_meta()
        target = float(meta["return_mean"])
        overrides["buffer"] = ReplayBuffer.load(DATASET)
    trainer = make_trainer(
        case.algo,
        case.env,
        seed=seed,
        stop_fn=None,
        show_progress=False,
        max_epoch=epochs_for(case, overrides),
        **overrides,
    )
    start = time.perf_counter()
    for _ in trainer:
        pass
    seconds = time.perf_counter() - start
    info = trainer.info_stat()
    last = trainer.last_test_stat
    assert last is not None and last.returns_stat is not None
    final = last.returns_stat.mean
    used = info.gradient_step if case.offline else info.env_step
    return {
        "case": name,
        "algo": case.algo,
        "env": case.env,
        "seed": seed,
        "budget": case.budget,
        "offline": case.offline,
        "target": target,
        "final_return": final,
        "final_return_std": last.returns_stat.std,
        "reached": target is not None and final >= target and used <= case.budget,
        "best_test_return": info.best_test_return,
        "seconds": round(seconds, 2),
        "env_steps": info.env_step,
        "gradient_steps": info.gradient_step,
        "env_steps_per_s": round(info.env_step / seconds, 1) if info.env_step else None,
        "dataset": meta or None,
        "overrides": {k: repr(v) for k, v in extra.items()},
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
        "python": platform.python_version(),
        "command": shlex.join(["python", "benchmarks/learning.py", *sys.argv[1:]]),
    }


def _fmt(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}"


def summary_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table, one line per (case, overrides): the newest run of each seed."""
    newest: dict[tuple[str, str, int], dict[str, Any]] = {}
    for row in rows:
        newest[(row["case"], json.dumps(row["overrides"], sort_keys=True), row["seed"])] = row
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for (case, over, _), row in sorted(newest.items()):
        groups.setdefault((case, over), []).append(row)
    lines = [
        "| case | env | budget | target | final test return mean ± std (per seed) "
        "| reached | wall-clock median | env steps/s | command |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (case, over), runs in groups.items():
        finals = [r["final_return"] for r in runs]
        mean = statistics.fmean(finals)
        # one seed has no spread: print its value alone rather than a made-up "± 0"
        spread = f"**{_fmt(mean)}**"
        if len(finals) > 1:
            spread = f"**{_fmt(mean)} ± {_fmt(statistics.pstdev(finals))}**"
        target = runs[0]["target"]
        reached = sum(bool(r["reached"]) for r in runs)
        unit = "gradient steps" if runs[0]["offline"] else "env steps"
        speeds = [r["env_steps_per_s"] for r in runs if r["env_steps_per_s"]]
        speed = f"{statistics.median(speeds):,.0f}" if speeds else "–"
        overrides = json.loads(over)
        label = " ".join([case, *(f"{k}={v}" for k, v in overrides.items())])
        seeds = " ".join(str(r["seed"]) for r in runs)
        cmd = f"`python benchmarks/learning.py {case} --seeds {seeds}"
        cmd += "".join(f" --override {k}={v}" for k, v in overrides.items()) + "`"
        target_txt = "–" if target is None or math.isnan(target) else _fmt(target)
        per_seed = ", ".join(_fmt(f) for f in finals)
        reached_txt = "–" if target is None else f"{reached}/{len(runs)}"
        lines.append(
            f'| <a id="{case}"></a>{label} | {runs[0]["env"]} | {runs[0]["budget"]:,} {unit} '
            f"| {target_txt} | {spread} ({per_seed}) "
            f"| {reached_txt} | {statistics.median(r['seconds'] for r in runs):.0f} s "
            f"| {speed} | {cmd} |"
        )
    return "\n".join(lines)


START, END = "<!-- learning-table:start -->", "<!-- learning-table:end -->"


def write_docs(table: str) -> None:
    """Replace the table between the markers in docs/benchmarks.md (append if absent)."""
    docs = ROOT / "docs" / "benchmarks.md"
    text = docs.read_text()
    block = f"{START}\n{table}\n{END}"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    docs.write_text(text)


def _parse_override(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--override wants key=value, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def main() -> None:
    """Run the named cases (or print the table); see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", choices=[*CASES, []], help="cases to run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--override", type=_parse_override, action="append", default=[])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/learning.jsonl")
    parser.add_argument("--table", action="store_true", help="print the table from --out")
    parser.add_argument("--write-docs", action="store_true", help="also put it in the docs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    extra = dict(args.override)
    for name in args.cases:
        for seed in args.seeds:
            row = run_one(name, CASES[name], seed, extra)
            print(
                f"{name} seed {seed}: final {row['final_return']:.1f} "
                f"(target {row['target']}) {row['seconds']:.0f} s {row['env_steps']} env steps",
                flush=True,
            )
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
    if args.table or args.write_docs:
        rows = [json.loads(line) for line in args.out.read_text().splitlines() if line]
        table = summary_table(rows)
        print(table)
        if args.write_docs:
            write_docs(table)


if __name__ == "__main__":
    main()
