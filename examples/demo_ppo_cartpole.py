"""Demo: train PPO on CartPole-v1 with a progress bar and TensorBoard logs under runs/.

Run with ``make demo`` (or ``python examples/demo_ppo_cartpole.py``). It prints one line per
epoch and ends with the mean test return of the last test.
"""

from __future__ import annotations

import time

import torch

from epochtrain import make_trainer


def main() -> None:
    torch.set_num_threads(1)
    logdir = f"runs/CartPole-v1_ppo_seed0_{time.strftime('%Y%m%d-%H%M%S')}"
    trainer = make_trainer("ppo", "CartPole-v1", seed=0, logdir=logdir, verbose=True)
    info = trainer.run()
    last = trainer.last_test_stat
    assert last is not None and last.returns_stat is not None
    print(
        f"Done ({trainer.stop_reason}) in {info.total_time:.1f} s, {info.env_step} env steps. "
        f"Mean test return: {last.returns_stat.mean:.1f} over {last.n_collected_episodes} "
        f"episodes. TensorBoard: tensorboard --logdir {logdir}"
    )
    trainer.logger.close()


if __name__ == "__main__":
    main()
