"""Learning bars: each algorithm over several seeds at a fixed budget, run as an experiment.

Protocol, per case and seed: ``RunSpec.tuned(algo, env, seed=s)`` (the presets of
:mod:`epochtrain.presets`) with the case's overrides, no early stop (``stop_at=None``) and
``max_epoch=E``, where E is the number of whole epochs that fit in the budget after the
warm-up (online cases: env steps, warm-up included; offline: gradient steps); a run that
uses more than the budget does not count as reached. The metric is the **last** epoch's
deterministic test return (10 episodes), not the best one: ``epochtrain compare --score
final``. The cases of one group (their env, and online or offline) run through
:func:`epochtrain.experiment.run_experiment` into ``--out/<group>/`` with the processes
backend, so re-running the command skips finished runs and resumes interrupted ones::

    OMP_NUM_THREADS=1 python benchmarks/learning.py ppo-cartpole dqn-cartpole --seeds 0-9 \\
        --out /work/bench-learning
    epochtrain compare /work/bench-learning/CartPole-v1 --score final --out report/
    python benchmarks/learning.py --table --out /work/bench-learning --write-docs

``--table`` prints the markdown table of every case found under ``--out``: IQM [95% CI],
mean and median computed as ``epochtrain compare`` computes them (same bootstrap, same
seed), the per-seed finals and how many seeds reached the target; ``--write-docs`` puts
it into docs/benchmarks.md.

Offline cases read the dataset ``benchmarks/data/pendulum_medium.buf`` and, when it is
missing, record it first with ``epochtrain collect`` (see DATASET_COMMAND); their target is
the dataset policy's mean episode return, read from the dataset's ``.json`` sidecar.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epochtrain.experiment import load_experiment, run_experiment, summarize_tasks
from epochtrain.experiment.bootstrap import DEFAULT_REPS
from epochtrain.experiment.cli import parse_seeds
from epochtrain.experiment.runs import RESULT_FILE
from epochtrain.spec import RunSpec

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
    "--overwrite",  # run only when the file or its sidecar is missing: the pair is remade
]
"""``epochtrain collect`` arguments that record the medium-policy Pendulum dataset."""


@dataclass(frozen=True)
class Case:
    """One learning bar: ``algo`` on ``env`` for ``budget`` steps must reach ``target``."""

    algo: str
    env: str
    budget: int
    target: float | None  # None: the dataset policy's return (offline), or no bar (MuJoCo)
    offline: bool = False
    overrides: Mapping[str, Any] = field(default_factory=dict)

    @property
    def group(self) -> str:
        """The experiment directory of the case under ``--out``: one env, online or offline."""
        return f"{self.env}-offline" if self.offline else self.env


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

RUN_ORDER = [
    "pg-cartpole",
    "a2c-cartpole",
    "ppo-cartpole",
    "ddpg-pendulum",
    "td3-pendulum",
    "ppo-pendulum",
    "dqn-cartpole",
    "sac-pendulum",
    "sac-cartpole",
]
"""Cheapest first (CPU seconds per seed: 6, 14, 20, 35, 40, 60, 90, 90, 200), so that an
interrupted benchmark has finished as many whole cases as it could."""


def case_spec(case: Case, seed: int, extra: Mapping[str, Any] | None = None) -> RunSpec:
    """The run of ``case`` on ``seed``: tuned preset, overrides, whole budget, no early stop."""
    spec = RunSpec.tuned(case.algo, case.env, seed=seed).with_overrides(
        {**case.overrides, **(extra or {}), "stop_at": None}
    )
    if case.offline:
        spec = spec.with_overrides({"dataset": str(DATASET)})
    warmup = 0 if case.offline else int(getattr(spec.trainer, "warmup_steps", 0))
    epochs = (case.budget - warmup) // spec.trainer.step_per_epoch
    if epochs < 1:
        raise ValueError(f"budget {case.budget} leaves no whole epoch for {case.algo}")
    return spec.with_overrides({"max_epoch": epochs})


def case_of(run_algo: str, run_env: str, group: str) -> str | None:
    """The case name of a run found in the experiment directory ``group``."""
    for name, case in CASES.items():
        if case.algo == run_algo and case.env == run_env and case.group == group:
            return name
    return None


def dataset_target() -> float:
    """The offline target: the dataset policy's mean episode return (records it if missing)."""
    sidecar = DATASET.with_name(DATASET.name + ".json")
    if not DATASET.exists() or not sidecar.exists():
        cmd = [sys.executable, "-m", "epochtrain", *DATASET_COMMAND]
        print("recording the dataset:", shlex.join(cmd), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
    return float(json.loads(sidecar.read_text())["return_mean"])


def run_cases(names: Sequence[str], seeds: Sequence[int], out: Path, workers: int) -> None:
    """Run each case of ``names`` on ``seeds`` into its group's experiment under ``out``.

    One ``run_experiment`` call per case, in :data:`RUN_ORDER`: the runs of a case share
    their length, so the workers finish a case together and a stopped benchmark leaves
    whole cases behind it.
    """
    ordered = sorted(names, key=lambda n: RUN_ORDER.index(n) if n in RUN_ORDER else len(CASES))
    for name in ordered:
        case = CASES[name]
        if case.offline:
            dataset_target()
        specs = [case_spec(case, s) for s in seeds]
        print(f"{name}: {len(specs)} runs into {out / case.group}", flush=True)
        experiment = run_experiment(specs, out / case.group, backend="processes", workers=workers)
        wanted = {s.run_id for s in specs}
        unfinished = [
            r.run_id for r in experiment.runs if r.run_id in wanted and r.status != "finished"
        ]
        print(f"{name}: done; not finished: {unfinished or 'none'}", flush=True)


@dataclass(frozen=True)
class CaseResult:
    """The finished runs of one case, read back from its experiment directory."""

    name: str
    case: Case
    seeds: list[int]
    finals: list[float]
    used: list[float]
    """Env steps (gradient steps offline) of each run's last test."""
    seconds: list[float]
    target: float | None


def read_results(out: Path) -> list[CaseResult]:
    """Every case with finished runs in the experiment directories under ``out``."""
    results = []
    for index in sorted(out.glob("*/experiment.json")):
        group = index.parent.name
        experiment = load_experiment(index.parent)
        by_case: dict[str, list[Any]] = {}
        for run in experiment.finished():
            name = case_of(run.algo, run.env_id, group)
            if name is not None:
                by_case.setdefault(name, []).append(run)
        for name, runs in sorted(by_case.items()):
            runs.sort(key=lambda r: r.seed)
            case = CASES[name]
            walls = [json.loads((r.path / RESULT_FILE).read_text())["wall_time"] for r in runs]
            results.append(
                CaseResult(
                    name=name,
                    case=case,
                    seeds=[r.seed for r in runs],
                    finals=[r.score("final") for r in runs],
                    used=[float(r.steps[-1]) for r in runs],
                    seconds=[float(w) for w in walls],
                    target=dataset_target() if case.offline else case.target,
                )
            )
    return results


def _fmt(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}"


def summary_table(results: Sequence[CaseResult], *, reps: int = DEFAULT_REPS, seed: int = 0) -> str:
    """Markdown table, one line per case: IQM [95% CI] as ``epochtrain compare`` prints it."""
    lines = [
        "| case | env | budget | target | IQM [95% CI] | mean | median | final per seed "
        "| reached | wall-clock median | command |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for res in results:
        case = res.case
        scores = {case.algo: [[f] for f in res.finals]}
        summary = summarize_tasks(scores, tasks=[case.env], reps=reps, seed=seed)
        s = summary[case.algo][case.env]
        # the statistics as `epochtrain compare` prints them, one decimal
        iqm = f"**{s.iqm.estimate:.1f}** [{s.iqm.ci_low:.1f}, {s.iqm.ci_high:.1f}]"
        unit = "gradient steps" if case.offline else "env steps"
        target = "–" if res.target is None else _fmt(res.target)
        reached = "–"
        if res.target is not None:
            hits = sum(
                f >= res.target and u <= case.budget
                for f, u in zip(res.finals, res.used, strict=True)
            )
            reached = f"{hits}/{len(res.finals)}"
        seeds = _seed_text(res.seeds)
        lines.append(
            f'| <a id="{res.name}"></a>{res.name} | {case.env} | {case.budget:,} {unit} '
            f"| {target} | {iqm} | {s.mean.estimate:.1f} | {s.median.estimate:.1f} "
            f"| {', '.join(_fmt(f) for f in res.finals)} | {reached} "
            f"| {statistics.median(res.seconds):.0f} s "
            f"| `python benchmarks/learning.py {res.name} --seeds {seeds}` |"
        )
    return "\n".join(lines)


def _seed_text(seeds: Sequence[int]) -> str:
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return " ".join(str(s) for s in seeds)


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


def main() -> None:
    """Run the named cases (or print the table); see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", choices=[*CASES, []], help="cases to run")
    parser.add_argument("--seeds", nargs="+", default=["0-9"], help="e.g. 0 1 2, or 0-9")
    parser.add_argument(
        "--out", type=Path, default=Path("bench-learning"), help="root of the experiments"
    )
    parser.add_argument("--workers", type=int, default=2, help="processes running runs")
    parser.add_argument("--table", action="store_true", help="print the table from --out")
    parser.add_argument("--write-docs", action="store_true", help="also put it in the docs")
    args = parser.parse_args()
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        parser.error(str(exc))
    if args.cases:
        run_cases(args.cases, seeds, args.out, args.workers)
    if args.table or args.write_docs:
        table = summary_table(read_results(args.out))
        print(table)
        if args.write_docs:
            write_docs(table)


if __name__ == "__main__":
    main()
