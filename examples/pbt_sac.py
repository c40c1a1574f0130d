"""Population Based Training over SAC's learning rates on Pendulum-v1 with Ray Tune.

Needs the ray extra (``pip install 'epochtrain[ray]'``); runs on a local Ray with 2 CPUs in
under two minutes. PBT (Jaderberg et al. 2017) trains a population; every
``perturbation_interval`` epochs a trailing trial copies a leading one's checkpoint
(weights, optimizer moments, replay buffer) and perturbs its learning rates.
:class:`epochtrain.ray.EpochTrainable` makes the copy keep the clone's new learning rates
(not the donor's, which the optimizer state carries) and draw random streams of its own.
"""

from __future__ import annotations

import tempfile

import ray
from ray import tune
from ray.tune.schedulers import PopulationBasedTraining

from epochtrain.ray import EpochTrainable, param_space
from epochtrain.spec import RunSpec

METRIC = "test/returns_stat/mean"
LRS = ("actor_lr", "critic_lr")


def main(population: int = 2, max_epoch: int = 4) -> None:
    spec = RunSpec.tuned("sac", "Pendulum-v1", seed=0).with_overrides(
        {
            "max_epoch": max_epoch,
            "step_per_epoch": 500,
            "warmup_steps": 250,
            "num_test_envs": 2,
            "episode_per_test": 2,
        }
    )
    mutations = {name: tune.loguniform(3e-4, 3e-3) for name in LRS}
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",  # epochs
        perturbation_interval=1,
        hyperparam_mutations=mutations,
    )
    space = param_space(spec, {**mutations, "seed": tune.grid_search(list(range(population)))})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as storage:
        tuner = tune.Tuner(
            EpochTrainable,
            param_space=space,
            tune_config=tune.TuneConfig(
                metric=METRIC, mode="max", scheduler=pbt, reuse_actors=True
            ),
            run_config=tune.RunConfig(
                storage_path=storage,
                checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1, num_to_keep=4),
                verbose=0,
            ),
        )
        results = tuner.fit()
        for index in range(len(results)):
            result = results[index]
            config, metrics = result.config or {}, result.metrics or {}
            lrs = ", ".join(f"{name} {config[name]:.2e}" for name in LRS)
            print(f"trial seed {config['seed']}: {lrs}: test return {metrics[METRIC]:.1f}")
        best = results.get_best_result(metric=METRIC, mode="max", scope="last")
        print(f"best test return {(best.metrics or {})[METRIC]:.1f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
