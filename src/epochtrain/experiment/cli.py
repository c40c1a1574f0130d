"""``epochtrain sweep`` and ``epochtrain compare``: run a grid of runs, then compare them.

:data:`SWEEP_DESCRIPTION` and :data:`COMPARE_DESCRIPTION` say what each does (their
``--help``); :mod:`epochtrain.cli` adds the subcommands to its parser.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochtrain.cli import command_words
from epochtrain.errors import CheckpointError
from epochtrain.experiment.bootstrap import DEFAULT_REPS
from epochtrain.experiment.curves import SCORE_METHODS
from epochtrain.experiment.report import (
    MIN_REPS,
    build_report,
    check_out_dir,
    check_report_reps,
    check_report_seed,
)
from epochtrain.experiment.results import Experiment, RunResult
from epochtrain.experiment.runner import BACKENDS, grid, run_experiment
from epochtrain.extras import MissingExtraError

if TYPE_CHECKING:
    from epochtrain.spec import RunSpec

__all__ = [
    "COMPARE_DESCRIPTION",
    "MAX_REPS",
    "MAX_SEEDS",
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


MAX_SEEDS = 1000
"""The most seeds ``--seeds`` takes: each is a run per algorithm and env (its own directory,
spec, log and checkpoints); rliable-style statistics settle with tens of seeds, and a
larger grid is set up from the Python API (:func:`~epochtrain.experiment.grid`)."""


def parse_seeds(tokens: list[str]) -> list[int]:
    """Seeds from ``["0-4", "7", "9,11"]``: ranges (inclusive), single values, commas;
    ``ValueError`` naming ``--seeds`` for a negative seed or more than :data:`MAX_SEEDS`."""
    seeds: list[int] = []
    for token in (part for text in tokens for part in text.split(",") if part):
        if token.startswith("-") and token[1:].strip().isdigit():
            raise ValueError(f"--seeds {token!r}: seeds must be >= 0, e.g. --seeds 0 1 2")
        first, dash, last = token.partition("-")
        try:
            low, high = (int(first), int(last)) if dash else (int(token), int(token))
        except ValueError:
            raise ValueError(
                f"--seeds {token!r}: give seeds as numbers or inclusive ranges, e.g. "
                "--seeds 0 1 2 or --seeds 0-9"
            ) from None
        if high < low:
            raise ValueError(f"--seeds {token!r}: the range is empty (write low-high)")
        if high - low + 1 + len(seeds) > MAX_SEEDS:
            raise ValueError(
                f"--seeds {' '.join(tokens)}: at most {MAX_SEEDS} seeds (each is a run of "
                "every algorithm on every env), e.g. --seeds 0-9; for more, build the grid "
                "with epochtrain.experiment.grid"
            )
        seeds.extend(range(low, high + 1))
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
        default=None,
        help="ray, processes: restarts of a run whose worker process died (default 3)",
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
    """The settings the flags and ``--set`` give every run; ``ValueError`` for one given
    twice (``--max-epoch 5 --set max_epoch=6``), naming both."""
    from epochtrain.spec_args import check_given_once, parse_set_options, parse_value_of

    overrides: dict[str, Any] = {}
    typed: list[tuple[str, str]] = []
    for flag, (name, _) in _setting_flags().items():
        value = getattr(args, flag.replace("-", "_"))
        if value is not None:
            overrides[name] = parse_value_of(name, value) if isinstance(value, str) else value
            typed.append((name, f"--{'no-' if value is False else ''}{flag}"))
    sets = [(item.partition("=")[0].strip(), f"--set {item}") for item in args.set]
    check_given_once([*typed, *sets])
    overrides.update(parse_set_options(args.set))
    return overrides


def _check_backend_options(args: argparse.Namespace) -> None:
    """``--workers`` and ``--max-failures`` in the CLI's words: in range, and given only to
    the backends they are for."""
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    if args.max_failures is not None and args.max_failures < 0:
        raise ValueError(f"--max-failures must be at least 0, got {args.max_failures}")
    if args.backend != "lockstep":
        return
    if args.workers is not None:
        raise ValueError(
            "--workers sizes the processes pool or the Ray trials at once; --backend "
            "lockstep runs every run in this process: drop --workers, or add --backend "
            "processes"
        )
    if args.max_failures is not None:
        raise ValueError(
            "--max-failures counts restarts of a run whose worker process died; --backend "
            "lockstep runs every run in this process, which restarts nothing: drop "
            "--max-failures, or add --backend processes"
        )


def _check_config_algo(base: RunSpec | None, algos: list[str] | None) -> None:
    """``--algo`` other than the algorithm of ``--config FILE`` (a file holds one
    algorithm's settings), refused in the CLI's words."""
    if base is not None and algos is not None and algos != [base.algo]:
        raise ValueError(
            f"--algo {' '.join(algos)}: --config {base.algo} settings run {base.algo} only: "
            f"drop --algo, or give --algo {base.algo} (one sweep per config file)"
        )


def run_sweep(args: argparse.Namespace) -> int:
    """Run the sweep of ``args``; 0 if every run ended (those that stopped early, e.g. on
    non-finite values with ``--on-nonfinite stop``, are listed), 1 if one failed, 2 on bad
    input, 3 if none failed but another sweep still runs some (skipped here, untouched)."""
    from epochtrain.spec import RunSpec

    try:
        _check_backend_options(args)
        base = None if args.config is None else RunSpec.from_file(args.config)
        _check_config_algo(base, args.algo)
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
    return _summary(experiment, {spec.run_id for spec in specs}, args.out)


def _summary(experiment: Experiment, run_ids: set[str], out: str) -> int:
    """Print how the runs ``run_ids`` of ``experiment`` ended; the sweep's exit status."""
    wanted = [r for r in experiment.runs if r.run_id in run_ids]
    elsewhere = [r for r in wanted if r.status == "running"]  # another sweep holds them
    failed = [r for r in wanted if r.status not in ("finished", "running")]
    early = [r for r in wanted if r.status == "finished" and r.stop_reason not in _PLANNED]
    line = f"{len(wanted) - len(failed) - len(elsewhere)}/{len(wanted)} runs finished in {out}"
    print(line + (f" ({len(early)} stopped early, listed below)" if early else ""))
    for run in early:
        print(f"  {run.run_id}: stopped early: {_early_stop(run)}", file=sys.stderr)
    if early:
        print(
            "runs that stopped early are finished: a sweep does not run them again, and "
            "`epochtrain compare` scores them as they ended; delete a run's directory to "
            "run its seed again",
            file=sys.stderr,
        )
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


_PLANNED = ("max_epoch", "stop_fn")
"""The ``stop_reason`` of a run that ended as planned: its last epoch, or its goal."""


def _early_stop(run: RunResult) -> str:
    """Why and where ``run`` stopped early: its ``stop_reason``, epochs and steps reached."""
    from epochtrain.experiment.runs import RESULT_FILE, read_json, spec_of

    reason = {"nonfinite": "non-finite values (on_nonfinite='stop')"}.get(
        str(run.stop_reason), f"stop_reason {run.stop_reason!r}"
    )
    where = []
    if run.path is not None:
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            epochs = read_json(run.path / RESULT_FILE).get("epochs")
            where.append(f"epoch {epochs} of {spec_of(run.path).trainer.max_epoch}")
    if run.steps.size:
        where.append(f"last test at step {int(run.steps[-1])}")
    return f"{reason}, at {', '.join(where)}" if where else reason


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
        help=f"bootstrap replicates ({MIN_REPS} to {MAX_REPS})",
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
    """``ENV=SCORE`` items of ``option`` as a dict; ``ValueError`` naming ``option`` for a
    malformed item, a score that is not finite, or an env given twice."""
    values: dict[str, float] = {}
    for item in items:
        env, eq, text = item.partition("=")
        env = env.strip()
        try:
            value = float(text)
        except ValueError:
            eq = ""
        if not eq or not env:
            raise ValueError(f"{option} {item!r}: write {option} ENV=SCORE, e.g. Pendulum-v1=-150")
        if not math.isfinite(value):
            raise ValueError(f"{option} {item!r}: the score must be a finite number")
        if env in values:
            raise ValueError(
                f"{option} {item!r}: {option} gives {env} twice ({values[env]:g} and "
                f"{value:g}): give each env once"
            )
        values[env] = value
    return values


def _check_env_values(
    experiment: Experiment, reference: dict[str, float], random: dict[str, float]
) -> None:
    """``--reference`` and ``--random`` name envs of ``experiment`` (a typo would be
    ignored), and each env's reference lies above its random score."""
    from epochtrain.experiment.normalization import check_reference_scores

    check_reference_scores(
        reference,
        random,
        tasks=experiment.envs,
        reference_name="--reference",
        random_name="--random",
    )


MAX_REPS = 100_000
"""The most bootstrap replicates ``compare --reps`` takes: ten times the default, seconds
per (env, algorithm) cell; the 95% interval's ends move by far less than its width past
that (Agarwal et al. 2021 use 2,000 to 50,000)."""


def _check_reps(reps: int) -> int:
    """``--reps`` within :data:`MIN_REPS` to :data:`MAX_REPS`, else a ``ValueError``."""
    check_report_reps(reps, "--reps")
    if reps > MAX_REPS:
        raise ValueError(
            f"--reps must be at most {MAX_REPS} (the default {DEFAULT_REPS} gives a 95% "
            f"interval to about 1%), got {reps}"
        )
    return reps


def _chosen(experiment: Experiment, envs: list[str] | None, algos: list[str] | None) -> Experiment:
    """The runs of ``experiment`` on ``envs`` and of ``algos`` (``None``: all); ``--seeds``
    is applied as the runs are read (:func:`~epochtrain.experiment.load_experiment`)."""
    for option, wanted, present in (
        ("--env", envs, experiment.envs),
        ("--algo", algos, experiment.algos),
    ):
        unknown = [w for w in wanted or [] if w not in present]
        if unknown:
            raise ValueError(f"{option} {unknown}: the experiment has {present}")
    runs = tuple(
        r
        for r in experiment.runs
        if (envs is None or r.env_id in envs) and (algos is None or r.algo in algos)
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
        reps = _check_reps(args.reps)
        check_report_seed(args.seed, "--seed")
        reference = _env_values(args.reference, "--reference")
        random = _env_values(args.random, "--random")
        seeds = None if args.seeds is None else parse_seeds(args.seeds)
        experiment = _chosen(
            load_experiment(*args.paths, seeds=seeds, seeds_name="--seeds"), args.env, args.algo
        )
        _check_complete(experiment)
        _check_env_values(experiment, reference, random)
        out_dir = None if args.out is None else Path(args.out)
        if out_dir is not None:
            check_out_dir(out_dir, "--out")
        report = build_report(
            experiment,
            score=args.score,
            reps=reps,
            seed=args.seed,
            reference_scores=reference,
            random_scores=random,
            out_dir=out_dir,
        )
    except CheckpointError as exc:  # a file of the report cannot be written (a full disk)
        print(f"epochtrain compare: error: {exc}", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError) as exc:
        print(f"epochtrain compare: error: {exc}", file=sys.stderr)
        return 2
    print(report)
    return 0
