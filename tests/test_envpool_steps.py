"""The env steps EnvPool runs count, in both autoreset modes of ``EnvPoolVectorEnv``.

The default, EnvPool's own NEXT_STEP autoreset (the step after an episode's end only resets
the env, ignoring its action), is what ``env_backend="envpool"`` builds: the collector
stores such a reset step as an invalid row and counts it nowhere, and a collect step of
``n`` env steps stops at the first vector step that reaches ``n``, so it collects ``n`` to
``n + num_envs - 1`` steps, every one a real transition. ``autoreset_mode=SAME_STEP``
(built by hand) resets ended envs in the same step, as sync envs do, and counts as they do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from epochtrain import make_trainer
from epochtrain.data import Collector, ReplayBuffer
from epochtrain.envs import EnvPoolVectorEnv
from epochtrain.trainer import OffpolicyTrainer
from epochtrain.trainer.params import OffpolicyParams
from tests.trainer.test_base import comparable
from tests.trainer.tiny import TinyPolicy

pytest.importorskip("envpool", reason="the envpool extra is not installed")

NUM_ENVS = 4
SETTINGS: dict[str, Any] = dict(
    num_envs=NUM_ENVS,
    num_test_envs=2,
    episode_per_test=2,
    step_per_epoch=64,
    show_progress=False,
    stop_fn=None,
)


def count_run(
    algo: str, step_per_collect: int
) -> tuple[list[list[int]], list[list[int]], list[tuple[int, int]]]:
    """A short ``env_backend="envpool"`` run: per epoch, the env steps of each collect step
    and the buffer's valid transitions after it; (steps, env_step) of each ``EpochStats``."""
    # few gradient steps: the counts are what is checked
    extra: dict[str, Any] = {"repeat_per_collect": 1, "batch_size": None}
    if algo == "dqn":
        extra = {"warmup_steps": 32, "update_per_step": 0.1, "batch_size": 16}
    collects: list[list[int]] = []
    valid: list[list[int]] = []
    with make_trainer(
        algo,
        "CartPole-v1",
        env_backend="envpool",
        max_epoch=3,
        step_per_collect=step_per_collect,
        **SETTINGS,
        **extra,
    ) as trainer:
        assert trainer.train_collector.env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        buffer = trainer.train_collector.buffer
        env_step = [0]

        def epoch_start(epoch: int) -> None:
            collects.append([])
            valid.append([])
            env_step[0] = trainer.state.env_step

        def after_collect() -> None:  # pre_optim_steps: each collect step's update step
            collects[-1].append(trainer.state.env_step - env_step[0])
            valid[-1].append(buffer.n_valid)
            env_step[0] = trainer.state.env_step

        trainer.register_op("epoch_start", epoch_start)
        trainer.register_op("pre_optim_steps", after_collect)
        stats = list(trainer)
    epochs = []
    for s in stats:
        assert s.train_collect_stat is not None
        epochs.append((s.train_collect_stat.n_collected_steps, s.info_stat.env_step))
    return collects, valid, epochs


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
@pytest.mark.parametrize("step_per_collect", [16, 10])
def test_an_envpool_collect_step_counts_n_to_n_plus_num_envs_minus_one_real_steps(
    algo: str, step_per_collect: int
) -> None:
    """Each collect step of ``n`` collects ``n`` to ``n + num_envs - 1`` steps; an epoch
    ends at the first collect step that reaches ``step_per_epoch``; the counts are the
    buffer's valid transitions (DQN: all since the start, PPO: the one rollout)."""
    n, step_per_epoch = step_per_collect, SETTINGS["step_per_epoch"]
    collects, valid, epochs = count_run(algo, n)
    env_step = epochs[0][1] - epochs[0][0]  # DQN's warm-up: 32 to 35 random steps
    assert env_step == (0 if algo == "ppo" else valid[0][0] - collects[0][0])
    assert 32 <= env_step <= 32 + NUM_ENVS - 1 or algo == "ppo"
    for sizes, stored, (epoch_steps, epoch_env_step) in zip(collects, valid, epochs, strict=True):
        assert all(n <= size <= n + NUM_ENVS - 1 for size in sizes)
        assert sum(sizes[:-1]) < step_per_epoch <= sum(sizes) == epoch_steps
        for size, n_valid in zip(sizes, stored, strict=True):
            env_step += size
            assert n_valid == (env_step if algo == "dqn" else size)
        assert epoch_env_step == env_step
    # EnvPool's reset steps count nowhere: the sizes are not sync's whole vector steps
    sync_size = -(-n // NUM_ENVS) * NUM_ENVS
    assert {size for sizes in collects for size in sizes} != {sync_size}


def test_same_step_envpool_built_by_hand_counts_exactly_and_stores_only_transitions() -> None:
    """With ``autoreset_mode=SAME_STEP`` a collect step of ``n`` (whole vector steps) is
    ``n`` steps in ``n / num_envs`` rows, all valid; an ended episode's ``obs_next`` is its
    final observation, and the next row starts the new episode."""
    envs = EnvPoolVectorEnv(
        "CartPole-v1", 3, max_episode_steps=5, autoreset_mode=AutoresetMode.SAME_STEP
    )
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    envs.action_space.seed(0)
    buffer = ReplayBuffer(300, 3)
    collector = Collector(TinyPolicy(envs), envs, buffer)
    collector.reset(seed=0)
    for _ in range(4):
        stats = collector.collect(n_step=12, random=True)
        assert stats.n_collected_steps == 12 and collector.last_collect_rows == 4
    assert buffer.n_valid == len(buffer) == 48
    batch = buffer.rollout()
    obs, obs_next = batch.obs, batch.obs_next
    assert isinstance(obs, torch.Tensor) and isinstance(obs_next, torch.Tensor)
    for env in range(3):
        ends = (batch.terminated[:, env] | batch.truncated[:, env]).nonzero().flatten().tolist()
        assert len(ends) >= 3  # episodes of at most 5 steps in 16 rows
        for row in range(15):
            chained = torch.equal(obs_next[row, env], obs[row + 1, env])
            assert chained == (row not in ends)
            if row in ends:  # CartPole's first observations are within 0.05 of 0
                assert float(obs[row + 1, env].abs().max()) <= 0.05
    envs.close()


def test_a_trainer_on_same_step_envpool_collects_exactly_step_per_epoch() -> None:
    """The opt-in for exact counts: an epoch of 64 steps in collect steps of 16 over 4
    envs is 64 env steps, every one a stored transition."""
    torch.manual_seed(0)
    envs = EnvPoolVectorEnv("CartPole-v1", NUM_ENVS, autoreset_mode=AutoresetMode.SAME_STEP)
    policy = TinyPolicy(envs)
    buffer = ReplayBuffer(1000, NUM_ENVS)
    params = OffpolicyParams(
        max_epoch=3,
        step_per_epoch=64,
        step_per_collect=16,
        batch_size=16,
        update_per_step=0.1,
        show_progress=False,
        seed=7,
    )
    trainer = OffpolicyTrainer(
        params=params,
        policy=policy,
        train_collector=Collector(policy, envs, buffer),
    )
    stats = list(trainer)
    assert [s.train_collect_stat.n_collected_steps for s in stats if s.train_collect_stat] == [
        64,
        64,
        64,
    ]
    assert [s.info_stat.env_step for s in stats] == [64, 128, 192]
    assert buffer.n_valid == len(buffer) == 192
    assert sum(s.train_collect_stat.n_collected_episodes for s in stats if s.train_collect_stat)
    envs.close()


def events(obs: Any, final: Any, term: np.ndarray, trunc: np.ndarray, i: int) -> list[Any]:
    """Env ``i``'s real step as (observation after it, terminated, truncated), then, if
    the episode ended, its new episode's first observation."""
    ended = bool(term[i] or trunc[i])
    last = final[i] if ended else obs[i]
    step = [(np.asarray(last).tolist(), bool(term[i]), bool(trunc[i]))]
    return [*step, ("first", obs[i].tolist())] if ended and final is not obs else step


@pytest.mark.filterwarnings("ignore:.*precision lowered by casting")  # the raw pool's Box
def test_same_step_resets_give_the_episodes_of_envpools_own_autoreset() -> None:
    """The reset moves one step earlier, onto no other random stream: each env's
    observations and episode ends are those of EnvPool's own NEXT_STEP pool (given the
    same actions) with its reset steps taken out. The default mode is that pool itself."""
    import envpool

    num_envs, limit, steps = 3, 4, 30
    raw = envpool.make_gymnasium("CartPole-v1", num_envs=num_envs, seed=5, max_episode_steps=limit)
    pool = EnvPoolVectorEnv(
        "CartPole-v1",
        num_envs,
        seed=5,
        max_episode_steps=limit,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    own = EnvPoolVectorEnv("CartPole-v1", num_envs, seed=5, max_episode_steps=limit)
    actions = np.random.default_rng(0).integers(0, 2, size=(steps, num_envs))
    first = raw.reset()[0]
    assert np.array_equal(first, pool.reset()[0]) and np.array_equal(first, own.reset()[0])
    expected: list[list[Any]] = [[] for _ in range(num_envs)]
    resetting = np.zeros(num_envs, dtype=bool)
    used = np.zeros(num_envs, dtype=np.int64)  # env i's k-th real step takes actions[k, i]
    while used.min() < steps:
        act = actions[np.minimum(used, steps - 1), np.arange(num_envs)]
        obs, _, term, trunc, _ = raw.step(act)
        own_obs, _, own_term, own_trunc, _ = own.step(act)
        assert np.array_equal(own_obs, obs) and np.array_equal(own_term | own_trunc, term | trunc)
        for i in range(num_envs):
            if resetting[i]:  # this step only reset env i (its action was ignored)
                expected[i].append(("first", obs[i].tolist()))
            elif used[i] < steps:
                expected[i] += events(obs, obs, term, trunc, i)
                used[i] += 1
        resetting = term | trunc
    got: list[list[Any]] = [[] for _ in range(num_envs)]
    for t in range(steps):
        obs, _, term, trunc, info = pool.step(actions[t])
        for i in range(num_envs):
            got[i] += events(obs, info.get("final_obs"), term, trunc, i)
    for i in range(num_envs):
        assert sum(1 for e in got[i] if e[0] == "first") >= 5  # episodes of at most 4 steps
        assert got[i] == expected[i][: len(got[i])]
    for envs in (raw, pool, own):
        envs.close()


@pytest.mark.filterwarnings("ignore:resuming .* with changed settings")  # max_epoch
def test_two_resumes_of_an_envpool_run_from_one_checkpoint_are_the_same(tmp_path: Path) -> None:
    """The pool does not pickle: a resume restarts its episodes with a seeded reset, so it
    differs from the uninterrupted run but not from another resume (docs/checkpointing.md),
    counts included: EnvPool's reset steps fall on the same steps."""
    common = dict(env_backend="envpool", **SETTINGS, step_per_collect=16, warmup_steps=32)
    common |= dict(batch_size=16, update_per_step=0.1)
    with make_trainer(
        "dqn", "CartPole-v1", max_epoch=1, checkpoint_dir=str(tmp_path / "ckpt"), **common
    ) as first:
        env_step = first.run().env_step
    runs = []
    for _ in range(2):
        with make_trainer(
            "dqn", "CartPole-v1", max_epoch=3, resume_from=str(tmp_path / "ckpt"), **common
        ) as resumed:
            runs.append([comparable(stats) for stats in resumed])
    assert runs[0] == runs[1] and [run["epoch"] for run in runs[0]] == [2, 3]
    for run in runs[0]:
        env_step += run["train_collect_stat"]["n_collected_steps"]
        assert 64 <= run["train_collect_stat"]["n_collected_steps"] <= 64 + 4 * (NUM_ENVS - 1)
        assert run["info_stat"]["env_step"] == env_step


def test_a_bad_autoreset_mode_is_named() -> None:
    with pytest.raises(ValueError, match=r"autoreset_mode must be AutoresetMode\.SAME_STEP or"):
        EnvPoolVectorEnv("CartPole-v1", 2, autoreset_mode=AutoresetMode.DISABLED)
