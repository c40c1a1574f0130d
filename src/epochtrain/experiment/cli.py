"""``epochtrain sweep`` and ``epochtrain compare``: run a grid of runs, then compare them.

``epochtrain sweep --algo ppo a2c --env CartPole-v1 Acrobot-v1 --seeds 0-9 --workers 2
--out exp/`` runs every (algorithm, env, seed) into ``exp/`` (re-running it resumes;
``--backend ray [--address auto]`` runs each as a Ray Tune trial, ``docs/cluster.md``);
``epochtrain compare exp/ [exp2/ ...] [--score final|best|auc] [--out report/]`` prints
IQM [95% CI], mean, median and the run count per env and algorithm, and with ``--out``
writes ``report.md`` and PNG figures. :mod:`epochtrain.cli` adds these subcommands.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from epochtrain.experiment.bootstrap import DEFAULT_REPS
from epochtrain.experiment.curves import SCORE_METHODS
from epochtrain.experiment.report import build_report
from epochtrain.experiment.runner import BACKENDS, grid, run_experiment
from epochtrain.extras import MissingExtraError

__all__ = [
    "add_compare_parser",
    "add_sweep_parser",
    "parse_seeds",
    "run_compare",
    "run_sweep",
]

# Flags of `train` that the experiment sets itself for every run.
_MANAGED = {"seed", "checkpoint-dir", "show-progress", "verbose"}


def parse_seeds(tokens: list[str]) -> list[int]:
    """Seeds from ``["0-4", "7", "9,11"]``: ranges (inclusive), single values, commas."""
    seeds: list[int] = []
    for token in (part for text in tokens for part in text.split(",") if part):
        first, dash, last = token.partition("-")
        try:
            values = range(int(first), int(last) + 1) if dash else [int(token)]
        except ValueError:
            raise ValueError(
                f"--seeds {token!r}: give seeds as numbers or inclusive ranges, e.g. "
                "--seeds 0 1 2 or --seeds 0-9"
            ) from None
        if not values:
            raise ValueError(f"--seeds {token!r}: the range is empty (write low-high)")
        seeds.extend(values)
    return list(dict.fromkeys(seeds))


def _setting_flags() -> dict[str, tuple[str, Any]]:
    from epochtrain.spec_args import spec_flags  # the flags of `train`, derived from the spec

    return {flag: v for flag, v in spec_flags().items() if flag not in _MANAGED}


def add_sweep_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``sweep`` to ``subparsers`` (of ``argparse``); returns the new parser."""
    from epochtrain.registry import ALGORITHMS

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sweep",
        help="run algorithms x envs x seeds into one directory (re-running resumes)",
        description=__doc__.splitlines()[2].strip(),
    )
    parser.add_argument("--algo", nargs="+", choices=sorted(ALGORITHMS), default=None)
    parser.add_argument("--env", nargs="+", default=None, help="gymnasium env ids")
    parser.add_argument("--seeds", nargs="+", default=["0"], help="e.g. 0 1 2, or 0-9")
    parser.add_argument("--out", required=True, help="experiment directory")
    parser.add_argument("--backend", choices=BACKENDS, default="lockstep")
    parser.add_argument(
        "--workers", type=int, default=None, help="processes: pool size; ray: trials at once"
    )
    parser.add_argument(
        "--address", default=None, help="ray: cluster address, auto or HOST:PORT (default: local)"
    )
    parser.add_argument("--gpus-per-run", type=float, default=0.0, help="ray: GPUs per trial")
    parser.add_argument(
        "--max-failures",
        type=int,
        default=3,
        help="ray, processes: restarts of a run whose worker process died",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    parser.add_argument("--config", default=None, metavar="FILE", help="run spec to start from")
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="set any setting"
    )
    for flag, (_, info) in _setting_flags().items():
        if info.type is bool:
            parser.add_argument(
                f"--{flag}", action=argparse.BooleanOptionalAction, default=None, help=info.help
            )
        else:
            parser.add_argument(f"--{flag}", default=None, help=f"{info.help} ({info.allowed})")
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    from epochtrain.spec import parse_value
    from epochtrain.spec_args import parse_set_options

    overrides: dict[str, Any] = {}
    for flag, (name, _) in _setting_flags().items():
        value = getattr(args, flag.replace("-", "_"))
        if value is not None:
            overrides[name] = parse_value(value) if isinstance(value, str) else value
    overrides.update(parse_set_options(args.set))
    return overrides


def run_sweep(args: argparse.Namespace) -> int:
    """Run the sweep of ``args``; 0 if every run finished, 1 if one failed, 2 on bad input."""
    from epochtrain.spec import RunSpec

    try:
        base = None if args.config is None else RunSpec.from_file(args.config)
        algos = args.algo or ([base.algo] if base is not None else None)
        if algos is None:
            raise ValueError("--algo is required (or give --config FILE naming one)")
        envs = args.env or [base.env_id if base is not None else "CartPole-v1"]
        specs = grid(algos, envs, parse_seeds(args.seeds), base=base, **_overrides(args))
        experiment = run_experiment(
            specs,
            args.out,
            backend=args.backend,
            workers=args.workers,
            show_progress=not args.no_progress,
            address=args.address,
            max_failures=args.max_failures,
            gpus_per_run=args.gpus_per_run,
        )
    except (ValueError, TypeError, FileNotFoundError, ConnectionError, MissingExtraError) as exc:
        print(f"epochtrain sweep: error: {exc}", file=sys.stderr)
        return 2
    wanted = {spec.run_id for spec in specs}
    failed = [r for r in experiment.runs if r.run_id in wanted and r.status != "finished"]
    print(f"{len(wanted) - len(failed)}/{len(wanted)} runs finished in {args.out}")
    for run in failed:
        print(f"  {run.run_id}: {run.status}: {run.error}", file=sys.stderr)
    if failed:
        print(
            "once fixed, run the same command again: finished runs are kept and the others "
            "continue from their latest checkpoints",
            file=sys.stderr,
        )
    return 1 if failed else 0


def add_compare_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``compare`` to ``subparsers`` (of ``argparse``); returns the new parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "compare",
        help="compare the runs of experiment directories with confidence intervals",
        description=__doc__.splitlines()[3].strip(),
    )
    parser.add_argument("paths", nargs="+", help="experiment directories (sweep --out)")
    parser.add_argument("--score", choices=SCORE_METHODS, default="final", help="run score")
    parser.add_argument("--out", default=None, help="write report.md and PNG figures here")
    parser.add_argument("--reps", type=int, default=DEFAULT_REPS, help="bootstrap replicates")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="ENV=SCORE",
        help="normalising reference of an env (default: its reward_threshold)",
    )
    parser.add_argument(
        "--random",
        action="append",
        default=[],
        metavar="ENV=SCORE",
        help="random-policy score of an env (default: measured over 100 episodes)",
    )
    return parser


def _env_values(items: list[str], option: str) -> dict[str, float]:
    values = {}
    for item in items:
        env, eq, text = item.partition("=")
        try:
            values[env.strip()] = float(text)
        except ValueError:
            eq = ""
        if not eq or not env:
            raise ValueError(f"{option} {item!r}: write {option} ENV=SCORE, e.g. Pendulum-v1=-150")
    return values


def run_compare(args: argparse.Namespace) -> int:
    """Print the comparison of ``args.paths`` (and write the report); 2 on bad input."""
    from epochtrain.experiment.results import load_experiment

    try:
        experiment = load_experiment(*args.paths)
        report = build_report(
            experiment,
            score=args.score,
            reps=args.reps,
            seed=args.seed,
            reference_scores=_env_values(args.reference, "--reference"),
            random_scores=_env_values(args.random, "--random"),
            out_dir=None if args.out is None else Path(args.out),
        )
    except (ValueError, FileNotFoundError) as exc:
        print(f"epochtrain compare: error: {exc}", file=sys.stderr)
        return 2
    print(report)
    return 0
