"""Offline RL on Pendulum-v1 in Python, end to end: a medium policy, its dataset, and
TD3+BC against behaviour cloning in lock-step.

1. PPO trains until its deterministic test return first reaches -500: a "medium" policy.
2. ``record_dataset`` saves 20,000 env steps of it, with its exploration, to
   ``offline_pendulum/pendulum_medium.buf`` (and the returns it got to ``.buf.json``).
3. TD3+BC and BC learn from that file; ``zip`` runs their epochs side by side, so each
   line compares the two after the same number of gradient steps.

Run with ``python examples/offline_pendulum.py`` (about a minute on one CPU core). The shell
equivalent is ``epochtrain collect ... --train-until -500`` then ``epochtrain train --dataset``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from epochtrain import EpochStats, make_trainer
from epochtrain.data import ReplayBuffer
from epochtrain.dataset import record_dataset

MEDIUM = -500.0
EPOCHS = 5


def mean_test_return(stats: EpochStats[Any]) -> float:
    """The mean return of an epoch's test episodes."""
    test = stats.test_collect_stat
    assert test is not None and test.returns_stat is not None
    return test.returns_stat.mean


def main(out_dir: Path = Path("offline_pendulum")) -> None:
    torch.set_num_threads(1)
    ppo = make_trainer(
        "ppo", "Pendulum-v1", seed=0, stop_fn=lambda best: best >= MEDIUM, show_progress=False
    )
    ppo.run()
    state = ppo.state
    print(
        f"PPO stopped at {state.env_step} env steps, best test return {state.best_test_return:.0f}"
    )

    path = out_dir / "pendulum_medium.buf"
    # overwrite: each run of the example records its dataset anew
    info = record_dataset(
        ppo.policy, "Pendulum-v1", 20_000, path, seed=0, policy_name="ppo", overwrite=True
    )
    print(
        f"Dataset {path}: {info.n_steps} steps, {info.n_episodes} episodes, "
        f"return {info.return_mean:.0f} ± {info.return_std:.0f}"
    )

    data = ReplayBuffer.load(path)  # read-only here: both trainers sample from it
    common: dict[str, Any] = {"buffer": data, "seed": 0, "max_epoch": EPOCHS, "stop_fn": None}
    td3bc = make_trainer("td3bc", "Pendulum-v1", step_per_epoch=1000, show_progress=False, **common)
    bc = make_trainer("bc", "Pendulum-v1", step_per_epoch=1000, show_progress=False, **common)
    for a, b in zip(td3bc, bc, strict=True):
        print(
            f"Epoch #{a.epoch} ({a.info_stat.gradient_step} gradient steps): "
            f"td3bc {mean_test_return(a):.0f}, bc {mean_test_return(b):.0f}, "
            f"dataset {info.return_mean:.0f}"
        )


if __name__ == "__main__":
    main()
