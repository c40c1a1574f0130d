"""ReplayBuffer: ring storage per env, valid-only sampling, dict obs, persistence, n-step."""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from epochtrain.checkpoint import CheckpointError
from epochtrain.data import Collector, PrioritizedReplayBuffer, ReplayBuffer
from tests.fakes import ParityPolicy, make_vec


def _row(t: int, num_envs: int, valid: np.ndarray | None = None) -> dict[str, Any]:
    """Row ``t``: obs ``[t, env]``, rew ``10 t + env``, act ``env``; ends every 3rd row."""
    env = np.arange(num_envs)
    obs = np.stack([np.full(num_envs, t), env], axis=1).astype(np.float64)
    return {
        "obs": obs,
        "act": env.copy(),
        "rew": 10.0 * t + env,
        "terminated": np.full(num_envs, t % 3 == 2),
        "truncated": np.zeros(num_envs, dtype=bool),
        "obs_next": obs + np.array([1, 0]),
        "extras": {"value": (t + 0.5) * np.ones(num_envs), "logp": -np.ones(num_envs)},
        "valid": valid,
    }


def _filled(capacity: int, num_envs: int, n_rows: int) -> ReplayBuffer:
    buf = ReplayBuffer(capacity, num_envs)
    for t in range(n_rows):
        buf.add(**_row(t, num_envs))
    return buf


def _assert_same_rollout(a: ReplayBuffer, b: ReplayBuffer) -> None:
    ra, rb = a.rollout(), b.rollout()
    for name in ["obs", "act", "rew", "terminated", "truncated", "obs_next", "value", "valid"]:
        assert torch.equal(getattr(ra, name), getattr(rb, name)), name


# ------------------------------------------------------------------- construction
@pytest.mark.parametrize(
    ("capacity", "num_envs", "match"),
    [(2, 3, "capacity"), (0, 1, "capacity"), (10.0, 2, "capacity"), (10, 0, "num_envs")],
)
def test_bad_constructor_args_raise_value_error(capacity: Any, num_envs: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ReplayBuffer(capacity, num_envs)


def test_storage_is_time_by_env_with_capacity_split_over_envs() -> None:
    buf = _filled(capacity=10, num_envs=3, n_rows=5)  # 10 // 3 = 3 rows per env
    assert buf.rows == 3
    assert len(buf) == 9 == buf.n_valid
    rollout = buf.rollout()
    assert rollout.shape == (3, 3)
    assert isinstance(rollout.obs, torch.Tensor) and rollout.obs.shape == (3, 3, 2)
    assert rollout.obs.dtype == torch.float32  # float64 observations are stored as float32
    assert rollout.act.dtype == torch.int64 and rollout.rew.dtype == torch.float32


# ---------------------------------------------------------------------- ring order
def test_rollout_before_wrap_holds_only_filled_rows() -> None:
    buf = _filled(capacity=8, num_envs=2, n_rows=3)
    assert buf.rollout().rew.tolist() == [[0, 1], [10, 11], [20, 21]]


def test_ring_overwrite_keeps_per_env_time_order() -> None:
    buf = _filled(capacity=8, num_envs=2, n_rows=7)  # 4 rows per env, wrapped once
    rollout = buf.rollout()
    assert rollout.rew[:, 0].tolist() == [30, 40, 50, 60]
    assert rollout.rew[:, 1].tolist() == [31, 41, 51, 61]
    assert isinstance(rollout.obs_next, torch.Tensor)
    assert rollout.obs_next[:, 1, 0].tolist() == [4, 5, 6, 7]
    assert rollout.terminated[:, 0].tolist() == [False, False, True, False]  # t = 5 ends


def test_invalid_count_stays_right_when_invalid_rows_are_overwritten() -> None:
    buf = ReplayBuffer(4, 2)  # 2 rows
    buf.add(**_row(0, 2, valid=np.array([False, True])))
    buf.add(**_row(1, 2, valid=np.array([False, False])))
    assert buf.n_valid == 1
    buf.add(**_row(2, 2))  # overwrites row 0 (one invalid)
    assert buf.n_valid == 2
    buf.add(**_row(3, 2, valid=np.array([True, False])))  # overwrites row 1 (two invalid)
    assert buf.n_valid == 3
    valid = buf.rollout().valid
    assert valid is not None and int(valid.sum()) == buf.n_valid


# ------------------------------------------------------------------------ reading
def test_sample_returns_batch_size_valid_transitions_only() -> None:
    buf = ReplayBuffer(12, 3)
    for t in range(4):
        valid = np.array([t % 2 == 0, True, False])
        buf.add(**_row(t, 3, valid=valid))
    assert buf.n_valid == 6
    torch.manual_seed(0)
    batch = buf.sample(500)
    assert len(batch) == 500 and batch.rew.shape == (500,)
    assert isinstance(batch.obs, torch.Tensor) and batch.obs.shape == (500, 2)
    assert batch.valid is None  # every sampled row is valid: not gathered
    assert batch.index is not None
    read_back = buf.get(batch.index).valid
    assert read_back is not None and bool(read_back.all())
    allowed = {0.0, 20.0, 1.0, 11.0, 21.0, 31.0}
    seen = set(batch.rew.tolist())
    assert seen == allowed  # every valid row is reachable, no invalid row is drawn


def test_sample_with_bad_batch_size_raises() -> None:
    buf = _filled(capacity=4, num_envs=2, n_rows=1)
    for batch_size in [0, -3, 2.5]:
        with pytest.raises(ValueError, match="batch_size"):
            buf.sample(batch_size)


def test_sample_from_empty_buffer_raises() -> None:
    buf = ReplayBuffer(4, 2)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(2)
    buf.add(**_row(0, 2, valid=np.array([False, False])))
    with pytest.raises(ValueError, match="empty"):
        buf.sample(2)


def test_get_reads_flat_time_times_num_envs_plus_env_indices() -> None:
    buf = _filled(capacity=12, num_envs=3, n_rows=4)
    batch = buf.get(torch.tensor([0, 5, 7, 11]))
    assert batch.rew.tolist() == [0, 12, 21, 32]
    assert batch.act.tolist() == [0, 2, 1, 2]
    assert batch.value is not None and batch.value.tolist() == [0.5, 1.5, 2.5, 3.5]


def test_extras_are_stored_and_unknown_extras_rejected() -> None:
    buf = _filled(capacity=6, num_envs=2, n_rows=3)
    rollout = buf.rollout()
    assert rollout.value is not None and rollout.logp is not None
    assert rollout.value[:, 1].tolist() == [0.5, 1.5, 2.5]
    assert bool(rollout.logp.eq(-1).all())
    assert rollout.adv is None and rollout.ret is None
    bad = ReplayBuffer(6, 2)
    row = _row(0, 2)
    row["extras"] = {"q_values": np.zeros(2)}
    with pytest.raises(ValueError, match="q_values"):
        bad.add(**row)
    row["extras"] = {"valid": np.zeros(2, dtype=bool)}  # the buffer's own mask
    with pytest.raises(ValueError, match="valid"):
        bad.add(**row)


def test_clear_forgets_everything() -> None:
    buf = _filled(capacity=6, num_envs=2, n_rows=2)
    buf.add(**_row(2, 2, valid=np.array([False, True])))
    buf.clear()
    assert len(buf) == 0 and buf.n_valid == 0
    with pytest.raises(ValueError):
        buf.rollout()
    with pytest.raises(ValueError):
        buf.sample(1)
    buf.add(**_row(7, 2))
    assert buf.rollout().rew.tolist() == [[70, 71]]
    assert buf.n_valid == 2


def test_nested_dict_observations_are_stored_and_returned() -> None:
    buf = ReplayBuffer(6, 2)
    for t in range(4):
        obs = {
            "image": np.full((2, 3, 3), t, dtype=np.uint8),
            "state": {"pos": np.array([[t, 0.5], [t, 1.5]]), "step": np.array([t, t])},
        }
        obs_next = {
            "image": obs["image"] + 1,
            "state": {"pos": obs["state"]["pos"] + 1, "step": obs["state"]["step"] + 1},
        }
        buf.add(obs, np.zeros(2), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool), obs_next)
    rollout = buf.rollout()
    assert isinstance(rollout.obs, dict) and isinstance(rollout.obs_next, dict)
    image, state = rollout.obs["image"], rollout.obs["state"]
    assert isinstance(image, torch.Tensor) and isinstance(state, dict)
    assert image.dtype == torch.uint8 and image.shape == (3, 2, 3, 3)
    assert image[:, 0, 0, 0].tolist() == [1, 2, 3]
    assert state["step"].dtype == torch.int64
    assert state["pos"][:, 1].tolist() == [[1, 1.5], [2, 1.5], [3, 1.5]]
    assert rollout.obs_next["state"]["step"][:, 0].tolist() == [2, 3, 4]
    batch = buf.get(torch.tensor([1, 4]))
    assert isinstance(batch.obs, dict)
    assert batch.obs["state"]["pos"].tolist() == [[3, 1.5], [2, 0.5]]


# --------------------------------------------------------------------- persisting
def test_state_dict_round_trip_restores_contents_and_cursor() -> None:
    buf = _filled(capacity=8, num_envs=2, n_rows=6)
    buf.add(**_row(6, 2, valid=np.array([True, False])))
    copy = ReplayBuffer(8, 2)
    copy.load_state_dict(buf.state_dict())
    _assert_same_rollout(buf, copy)
    assert copy.n_valid == buf.n_valid == 7
    for b in (buf, copy):  # both continue writing at the same place
        b.add(**_row(7, 2))
    _assert_same_rollout(buf, copy)
    assert copy.n_valid == buf.n_valid == 7  # the overwritten row t = 3 was valid


def test_reloaded_buffer_ignores_stale_invalid_rows_left_by_clear() -> None:
    buf = ReplayBuffer(6, 2)  # 3 rows
    for t in range(3):
        buf.add(**_row(t, 2, valid=np.array([False, False])))
    buf.clear()
    buf.add(**_row(3, 2))  # row 0 rewritten; rows 1 and 2 still hold stale invalid flags
    copy = ReplayBuffer(6, 2)
    copy.load_state_dict(buf.state_dict())
    for b in (buf, copy):
        assert (len(b), b.n_valid) == (2, 2)
        b.add(**_row(4, 2))
        b.add(**_row(5, 2))
        b.add(**_row(6, 2))  # wraps onto row 0
        assert (len(b), b.n_valid) == (6, 6)


def test_state_dict_is_a_copy() -> None:
    buf = _filled(capacity=4, num_envs=2, n_rows=2)
    state = buf.state_dict()
    other = ReplayBuffer(4, 2)
    other.load_state_dict(state)
    buf.add(**_row(5, 2))
    other.add(**_row(9, 2))
    assert buf.rollout().rew[-1].tolist() == [50, 51]
    assert other.rollout().rew[-1].tolist() == [90, 91]
    third = ReplayBuffer(4, 2)
    third.load_state_dict(state)  # the state was not changed by the buffers loaded from it
    assert third.rollout().rew.tolist() == [[0, 1], [10, 11]]


def test_state_dict_of_empty_buffer_round_trips() -> None:
    copy = ReplayBuffer(4, 2)
    copy.load_state_dict(ReplayBuffer(4, 2).state_dict())
    assert len(copy) == 0
    copy.add(**_row(0, 2))
    assert copy.rollout().rew.tolist() == [[0, 1]]


def test_load_state_dict_of_other_shape_raises() -> None:
    state = _filled(capacity=8, num_envs=2, n_rows=1).state_dict()
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(6, 2).load_state_dict(state)
    state["storage"]["rew"] = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="rew"):
        ReplayBuffer(8, 2).load_state_dict(state)


def test_save_load_round_trip(tmp_path: Path) -> None:
    buf = _filled(capacity=8, num_envs=2, n_rows=5)
    path = tmp_path / "sub" / "buffer.pt"
    buf.save(path)
    loaded = ReplayBuffer.load(path)
    assert (loaded.capacity, loaded.num_envs, len(loaded)) == (8, 2, 8)
    _assert_same_rollout(buf, loaded)
    assert os.listdir(path.parent) == ["buffer.pt"]  # no temporary file left behind


def test_failing_save_leaves_previous_file_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "buffer.pt"
    _filled(capacity=4, num_envs=2, n_rows=1).save(path)
    before = path.read_bytes()

    def broken_save(obj: object, f: Any) -> None:
        f.write(b"half a buffer")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    # a write failure is a CheckpointError naming the file and the cause (data-safety issue)
    with pytest.raises(CheckpointError, match=r"cannot write buffer file .*disk full"):
        _filled(capacity=4, num_envs=2, n_rows=3).save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["buffer.pt"]
    assert ReplayBuffer.load(path).rollout().rew.tolist() == [[0, 1]]


def test_loading_corrupt_or_foreign_file_raises_value_error_naming_path(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"\x00not a torch file")
    with pytest.raises(ValueError, match=r"corrupt\.pt"):
        ReplayBuffer.load(corrupt)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(ValueError, match=r"foreign\.pt"):
        ReplayBuffer.load(foreign)
    with pytest.raises(FileNotFoundError, match=r"missing\.pt"):
        ReplayBuffer.load(tmp_path / "missing.pt")


# ------------------------------------------------------------------ n-step returns
def _n_step(buf: ReplayBuffer, flat: list[int], n_step: int, gamma: float) -> Any:
    return buf.n_step_batch(buf.get(torch.tensor(flat)), n_step, gamma)


def test_n_step_sums_discounted_rewards_and_stops_at_episode_end() -> None:
    buf = _filled(capacity=10, num_envs=2, n_rows=5)  # rew 10 t + env; terminated at t = 2
    # (t, env) = (0, 1), (1, 0), (3, 1), (4, 0): flat t * 2 + env
    nb = _n_step(buf, [1, 2, 7, 8], n_step=3, gamma=0.5)
    # (0, 1): 1 + .5 * 11 + .25 * 21, ends terminated at t = 2
    # (1, 0): 10 + .5 * 20, ends terminated at t = 2
    # (3, 1): 31 + .5 * 41, stops at the newest row t = 4: bootstrap with .5 ** 2
    # (4, 0): 40, the newest row itself: bootstrap with .5
    assert nb.rew.tolist() == pytest.approx([11.75, 20.0, 51.5, 40.0])
    assert nb.discount is not None
    assert nb.discount.tolist() == pytest.approx([0.0, 0.0, 0.25, 0.5])
    assert nb.terminated.tolist() == [True, True, False, False]
    assert isinstance(nb.obs_next, torch.Tensor)
    assert nb.obs_next.tolist() == [[3, 1], [3, 0], [5, 1], [5, 0]]
    assert isinstance(nb.obs, torch.Tensor)  # obs, act and index stay those of the first step
    assert nb.obs[:, 0].tolist() == [0, 1, 3, 4] and nb.act.tolist() == [1, 0, 1, 0]
    assert nb.index is not None and nb.index.tolist() == [1, 2, 7, 8]


def test_n_step_one_is_the_one_step_transition_with_gamma_discount() -> None:
    buf = _filled(capacity=10, num_envs=2, n_rows=5)
    one = buf.get(torch.arange(10))
    nb = buf.n_step_batch(one, 1, 0.9)
    assert torch.equal(nb.rew, one.rew) and torch.equal(nb.terminated, one.terminated)
    assert isinstance(nb.obs_next, torch.Tensor) and isinstance(one.obs_next, torch.Tensor)
    assert torch.equal(nb.obs_next, one.obs_next)
    assert nb.discount is not None
    assert torch.allclose(nb.discount, 0.9 * (~one.terminated).float())


def test_n_step_truncation_bootstraps_from_the_final_obs() -> None:
    buf = ReplayBuffer(8, 1)
    for t in range(4):
        row = _row(t, 1)
        row["terminated"] = np.array([False])
        row["truncated"] = np.array([t == 1])
        buf.add(**row)
    nb = _n_step(buf, [0], n_step=3, gamma=0.5)
    assert nb.rew.tolist() == [0.0 + 0.5 * 10.0]
    assert nb.discount is not None and nb.discount.tolist() == [0.25]
    assert nb.truncated.tolist() == [True] and nb.terminated.tolist() == [False]
    assert isinstance(nb.obs_next, torch.Tensor) and nb.obs_next.tolist() == [[2, 0]]


def test_n_step_follows_the_ring_across_its_end_but_never_into_older_rows() -> None:
    buf = ReplayBuffer(4, 1)  # 4 rows; t = 0..5 leaves t = 4, 5, 2, 3 in rows 0..3
    for t in range(6):
        row = _row(t, 1)
        row["terminated"] = np.array([False])
        buf.add(**row)
    nb = _n_step(buf, [2, 0, 1], n_step=3, gamma=0.5)
    # row 2 (t = 2): t = 2, 3, 4 (rows 2, 3, 0); row 0 (t = 4): t = 4, 5, then the newest
    # row stops it (row 2 holds the older t = 2); row 1 (t = 5): only itself
    assert nb.rew.tolist() == pytest.approx([20 + 15 + 10, 40 + 25, 50])
    assert nb.discount is not None and nb.discount.tolist() == pytest.approx([0.125, 0.25, 0.5])
    assert isinstance(nb.obs_next, torch.Tensor)
    assert nb.obs_next[:, 0].tolist() == [5, 6, 6]


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_n_step_on_collected_counter_envs_matches_their_episodes(mode: AutoresetMode) -> None:
    lengths, max_steps, n_step, gamma = [3, 7], 5, 4, 0.9  # env 1 is truncated at t = 5
    buf = ReplayBuffer(2 * 11, 2)
    collector = Collector(ParityPolicy(), make_vec(lengths, max_steps=max_steps, mode=mode), buf)
    collector.collect(n_step=40)  # wraps the 11-row ring
    flat = torch.arange(len(buf))
    batch = buf.get(flat)
    assert batch.valid is not None
    nb = buf.n_step_batch(batch[batch.valid], n_step, gamma)
    assert isinstance(nb.obs, torch.Tensor) and isinstance(nb.obs_next, torch.Tensor)
    assert nb.index is not None and nb.discount is not None
    newest = (buf._cursor - 1) % buf.rows
    for i in range(len(nb)):
        env, episode, t = (int(x) for x in nb.obs[i].tolist())
        env_next, episode_next, t_next = (int(x) for x in nb.obs_next[i].tolist())
        m = t_next - t
        assert (env_next, episode_next) == (env, episode) and 1 <= m <= n_step
        ep_len = min(lengths[env], max_steps)
        last_row = (int(nb.index[i]) // 2 + m - 1) % buf.rows
        assert m == n_step or t + m == ep_len or last_row == newest
        expected = sum(gamma**k * (t + k + 1 + (env + t + k) % 2) for k in range(m))
        assert float(nb.rew[i]) == pytest.approx(expected, rel=1e-6)
        terminated = t + m == lengths[env] <= max_steps
        assert bool(nb.terminated[i]) == terminated
        assert float(nb.discount[i]) == pytest.approx(0.0 if terminated else gamma**m)


def test_n_step_rejects_bad_n_and_batches_without_index() -> None:
    buf = _filled(capacity=4, num_envs=2, n_rows=2)
    batch = buf.get(torch.tensor([0]))
    with pytest.raises(ValueError, match="n_step"):
        buf.n_step_batch(batch, 0, 0.9)
    batch.index = None
    with pytest.raises(ValueError, match="index"):
        buf.n_step_batch(batch, 2, 0.9)


def _fields(batch: Any) -> dict[str, bytes]:
    """Every field of ``batch`` as bytes (None stays None), for exact comparisons."""
    out = {}
    for k in ("obs", "act", "rew", "terminated", "truncated", "obs_next", "index", "discount",
              "weight"):  # fmt: skip
        t = getattr(batch, k)
        out[k] = None if t is None else t.numpy().tobytes()
    return out


@pytest.mark.parametrize("n_step", [2, 3])
def test_sample_and_get_of_n_step_transitions_equal_n_step_batch_of_a_plain_sample(
    n_step: int,
) -> None:
    """``sample(n_step=...)`` and ``get(n_step=...)`` gather each field once; what they
    return is what ``n_step_batch`` makes of a plain sample drawn with the same seed."""
    buf = _filled(capacity=40, num_envs=2, n_rows=14)
    torch.manual_seed(3)
    fused = buf.sample(64, n_step=n_step, gamma=0.9)
    torch.manual_seed(3)
    plain = buf.sample(64)
    two_pass = buf.n_step_batch(plain, n_step, 0.9)
    assert plain.discount is None and fused.discount is not None
    assert _fields(fused) == _fields(two_pass)
    assert fused.index is not None
    got = buf.get(fused.index, n_step=n_step, gamma=0.9)
    assert _fields(got) == _fields(fused)
    assert got.valid is not None and bool(got.valid.all())  # get keeps the valid column


def test_prioritized_sample_of_n_step_transitions_keeps_the_draw_and_weights() -> None:
    buf = PrioritizedReplayBuffer(40, 2, alpha=0.6, beta=0.4)
    for t in range(14):
        buf.add(**_row(t, 2))
    buf.update_priorities(torch.arange(10), torch.linspace(0.1, 3.0, 10))
    torch.manual_seed(5)
    fused = buf.sample(32, n_step=3, gamma=0.5)
    torch.manual_seed(5)
    plain = buf.sample(32)
    assert _fields(fused) == _fields(buf.n_step_batch(plain, 3, 0.5))
    assert fused.weight is not None and torch.equal(fused.weight, plain.weight)


def test_sample_with_bad_n_step_raises_before_drawing() -> None:
    buf = _filled(capacity=8, num_envs=2, n_rows=3)
    state = torch.get_rng_state()
    bad_values: list[Any] = [0, -1, 1.5]
    for bad in bad_values:
        with pytest.raises(ValueError, match="n_step must be a positive int"):
            buf.sample(4, n_step=bad)
        with pytest.raises(ValueError, match="n_step must be a positive int"):
            buf.get(torch.tensor([0]), n_step=bad)
    assert torch.equal(torch.get_rng_state(), state)  # nothing was drawn


def _n_step_fields(buf: ReplayBuffer, n_step: int, gamma: float) -> list[bytes]:
    nb = _n_step(buf, list(range(len(buf))), n_step, gamma)
    assert isinstance(nb.obs_next, torch.Tensor) and nb.discount is not None
    return [t.numpy().tobytes() for t in (nb.rew, nb.terminated, nb.obs_next, nb.discount)]


def _from_scratch(buf: ReplayBuffer, n_step: int, gamma: float) -> list[bytes]:
    """The same fields from a copy of ``buf`` that computes every n-step sum anew."""
    fresh = ReplayBuffer(buf.capacity, buf.num_envs)
    fresh.load_state_dict(buf.state_dict())
    fresh._rows_written = buf._rows_written
    return _n_step_fields(fresh, n_step, gamma)


@pytest.mark.parametrize(("num_envs", "rows", "n_step"), [(1, 5, 3), (1, 40, 3), (3, 7, 9)])
def test_n_step_sums_kept_up_to_date_between_calls_equal_sums_computed_anew(
    num_envs: int, rows: int, n_step: int
) -> None:
    rng = np.random.default_rng(num_envs * 100 + rows)
    buf = ReplayBuffer(rows * num_envs, num_envs)
    mark = None
    for step in range(6 * rows):
        rew = rng.normal(size=num_envs).astype(np.float32)
        rew[rng.random(num_envs) < 0.05] = np.nan  # never used past an episode's end
        rew[rng.random(num_envs) < 0.05] = -0.0
        buf.add(
            obs=rng.normal(size=(num_envs, 2)),
            act=rng.integers(0, 2, size=num_envs),
            rew=rew,
            terminated=rng.random(num_envs) < 0.15,
            truncated=rng.random(num_envs) < 0.1,
            obs_next=rng.normal(size=(num_envs, 2)),
        )
        if step % 11 == 3:
            mark = buf.mark()
        elif step % 11 == 9 and mark is not None:
            buf.rewind(mark)  # rows change other than by add: the sums are refilled
        elif step == 4 * rows:
            buf.clear()
            continue
        if step % 3 != 1:  # several adds between some calls, one between others
            assert _n_step_fields(buf, n_step, 0.9) == _from_scratch(buf, n_step, 0.9)
    # another (n_step, gamma) on the same buffer is computed for itself
    assert _n_step_fields(buf, 2, 0.5) == _from_scratch(buf, 2, 0.5)
    assert _n_step_fields(buf, n_step, 0.9) == _from_scratch(buf, n_step, 0.9)


def test_an_n_step_refresh_interrupted_midway_is_redone_on_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import epochtrain.data.n_step as n_step_module

    rng = np.random.default_rng(7)
    buf = ReplayBuffer(40, 1)

    def add(k: int) -> None:
        for _ in range(k):
            buf.add(
                obs=rng.normal(size=(1, 2)), act=np.array([1]),
                rew=rng.normal(size=1).astype(np.float32), terminated=rng.random(1) < 0.1,
                truncated=np.array([False]), obs_next=rng.normal(size=(1, 2)),
            )  # fmt: skip

    add(20)
    _n_step_fields(buf, 3, 0.9)  # the table exists
    add(4)  # six rows to refresh, one by one
    real, calls = n_step_module._sum_one, [0]

    def interrupted(*args: Any) -> Any:  # Ctrl-C after two of the rows
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(n_step_module, "_sum_one", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _n_step_fields(buf, 3, 0.9)
    monkeypatch.setattr(n_step_module, "_sum_one", real)
    assert _n_step_fields(buf, 3, 0.9) == _from_scratch(buf, 3, 0.9)


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_ending_the_episodes_truncates_each_envs_newest_row_and_n_step_sums_stop_there(
    cls: type[ReplayBuffer],
) -> None:
    buf = cls(16, 2)
    for t in range(4):  # rew 10 t + env, no episode ends
        buf.add(**{**_row(t, 2), "terminated": np.zeros(2, dtype=bool)})
    _n_step(buf, [0], n_step=3, gamma=0.5)  # the n-step table exists before the cut
    buf.end_episodes()
    for t in (4, 5):  # the next episodes
        buf.add(**{**_row(t, 2), "terminated": np.zeros(2, dtype=bool)})
    nb = _n_step(buf, list(range(2, 10)), n_step=3, gamma=0.5)  # rows 1..4
    assert nb.rew.tolist() == pytest.approx([
        10 + 0.5 * 20 + 0.25 * 30, 11 + 0.5 * 21 + 0.25 * 31,
        20 + 0.5 * 30, 21 + 0.5 * 31,
        30, 31,  # the newest row of the cut: itself only
        40 + 0.5 * 50, 41 + 0.5 * 51,  # the newest row now stops these
    ])  # fmt: skip
    assert nb.discount is not None
    assert nb.discount.tolist() == [0.125, 0.125, 0.25, 0.25, 0.5, 0.5, 0.25, 0.25]
    assert nb.truncated.tolist() == [True] * 6 + [False] * 2  # row 3's flag
    assert isinstance(nb.obs_next, torch.Tensor)
    assert nb.obs_next[:, 0].tolist() == [4, 4, 4, 4, 4, 4, 6, 6]  # row 3's own obs_next
    assert _n_step_fields(buf, 3, 0.5) == _from_scratch(buf, 3, 0.5)


def test_ending_the_episodes_leaves_ended_and_invalid_rows_and_an_empty_buffer_alone() -> None:
    buf = ReplayBuffer(9, 3)
    buf.end_episodes()  # nothing stored: nothing to end
    row = _row(0, 3, valid=np.array([True, True, False]))
    row["terminated"] = np.array([True, False, False])
    buf.add(**row)
    buf.end_episodes()
    rollout = buf.rollout()
    assert rollout.terminated.tolist() == [[True, False, False]]
    assert rollout.truncated.tolist() == [[False, True, False]]


# ------------------------------------------------------------------ mark and rewind
def _dict_row(t: int, num_envs: int) -> dict[str, Any]:
    """Row ``t`` with a dict observation, an extra and one invalid env."""
    obs = {
        "image": np.full((num_envs, 2, 2), t % 250, dtype=np.uint8),
        "pos": np.full((num_envs, 2), float(t)),
    }
    obs_next = {"image": obs["image"] + 1, "pos": obs["pos"] + 1}
    return {
        "obs": obs,
        "act": np.full(num_envs, t % 2),
        "rew": np.full(num_envs, float(t)),
        "terminated": np.full(num_envs, t % 5 == 4),
        "truncated": np.full(num_envs, t % 7 == 6),
        "obs_next": obs_next,
        "extras": {"value": np.full(num_envs, t + 0.5)},
        "valid": np.arange(num_envs) != t % (num_envs + 1),
    }


def _state(buf: ReplayBuffer) -> dict[str, Any]:
    """Everything the buffer holds and counts, as comparable bytes."""
    state = buf.state_dict()

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value.numpy().tobytes() if isinstance(value, torch.Tensor) else value

    return {**plain(state), "n_valid": buf.n_valid}


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
@pytest.mark.parametrize(
    ("rows", "written"),  # part of the ring, most, more than all; in one block or several
    [(10, 3), (10, 17), (10, 40), (150, 70), (150, 290)],
)
def test_rewind_of_a_full_ring_puts_back_every_overwritten_row(
    cls: type[ReplayBuffer], rows: int, written: int
) -> None:
    buf = cls(3 * rows, 3)  # full, and wrapped twice, at the mark
    for t in range(2 * rows + rows * 7 // 10):
        buf.add(**_dict_row(t, 3))
    if isinstance(buf, PrioritizedReplayBuffer):
        buf.update_priorities(torch.arange(3 * rows), torch.linspace(0.1, 3.0, 3 * rows))
    before, nodes = _state(buf), getattr(buf, "tree", None)
    nodes_before = None if nodes is None else nodes.nodes.copy()
    mark = buf.mark()
    for t in range(100, 100 + written):
        buf.add(**_dict_row(t, 3))
        buf.end_episodes()  # changes the newest row in place
        if isinstance(buf, PrioritizedReplayBuffer):
            buf.update_priorities(torch.tensor([0, 7, 29]), torch.tensor([9.0, 0.2, 4.0]))
    buf.rewind(mark)
    assert _state(buf) == before
    if isinstance(buf, PrioritizedReplayBuffer):
        assert nodes_before is not None and np.array_equal(buf.tree.nodes, nodes_before)
    fresh = ReplayBuffer(3 * rows, 3)
    fresh.load_state_dict(buf.state_dict())
    # the n-step sums are those of the rows put back
    assert _n_step_sums(buf) == _n_step_sums(fresh)


def _n_step_sums(buf: ReplayBuffer) -> list[bytes]:
    nb = buf.get(torch.arange(len(buf)), n_step=3, gamma=0.9)
    assert nb.discount is not None
    return [t.numpy().tobytes() for t in (nb.rew, nb.discount, nb.terminated, nb.truncated)]


def test_rewind_is_exact_again_for_a_second_rewind_to_the_same_mark() -> None:
    buf = ReplayBuffer(8, 2)
    for t in range(6):
        buf.add(**_row(t, 2))
    before = _state(buf)
    mark = buf.mark()
    for t in range(10, 13):
        buf.add(**_row(t, 2))
    buf.rewind(mark)
    for t in range(20, 27):
        buf.add(**_row(t, 2))
    buf.rewind(mark)
    assert _state(buf) == before


def test_rewind_after_a_clear_puts_back_the_rows_written_since() -> None:
    buf = ReplayBuffer(8, 2)
    for t in range(6):
        buf.add(**_row(t, 2, valid=np.array([t % 3 != 1, True])))
    before = _state(buf)
    mark = buf.mark()
    buf.clear()
    for t in range(10, 13):
        buf.add(**_row(t, 2))
    buf.rewind(mark)
    assert _state(buf) == before


def test_a_new_mark_ends_the_last_ones_recording_and_its_rewind_loses_the_rows() -> None:
    buf = ReplayBuffer(8, 2)  # 4 rows
    for t in range(4):
        buf.add(**_row(t, 2))
    old = buf.mark()
    buf.add(**_row(10, 2))  # row 0
    new = buf.mark()  # the old mark records no more, its copies are dropped
    buf.add(**_row(11, 2))  # row 1
    buf.rewind(old)
    assert len(buf) == 8 and buf.n_valid == 4  # rows 0 and 1 are lost, never sampled
    assert set(buf.sample_indices(200).tolist()) == {4, 5, 6, 7}
    assert new.saved is not None and not new.saved.complete  # the rewind ended its recording


def test_dropping_a_mark_stops_the_copying_and_the_next_mark_reuses_the_copies_memory() -> None:
    block = 64  # rows a block holds, for these small rows
    buf = ReplayBuffer(8 * block, 2)
    for t in range(4 * block):
        buf.add(**_row(t, 2))
    mark = buf.mark()
    buf.add(**_row(100, 2))
    saved = mark.saved
    assert saved is not None and len(saved.blocks) == 1
    alive = weakref.ref(saved)
    del mark, saved
    assert alive() is None  # held by the mark only
    buf.add(**_row(101, 2))  # the next block: not copied any more
    assert buf._saving is None and len(buf._block_pool) == 1
    mark = buf.mark()
    assert buf._block_rows == block
    for t in range(2 * block + 1):
        buf.add(**_row(200 + t, 2))
    assert len(buf._block_pool) == 3
    buf.mark()  # the last mark took three blocks: they are kept, no more
    assert len(buf._block_pool) == 3
    del mark
    buf.mark()
    assert len(buf._block_pool) == 0


def test_a_load_since_the_mark_leaves_the_rewind_inexact_but_consistent() -> None:
    buf = ReplayBuffer(8, 2)
    for t in range(4):
        buf.add(**_row(t, 2))
    state = buf.state_dict()
    mark = buf.mark()
    buf.add(**_row(10, 2))
    buf.load_state_dict(state)
    buf.add(**_row(11, 2))  # row 0 again
    buf.rewind(mark)
    # rows 0 and 1 (two were written since the mark) are marked lost, never sampled
    assert len(buf) == 8 and buf.n_valid == 4
    assert set(buf.sample_indices(200).tolist()) == {4, 5, 6, 7}
