"""P(X > Y) by ranks against the pairwise count, interleaved in one process.

``epochtrain.experiment.stats._improvement`` computes the Mann-Whitney U of every bootstrap
replicate from ranks; the reference below counts the pairs (the formula it replaced). Both
run on the same resampled scores, alternating A, B, A, B, ...; the script checks the two
results are equal and prints the seconds of each and their ratio per round.

    python benchmarks/pairwise_ranks.py --runs 1000 --reps 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import numpy.typing as npt

from epochtrain.experiment.stats import _improvement

FloatArray = npt.NDArray[np.float64]


def pairwise_count(xs: FloatArray, ys: FloatArray) -> FloatArray:
    """P(X > Y) by counting pairs (a tie counts 1/2), one run of X at a time."""
    wins = np.zeros(xs.shape[:-2] + xs.shape[-1:])
    for i in range(xs.shape[-2]):
        x_i = xs[..., i : i + 1, :]
        wins += (x_i > ys).sum(axis=-2) + 0.5 * (x_i == ys).sum(axis=-2)
    return np.asarray((wins / (xs.shape[-2] * ys.shape[-2])).mean(axis=-1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs per algorithm")
    parser.add_argument("--reps", type=int, default=1000, help="bootstrap replicates")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(400, 50, (args.runs, 1)))  # rounded: ties occur
    y = np.round(rng.normal(390, 50, (args.runs, 1)))
    pick_x = rng.integers(0, args.runs, (args.reps, args.runs))
    pick_y = rng.integers(0, args.runs, (args.reps, args.runs))
    xs, ys = x[pick_x], y[pick_y]  # [reps, runs, tasks]
    for r in range(args.rounds):
        start = time.perf_counter()
        ranks = _improvement(xs, ys)
        t_ranks = time.perf_counter() - start
        start = time.perf_counter()
        count = pairwise_count(xs, ys)
        t_count = time.perf_counter() - start
        assert np.allclose(ranks, count, rtol=0, atol=1e-12), "the two formulas differ"
        print(
            f"round {r}: ranks {t_ranks:.2f} s, pairwise count {t_count:.2f} s, "
            f"ratio {t_ranks / t_count:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
