"""ASHA over PPO learning rates on CartPole-v1, each trial an epochtrain run on Ray Tune.

Needs the ray extra (``pip install 'epochtrain[ray]'``); runs on a local Ray with 2 CPUs in
under two minutes. Each trial is :class:`epochtrain.ray.EpochTrainable`: one Tune iteration
is one epoch, reported under the log tags (``test/returns_stat/mean``). ASHA (Li et al.
2020, "A System for Massively Parallel Hyperparameter Tuning") stops the trials whose test
return trails the others' at the same epoch, and Tune's checkpoints are epochtrain's.
"""

from __future__ import annotations

import tempfile

import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler

from epochtrain.ray import EpochTrainable, param_space
from epochtrain.spec import RunSpec

METRIC = "test/returns_stat/mean"


def main(num_samples: int = 4, max_epoch: int = 4) -> None:
    spec = RunSpec.tuned("ppo", "CartPole-v1", seed=0).with_overrides(
        {"max_epoch": max_epoch, "step_per_epoch": 1024, "num_test_envs": 4, "episode_per_test": 4}
    )
    # Setting names as RunSpec.with_overrides takes them; a typo fails here, before Ray starts.
    space = param_space(spec, {"lr": tune.loguniform(1e-4, 1e-2)})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as storage:
        tuner = tune.Tuner(
            EpochTrainable,  # 1 CPU per trial, so torch runs on one thread in each
            param_space=space,
            tune_config=tune.TuneConfig(
                metric=METRIC,
                mode="max",
                scheduler=ASHAScheduler(max_t=max_epoch, grace_period=1, reduction_factor=2),
                num_samples=num_samples,
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(
                storage_path=storage,
                checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1, num_to_keep=1),
                verbose=0,
            ),
        )
        results = tuner.fit()
        for index in range(len(results)):
            result = results[index]
            config, metrics = result.config or {}, result.metrics or {}
            print(
                f"trial lr={config['lr']:.2e}: {int(metrics['epoch'])} epochs, "
                f"test return {metrics[METRIC]:.1f}"
            )
        best = results.get_best_result(metric=METRIC, mode="max", scope="last")
        best_config, best_metrics = best.config or {}, best.metrics or {}
        print(f"best lr {best_config['lr']:.2e}: test return {best_metrics[METRIC]:.1f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
