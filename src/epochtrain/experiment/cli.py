"""``epochtrain sweep`` and ``epochtrain compare``: run a grid of runs, then compare them.

:data:`SWEEP_DESCRIPTION` and :data:`COMPARE_DESCRIPTION` say what each does (their
``--help``); :mod:`epochtrain.cli` adds the subcommands to its parser.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from epochtrain.cli import command_words
from epochtrain.experiment.bootstrap import DEFAULT_REPS
from epochtrain.experiment.curves import SCORE_METHODS
from epochtrain.experiment.report import (
    MIN_REPS,
    build_report,
    check_out_dir,
    check_report_reps,
)
from epochtrain.experiment.results import Experiment
from epochtrain.experiment.runner import BACKENDS, grid, run_experiment
from epochtrain.extras import MissingExtraError

__all__ = [
    "COMPARE_DESCRIPTION",
    "SWEEP_DESCRIPTION",
    "add_compare_parser",
    "add_sweep_parser",
    "parse_seeds",
    "run_compare",
    "run_sweep",
]

SWEEP_DESCRIPTION = (
    "Run every (algorithm, env, seed) of --algo x --env x --seeds into the --out directory, "
    "e.g. `epochtrain sweep --algo ppo a2c --env CartPole-v1 --seeds 0-9 --workers 2 --out "
    "exp/`. Re-running the same command skips finished runs and resumes the others from "
    "their latest checkpoints; --backend ray runs each as a Ray Tune trial (docs/cluster.md)."
)
COMPARE_DESCRIPTION = (
    "Compare the finished runs of experiment directories (the --out of `epochtrain sweep`): "
    "per env and algorithm the IQM with its 95% bootstrap interval, mean, median and run "
    "count; across envs the normalised aggregates; P(X > Y) for each pair of algorithms. "
    "--env, --algo and --seeds choose the runs compared; --out DIR writes report.md and PNG "
    "figures."
)

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
    from epochtrain.spec_args import flag_help

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sweep",
        help="run algorithms x envs x seeds into one directory (re-running resumes)",
        description=SWEEP_DESCRIPTION,
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
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="run spec file to start from, read for each --env (what it leaves out is that "
        "env's tuned setting)",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="set any setting"
    )
    for flag, (name, info) in _setting_flags().items():
        if info.type is bool:
            parser.add_argument(
                f"--{flag}", action=argparse.BooleanOptionalAction, default=None, help=info.help
            )
        else:
            parser.add_argument(f"--{flag}", default=None, help=flag_help(name, info))
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    from epochtrain.spec_args import parse_set_options
    from epochtrain.spec_files import parse_value

    overrides: dict[str, Any] = {}
    for flag, (name, _) in _setting_flags().items():
        value = getattr(args, flag.replace("-", "_"))
        if value is not None:
            overrides[name] = parse_value(value) if isinstance(value, str) else value
    overrides.update(parse_set_options(args.set))
    return overrides


def _check_workers(args: argparse.Namespace) -> None:
    """``--workers`` in the CLI's words: at least 1, and for the backends it sizes."""
    if args.workers is None:
        return
    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    if args.backend == "lockstep":
        raise ValueError(
            "--workers sizes the processes pool or the Ray trials at once; --backend "
            "lockstep runs every run in this process: drop --workers, or add --backend "
            "processes"
        )


def run_sweep(args: argparse.Namespace) -> int:
    """Run the sweep of ``args``; 0 if every run finished, 1 if one failed, 2 on bad input,
    3 if none failed but another sweep still runs some (skipped here, left untouched)."""
    from epochtrain.spec import RunSpec

    try:
        _check_workers(args)
        base = None if args.config is None else RunSpec.from_file(args.config)
        algos = args.algo or ([base.algo] if base is not None else None)
        if algos is None:
            raise ValueError("--algo is required (or give --config FILE naming one)")
        envs = args.env or [base.env_id if base is not None else "CartPole-v1"]
        # the file is read for each env: what it leaves out is that env's tuned setting
        specs = grid(algos, envs, parse_seeds(args.seeds), base=args.config, **_overrides(args))
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
        message = command_words(str(exc), ["--env"], spec_flags=False)
        print(f"epochtrain sweep: error: {message}", file=sys.stderr)
        return 2
    wanted = [r for r in experiment.runs if r.run_id in {spec.run_id for spec in specs}]
    elsewhere = [r for r in wanted if r.status == "running"]  # another sweep holds them
    failed = [r for r in wanted if r.status not in ("finished", "running")]
    print(f"{len(wanted) - len(failed) - len(elsewhere)}/{len(wanted)} runs finished in {args.out}")
    for run in elsewhere:
        print(f"  {run.run_id}: running in another sweep: {run.error}", file=sys.stderr)
    for run in failed:
        print(f"  {run.run_id}: {run.status}: {run.error}", file=sys.stderr)
    if failed:
        print(
            "once fixed, run the same command again: finished runs are kept and the others "
            "continue from their latest checkpoints",
            file=sys.stderr,
        )
    return 1 if failed else 3 if elsewhere else 0


def add_compare_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``compare`` to ``subparsers`` (of ``argparse``); returns the new parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "compare",
        help="compare the runs of experiment directories with confidence intervals",
        description=COMPARE_DESCRIPTION,
    )
    parser.add_argument("paths", nargs="+", help="experiment directories (sweep --out)")
    parser.add_argument("--score", choices=SCORE_METHODS, default="final", help="run score")
    parser.add_argument(
        "--out",
        default=None,
        help="write report.md and PNG figures here (an earlier report's figures are replaced)",
    )
    parser.add_argument("--env", nargs="+", default=None, help="compare only these envs")
    parser.add_argument("--algo", nargs="+", default=None, help="compare only these algorithms")
    parser.add_argument(
        "--seeds", nargs="+", default=None, help="compare only these seeds, e.g. 0-4 or 0 2 3"
    )
    parser.add_argument(
        "--reps",
        type=int,
        default=DEFAULT_REPS,
        help=f"bootstrap replicates (at least {MIN_REPS})",
    )
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


def _chosen(
    experiment: Experiment, envs: list[str] | None, algos: list[str] | None, seeds: list[int] | None
) -> Experiment:
    """The runs of ``experiment`` on ``envs``, of ``algos`` and ``seeds`` (``None``: all)."""
    for option, wanted, present in (
        ("--env", envs, experiment.envs),
        ("--algo", algos, experiment.algos),
        ("--seeds", seeds, sorted({r.seed for r in experiment.runs})),
    ):
        unknown = [w for w in wanted or [] if w not in present]
        if unknown:
            raise ValueError(f"{option} {unknown}: the experiment has {present}")
    runs = tuple(
        r
        for r in experiment.runs
        if (envs is None or r.env_id in envs)
        and (algos is None or r.algo in algos)
        and (seeds is None or r.seed in seeds)
    )
    return Experiment(runs)


def _check_complete(experiment: Experiment) -> None:
    """Every algorithm has a finished run of each of its seeds on every env, else a
    ``ValueError`` naming the runs by id and the options that leave them out."""
    missing = experiment.unfinished()
    if missing:
        raise ValueError(
            f"runs not finished: {', '.join(missing)}; every algorithm needs a finished run "
            "of each of its seeds on every env compared: re-run the sweep command to finish "
            "them, or leave them out with --env, --algo or --seeds (of the experiment's "
            f"envs {experiment.envs}, algorithms {experiment.algos})"
        )


def run_compare(args: argparse.Namespace) -> int:
    """Print the comparison of ``args.paths`` (and write the report); 2 on bad input.

    Every input is checked (``--reps``, the runs chosen, ``--out``) before the bootstrap."""
    from epochtrain.experiment.results import load_experiment

    try:
        reps = check_report_reps(args.reps, "--reps")
        seeds = None if args.seeds is None else parse_seeds(args.seeds)
        experiment = _chosen(load_experiment(*args.paths), args.env, args.algo, seeds)
        _check_complete(experiment)
        out_dir = None if args.out is None else Path(args.out)
        if out_dir is not None:
            check_out_dir(out_dir, "--out")
        report = build_report(
            experiment,
            score=args.score,
            reps=reps,
            seed=args.seed,
            reference_scores=_env_values(args.reference, "--reference"),
            random_scores=_env_values(args.random, "--random"),
            out_dir=out_dir,
        )
    except (ValueError, FileNotFoundError) as exc:
        print(f"epochtrain compare: error: {exc}", file=sys.stderr)
        return 2
    print(report)
    return 0
