"""Collector on counter envs whose every transition is known in advance (tests/fakes.py)."""

from __future__ import annotations

import functools
import math
import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from epochtrain.data import Collector, ReplayBuffer
from tests.fakes import (
    ParityPolicy,
    expected_return,
    expected_transitions,
    make_counter_env,
    make_vec,
    stored_transitions,
)

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]
MODE_IDS = ["next_step", "same_step"]


def _collector(
    lengths: list[int],
    *,
    mode: AutoresetMode = AutoresetMode.NEXT_STEP,
    max_steps: int | None = None,
    capacity: int | None = None,
    asynchronous: bool = False,
    dict_obs: bool = False,
    exploration: bool = True,
) -> tuple[Collector, ReplayBuffer | None, ParityPolicy]:
    env = make_vec(
        lengths, max_steps=max_steps, mode=mode, asynchronous=asynchronous, dict_obs=dict_obs
    )
    buf = None if capacity is None else ReplayBuffer(capacity, len(lengths))
    policy = ParityPolicy()
    return Collector(policy, env, buf, exploration=exploration), buf, policy


def _valid_transitions(
    buf: ReplayBuffer, lengths: list[int], max_steps: int | None = None
) -> list[list[Any]]:
    rollout = buf.rollout()
    out = []
    for env_id, length in enumerate(lengths):
        stored = stored_transitions(rollout, env_id)
        assert stored == expected_transitions(env_id, length, len(stored), max_steps)
        out.append(stored)
    return out


# ------------------------------------------------------------------ autoreset modes
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_next_step_and_same_step_store_the_same_valid_transitions(asynchronous: bool) -> None:
    lengths, max_steps = [2, 6, 3], 4
    stored = {}
    for mode in MODES:
        collector, buf, _ = _collector(
            lengths, mode=mode, max_steps=max_steps, capacity=90, asynchronous=asynchronous
        )
        assert buf is not None
        stats = collector.collect(n_step=60)
        collector.env.close()
        assert stats.n_collected_steps == buf.n_valid
        stored[mode] = _valid_transitions(buf, lengths, max_steps)
    for env_id in range(len(lengths)):
        same, nxt = stored[AutoresetMode.SAME_STEP][env_id], stored[AutoresetMode.NEXT_STEP][env_id]
        assert len(same) == 20  # SAME_STEP: every row of the column is a real transition
        n = min(len(same), len(nxt))
        assert n >= 14
        assert same[:n] == nxt[:n]


def test_next_step_reset_rows_are_invalid_never_sampled_nor_counted() -> None:
    lengths = [2, 5]
    collector, buf, _ = _collector(lengths, capacity=40)
    assert buf is not None
    stats = collector.collect(n_step=30)
    rollout = buf.rollout()
    assert rollout.valid is not None and isinstance(rollout.obs, torch.Tensor)
    # A reset row follows every episode end except one on the last stored row.
    done = rollout.done
    expected_invalid = torch.zeros_like(done)
    expected_invalid[1:] = done[:-1]
    assert torch.equal(~rollout.valid, expected_invalid)
    n_invalid = int(expected_invalid.sum())
    assert n_invalid > 0
    # The reset row of env 0 after its first episode: final obs -> next episode's first obs.
    assert rollout.obs[2, 0].tolist() == [0, 0, 2]
    assert rollout.obs_next[2, 0].tolist() == [0, 1, 0]
    assert buf.n_valid == len(buf) - n_invalid == stats.n_collected_steps
    torch.manual_seed(0)
    sample = buf.sample(2000)
    assert sample.index is not None
    drawn = buf.get(sample.index).valid
    assert drawn is not None and bool(drawn.all())
    assert isinstance(sample.obs, torch.Tensor) and isinstance(sample.obs_next, torch.Tensor)
    # Real transitions stay in their episode and advance t by one.
    assert torch.equal(sample.obs_next[:, 1], sample.obs[:, 1])
    assert torch.equal(sample.obs_next[:, 2], sample.obs[:, 2] + 1)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_env_reusing_its_obs_array_still_stores_distinct_obs_and_obs_next(
    mode: AutoresetMode,
) -> None:
    # copy=False: the vector env rewrites one observation array in place on every step.
    lengths = [2, 3]
    fns = [functools.partial(make_counter_env, i, n) for i, n in enumerate(lengths)]
    env = gym.vector.SyncVectorEnv(fns, copy=False, autoreset_mode=mode)
    buf = ReplayBuffer(40, 2)
    Collector(ParityPolicy(), env, buf).collect(n_step=20)
    _valid_transitions(buf, lengths)


def test_disabled_autoreset_raises_value_error() -> None:
    env = make_vec([3], mode=AutoresetMode.DISABLED)
    with pytest.raises(ValueError, match="DISABLED"):
        Collector(ParityPolicy(), env)


def test_rejects_non_vector_env_and_mismatched_buffer() -> None:
    env = make_vec([3, 3])
    with pytest.raises(TypeError, match="VectorEnv"):
        Collector(ParityPolicy(), env.envs[0])
    with pytest.raises(ValueError, match="num_envs"):
        Collector(ParityPolicy(), env, ReplayBuffer(10, 3))


def test_collect_needs_exactly_one_positive_amount() -> None:
    collector, _, _ = _collector([3])
    for kwargs in [{}, {"n_step": 1, "n_episode": 1}, {"n_step": 0}, {"n_episode": -1}]:
        with pytest.raises(ValueError):
            collector.collect(**kwargs)
    for name, value in [("n_step", 2.5), ("n_episode", "3"), ("n_step", True)]:
        with pytest.raises(ValueError, match=f"{name} must be a positive int, got {value!r}"):
            collector.collect(**{name: value})  # before any step
    assert collector.collect(n_step=np.int64(3)).n_collected_steps >= 3


# ------------------------------------------------------------------- n_step, n_episode
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("n_step", [1, 9, 10, 25])
def test_n_step_collects_whole_vector_steps_covering_n_step(
    mode: AutoresetMode, n_step: int
) -> None:
    lengths = [2, 7, 4]
    collector, buf, _ = _collector(lengths, mode=mode, capacity=300)
    assert buf is not None
    stats = collector.collect(n_step=n_step)
    assert n_step <= stats.n_collected_steps < n_step + len(lengths)
    assert stats.n_collected_steps == buf.n_valid
    if mode == AutoresetMode.SAME_STEP:
        assert stats.n_collected_steps == math.ceil(n_step / 3) * 3 == len(buf)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("n_episode", [2, 7, 12])
def test_n_episode_returns_exactly_n_episodes_spread_evenly_over_envs(
    mode: AutoresetMode, n_episode: int
) -> None:
    # Env 0's episodes are 10x shorter than env 1's: without the per-env quota most
    # collected episodes would come from env 0.
    lengths = [2, 20, 5]
    collector, _, _ = _collector(lengths, mode=mode)
    stats = collector.collect(n_episode=n_episode)
    quota = [n_episode // 3 + (i < n_episode % 3) for i in range(3)]
    want_lens = sorted(n for i, n in enumerate(lengths) for _ in range(quota[i]))
    want_returns = sorted(
        expected_return(i, n) for i, n in enumerate(lengths) for _ in range(quota[i])
    )
    assert stats.n_collected_episodes == n_episode == len(stats.returns)
    assert sorted(stats.lens.tolist()) == want_lens
    assert sorted(stats.returns.tolist()) == want_returns
    assert stats.returns_stat is not None
    assert stats.returns_stat.mean == pytest.approx(np.mean(want_returns))


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_n_episode_over_dict_obs_env(mode: AutoresetMode) -> None:
    lengths = [2, 4]
    collector, buf, _ = _collector(lengths, mode=mode, max_steps=3, capacity=40, dict_obs=True)
    assert buf is not None
    stats = collector.collect(n_episode=4)
    assert sorted(stats.lens.tolist()) == [2, 2, 3, 3]
    _valid_transitions(buf, lengths, max_steps=3)
    rollout = buf.rollout()
    assert isinstance(rollout.obs_next, dict)
    inner_t = rollout.obs_next["inner"]["t"][..., 0]
    assert torch.equal(inner_t.float(), rollout.obs_next["pos"][..., 2])


# ---------------------------------------------------------------------- truncation
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_truncated_step_keeps_true_final_obs_and_flags(mode: AutoresetMode) -> None:
    # env 0 terminates after 2 steps, env 1 would run 9 but TimeLimit truncates at 3.
    lengths, max_steps = [2, 9], 3
    collector, buf, _ = _collector(lengths, mode=mode, max_steps=max_steps, capacity=60)
    assert buf is not None
    stats = collector.collect(n_step=24)
    assert set(stats.lens.tolist()) == {2, 3}
    env0, env1 = _valid_transitions(buf, lengths, max_steps)
    ends0 = [tr for tr in env0 if tr.terminated or tr.truncated]
    ends1 = [tr for tr in env1 if tr.terminated or tr.truncated]
    assert ends0 and ends1
    for tr in ends0:
        assert tr.terminated and not tr.truncated
        assert tr.obs_next == (0, tr.obs[1], 2)
    for tr in ends1:
        assert tr.truncated and not tr.terminated
        # the true final observation, not the next episode's first one
        assert tr.obs_next == (1, tr.obs[1], 3)


def test_async_truncation_final_obs_in_same_step_mode() -> None:
    lengths, max_steps = [2, 9], 3
    collector, buf, _ = _collector(
        lengths, mode=AutoresetMode.SAME_STEP, max_steps=max_steps, capacity=20, asynchronous=True
    )
    assert buf is not None
    try:
        stats = collector.collect(n_episode=4)
    finally:
        collector.env.close()
    assert sorted(stats.lens.tolist()) == [2, 2, 3, 3]
    _, env1 = _valid_transitions(buf, lengths, max_steps)
    assert [tr.obs_next for tr in env1 if tr.truncated] == [(1, 0, 3), (1, 1, 3)]


# ------------------------------------------------------- in-flight episodes and reset
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_episode_split_across_collects_is_returned_whole(mode: AutoresetMode) -> None:
    collector, _, _ = _collector([5], mode=mode)
    first = collector.collect(n_step=3)
    assert first.n_collected_episodes == 0
    second = collector.collect(n_step=3)
    assert second.lens.tolist() == [5]
    assert second.returns.tolist() == [expected_return(0, 5)]


def test_next_step_reset_step_at_start_of_collect_is_not_counted() -> None:
    collector, buf, _ = _collector([3], capacity=20)
    assert buf is not None
    first = collector.collect(n_step=3)  # ends exactly on the episode's last step
    assert first.lens.tolist() == [3]
    second = collector.collect(n_step=3)  # 1 reset step + 3 real steps
    assert second.n_collected_steps == 3
    assert second.lens.tolist() == [3]
    assert second.returns.tolist() == [expected_return(0, 3)]
    assert len(buf) == 7 and buf.n_valid == 6


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_reset_restarts_in_flight_episodes(mode: AutoresetMode) -> None:
    collector, buf, _ = _collector([5, 5], mode=mode, capacity=40)
    assert buf is not None
    collector.collect(n_step=6)  # three steps into each env's first episode
    collector.reset(seed=0)
    stats = collector.collect(n_step=10)
    # The partial episodes are dropped: after the reset each env plays 5 fresh steps.
    assert stats.lens.tolist() == [5, 5]
    assert stats.returns.tolist() == [expected_return(0, 5), expected_return(1, 5)]
    rollout = buf.rollout()
    assert isinstance(rollout.obs, torch.Tensor)
    assert rollout.obs[3:, :, 2].tolist() == [[t, t] for t in range(5)]
    assert rollout.obs[3:, :, 1].eq(0).all()  # the seeded reset restarted the episode count


# ------------------------------------------------------------------- exploration
@pytest.mark.parametrize("exploration", [True, False])
def test_exploration_flag_sets_deterministic_actions(exploration: bool) -> None:
    collector, buf, policy = _collector([3, 4], capacity=40, exploration=exploration)
    assert buf is not None
    stats = collector.collect(n_episode=2)
    assert policy.calls and set(policy.calls) == {not exploration}
    acts = buf.rollout().act
    if exploration:
        assert bool(acts.ne(0).any())
        assert stats.returns.tolist() == [expected_return(0, 3), expected_return(1, 4)]
    else:
        assert bool(acts.eq(0).all())
        assert stats.returns.tolist() == [6.0, 10.0]  # sum of t + 1 with action 0


def test_random_collect_does_not_ask_the_policy() -> None:
    collector, buf, policy = _collector([3, 4], capacity=40)
    assert buf is not None
    stats = collector.collect(n_step=10, random=True)
    assert policy.calls == []
    assert stats.n_collected_steps >= 10
    assert buf.n_valid == stats.n_collected_steps


# ------------------------------------------------------------------------ state
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_state_dict_round_trip_resumes_in_flight_episode(mode: AutoresetMode) -> None:
    collector, _, policy = _collector([5], mode=mode)
    collector.collect(n_step=3)
    state = pickle.loads(pickle.dumps(collector.state_dict()))
    collector.collect(n_step=1)  # the saved state is a copy, not a view
    assert state["ep_len"].tolist() == [3]
    assert state["obs"].tolist() == [[0, 0, 3]]

    # A new collector on the same (not reset) env picks up where the state says.
    fresh = Collector(policy, collector.env)
    fresh.load_state_dict(state)
    collector.env.reset(seed=0)
    for t in range(3):  # replay the first three steps: the env is back at t = 3
        collector.env.step(np.array([t % 2]))
    stats = fresh.collect(n_step=2)
    # 7 of the return was earned before the state was saved, 10 after it was loaded
    assert stats.lens.tolist() == [5]
    assert stats.returns.tolist() == [expected_return(0, 5)]


def test_state_dict_carries_next_step_pending_reset() -> None:
    collector, _, policy = _collector([3])
    collector.collect(n_step=3)  # the env now owes a reset step
    state = collector.state_dict()
    assert state["resetting"].tolist() == [True]
    fresh = Collector(policy, collector.env)
    fresh.load_state_dict(state)
    stats = fresh.collect(n_step=1)
    assert stats.n_collected_steps == 1  # the reset step itself was not counted


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_a_restart_without_env_snapshot_ends_the_buffered_episodes_truncated(
    mode: AutoresetMode,
) -> None:
    """Envs that could not be saved restart their episodes on load: the buffer's newest
    row of each env must end its episode, or its n-step window runs into the new one."""
    collector, buf, _ = _collector([5, 5], mode=mode, capacity=40)
    assert buf is not None
    collector.collect(n_step=6)  # rows t = 0, 1, 2 of each env's first episode
    state = collector.state_dict(include_env=True)
    state["env"] = None  # as saved from an env that does not pickle (AsyncVectorEnv)
    collector.load_state_dict(state, restart_seed=0)
    stats = collector.collect(n_step=10)
    # the abandoned episodes count nowhere: each env plays 5 fresh steps, counted whole
    assert stats.lens.tolist() == [5, 5]
    assert stats.returns.tolist() == [expected_return(0, 5), expected_return(1, 5)]
    nb = buf.get(torch.arange(8), n_step=3, gamma=0.5)  # rows 0..3, flat t * 2 + env
    assert isinstance(nb.obs, torch.Tensor) and isinstance(nb.obs_next, torch.Tensor)
    assert nb.obs[:, 2].tolist() == [0, 0, 1, 1, 2, 2, 0, 0]  # row 3: the new episodes
    # rewards t + 1 + (env + t) % 2: env 0 pays 1, 3, 3 and env 1 pays 2, 2, 4 for
    # t = 0, 1, 2, in the abandoned episodes and in the new ones alike
    assert nb.rew.tolist() == [
        1 + 0.5 * 3 + 0.25 * 3, 2 + 0.5 * 2 + 0.25 * 4,
        3 + 0.5 * 3, 2 + 0.5 * 4,
        3, 4,
        1 + 0.5 * 3 + 0.25 * 3, 2 + 0.5 * 2 + 0.25 * 4,
    ]  # fmt: skip
    assert nb.discount is not None
    assert nb.discount.tolist() == [0.125, 0.125, 0.25, 0.25, 0.5, 0.5, 0.125, 0.125]
    assert nb.obs_next[:, 2].tolist() == [3, 3, 3, 3, 3, 3, 3, 3]
    assert nb.truncated.tolist() == [True] * 6 + [False] * 2
    assert not bool(nb.terminated.any())


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_a_restored_env_snapshot_continues_the_buffered_episodes(mode: AutoresetMode) -> None:
    collector, buf, _ = _collector([5, 5], mode=mode, capacity=40)
    assert buf is not None
    collector.collect(n_step=6)
    state, buffer_state = collector.state_dict(include_env=True), buf.state_dict()
    assert state["env"] is not None  # counter envs pickle
    collector.collect(n_step=4)  # the run goes on, then is put back
    buf.load_state_dict(buffer_state)
    collector.load_state_dict(state, restart_seed=0)
    stats = collector.collect(n_step=4)
    assert stats.lens.tolist() == [5, 5]  # the episodes went on: 3 steps before, 2 after
    _valid_transitions(buf, [5, 5])  # every flag as in an uninterrupted run
    assert not bool(buf.rollout().truncated.any())


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_a_long_episode_warns_once_with_its_length_counted_across_collects(
    mode: AutoresetMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    import epochtrain.data.collector as collector_module

    monkeypatch.setattr(collector_module, "LONG_EPISODE", 5_000)
    # env 0 ends every 3 steps, env 1 runs 9,000 steps; the episode collect looks at its
    # own row 4,096, where env 1's episode is that plus the rows collected before
    collector, _, _ = _collector([3, 9_000], mode=mode)
    collector.collect(n_step=2_000)
    length = collector.last_collect_rows + 4_096
    with pytest.warns(
        UserWarning, match=rf"CounterEnv has run {length:,} steps without ending"
    ) as record:
        stats = collector.collect(n_episode=2)
    assert sum("without ending" in str(w.message) for w in record) == 1
    assert sorted(stats.lens.tolist()) == [3, 9_000]


def test_a_policys_own_to_tensor_and_an_act_set_on_the_instance_are_called() -> None:
    from epochtrain import DQN
    from epochtrain.data.batch import ActResult, Obs

    class Doubling(DQN):
        """Acts on observations its own to_tensor doubles."""

        seen: list[float] = []  # noqa: RUF012 - a test's record

        def to_tensor(self, obs: Obs) -> Obs:
            assert isinstance(obs, torch.Tensor)
            return obs * 2.0

        def act(self, obs: Obs, deterministic: bool = False) -> ActResult:
            assert isinstance(obs, torch.Tensor)
            self.seen.append(float(obs[0, 0]))
            return super().act(obs, deterministic)

    env = gym.make_vec("CartPole-v1", num_envs=1, vectorization_mode="sync")
    policy = Doubling(env.single_observation_space, env.single_action_space, hidden=(8,))
    collector = Collector(policy, env)
    collector.reset(seed=0)
    first = float(collector._obs[0, 0])
    collector.collect(n_step=3)
    assert policy.seen[0] == pytest.approx(2.0 * first) and len(policy.seen) == 3

    calls: list[int] = []

    def act_on_instance(obs: Obs, deterministic: bool = False) -> ActResult:
        calls.append(1)
        return torch.zeros(1, dtype=torch.int64), {}

    object.__setattr__(policy, "act", act_on_instance)
    collector.collect(n_step=2)
    assert len(calls) == 2 and len(policy.seen) == 3
