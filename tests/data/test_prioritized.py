"""PrioritizedReplayBuffer: proportional sampling, weights, priorities, resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from epochtrain.data import PrioritizedReplayBuffer, ReplayBuffer
from tests.data.test_sum_tree import _assert_frequencies


def _row(t: int, num_envs: int, valid: np.ndarray | None = None) -> dict[str, Any]:
    """Row ``t``: obs ``[t, env]``, rew ``10 t + env``; never ends an episode."""
    env = np.arange(num_envs)
    obs = np.stack([np.full(num_envs, t), env], axis=1).astype(np.float32)
    return {
        "obs": obs,
        "act": env.copy(),
        "rew": 10.0 * t + env,
        "terminated": np.zeros(num_envs, dtype=bool),
        "truncated": np.zeros(num_envs, dtype=bool),
        "obs_next": obs + np.array([1, 0], dtype=np.float32),
        "valid": valid,
    }


def _filled(capacity: int, num_envs: int, n_rows: int, **kwargs: Any) -> PrioritizedReplayBuffer:
    buf = PrioritizedReplayBuffer(capacity, num_envs, **kwargs)
    for t in range(n_rows):
        buf.add(**_row(t, num_envs))
    return buf


# ----------------------------------------------------------------------- writing
def test_new_transitions_get_the_max_priority_and_invalid_ones_zero() -> None:
    buf = PrioritizedReplayBuffer(8, 2, alpha=0.5)
    buf.add(**_row(0, 2))
    buf.add(**_row(1, 2, valid=np.array([True, False])))
    assert buf.priorities(torch.arange(4)).tolist() == [1.0, 1.0, 1.0, 0.0]
    buf.update_priorities(torch.tensor([0]), torch.tensor([8.0]))
    assert buf.max_priority == pytest.approx(8.0 + buf.eps)
    buf.add(**_row(2, 2))
    expected_new = (8.0 + buf.eps) ** 0.5
    assert buf.priorities(torch.tensor([0, 4, 5])).tolist() == pytest.approx(
        [expected_new, expected_new, expected_new]
    )
    assert buf.n_added == 5


def test_overwritten_rows_lose_their_old_priority() -> None:
    buf = _filled(capacity=4, num_envs=2, n_rows=2, alpha=1.0)  # 2 rows
    buf.update_priorities(torch.tensor([0, 1, 2, 3]), torch.tensor([0.5, 0.5, 0.5, 4.0]))
    buf.add(**_row(2, 2, valid=np.array([False, True])))  # overwrites row 0
    p = buf.priorities(torch.arange(4))
    assert p.tolist() == pytest.approx([0.0, 4.0 + buf.eps, 0.5 + buf.eps, 4.0 + buf.eps])
    for t in range(3, 9):  # more rows than the ring holds between two reads
        buf.add(**_row(t, 2))
    assert buf.priorities(torch.arange(4)).tolist() == pytest.approx([4.0 + buf.eps] * 4)
    assert buf.tree.total == pytest.approx(4 * (4.0 + buf.eps))


# ----------------------------------------------------------------------- sampling
def test_sampling_is_proportional_to_priority_and_skips_invalid_rows() -> None:
    buf = PrioritizedReplayBuffer(10, 2, alpha=1.0)
    for t in range(5):
        buf.add(**_row(t, 2, valid=np.array([t != 3, True])))
    index = torch.tensor([0, 1, 2, 3, 4, 5, 8, 9])
    td = torch.tensor([1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]) - buf.eps
    buf.update_priorities(index, td)
    torch.manual_seed(0)
    counts = np.zeros(10)
    for _ in range(200):
        batch = buf.sample(100)
        assert batch.index is not None
        counts += np.bincount(batch.index.numpy(), minlength=10)
    assert counts[6] == 0  # the invalid row t = 3, env 0
    p = np.array([1, 2, 3, 4, 1, 2, 0, 1, 3, 4], dtype=float)  # row 3 env 1 kept its max 1
    assert counts / counts.sum() == pytest.approx(p / p.sum(), abs=0.01)


def test_sampling_frequencies_match_the_priorities_in_a_multi_level_tree() -> None:
    buf = PrioritizedReplayBuffer(6000, 2, alpha=0.6, beta=0.4)  # 6000 leaves: depth 1
    assert buf.tree.depth == 1
    rng = np.random.default_rng(3)
    for t in range(3000):
        buf.add(**_row(t, 2, valid=np.array([t % 7 != 3, True])))
    valid = np.ones(6000, dtype=bool)
    valid[0::2][np.arange(3000) % 7 == 3] = False  # env 0's invalid rows keep priority 0
    td = rng.uniform(1.0, 10.0, size=6000)
    buf.update_priorities(torch.arange(6000)[valid], torch.from_numpy(td[valid]))
    p = np.where(valid, (td + buf.eps) ** 0.6, 0.0)
    assert np.allclose(buf.priorities(torch.arange(6000)), p, rtol=1e-12, atol=0)
    torch.manual_seed(0)
    counts = np.zeros(6000)
    for _ in range(150):
        counts += np.bincount(buf.sample_indices(4096).numpy(), minlength=6000)
    assert counts[p == 0].sum() == 0
    _assert_frequencies(counts, p)
    batch = buf.sample(256)
    assert batch.index is not None and batch.weight is not None
    drawn = torch.from_numpy(p)[batch.index]
    assert torch.allclose(batch.weight, (drawn.min() / drawn).pow(buf.beta).float())


def test_importance_weights_are_normalised_by_the_batch_maximum() -> None:
    buf = _filled(capacity=4, num_envs=1, n_rows=4, alpha=1.0, beta=0.5, beta_anneal_steps=0)
    buf.beta_anneal_steps = 10**9  # beta stays at 0.5 over the 4 added transitions
    buf.update_priorities(torch.arange(4), torch.tensor([1.0, 4.0, 9.0, 16.0]) - buf.eps)
    torch.manual_seed(0)
    batch = buf.sample(200)
    assert batch.index is not None and batch.weight is not None
    assert batch.weight.dtype == torch.float32
    # (N P(i))^-beta / max_j (N P(j))^-beta = sqrt(p_min / p_i) over the sampled p
    p = torch.tensor([1.0, 4.0, 9.0, 16.0])[batch.index]
    assert torch.allclose(batch.weight, (p.min() / p).sqrt())
    assert float(batch.weight.max()) == pytest.approx(1.0)


def test_beta_anneals_linearly_to_one_over_added_transitions() -> None:
    buf = PrioritizedReplayBuffer(100, 2, beta=0.4, beta_anneal_steps=10)
    assert buf.beta == pytest.approx(0.4)
    buf.add(**_row(0, 2))
    buf.add(**_row(1, 2, valid=np.array([True, False])))  # the reset step does not count
    assert buf.n_added == 3 and buf.beta == pytest.approx(0.4 + 0.6 * 0.3)
    for t in range(2, 10):
        buf.add(**_row(t, 2))
    assert buf.beta == 1.0
    assert PrioritizedReplayBuffer(4, beta_anneal_steps=0).beta == 1.0


def test_update_priorities_checks_its_input() -> None:
    buf = _filled(capacity=4, num_envs=1, n_rows=2)
    with pytest.raises(ValueError, match="td_abs"):
        buf.update_priorities(torch.tensor([0, 1]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="NaN"):
        buf.update_priorities(torch.tensor([0]), torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match="NaN or inf"):
        buf.update_priorities(torch.tensor([0, 1]), torch.tensor([1.0, float("inf")]))
    before = buf.priorities(np.arange(2)).copy()
    buf.update_priorities(torch.tensor([], dtype=torch.long), torch.tensor([]))  # a no-op
    assert np.array_equal(buf.priorities(np.arange(2)), before)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha": -0.1}, "alpha"),
        ({"beta": 1.5}, "beta"),
        ({"beta_anneal_steps": -1}, "beta_anneal_steps"),
        ({"eps": 0.0}, "eps"),
    ],
)
def test_constructor_rejects_bad_settings(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PrioritizedReplayBuffer(8, 2, **kwargs)


def test_clear_forgets_priorities_and_the_beta_schedule() -> None:
    buf = _filled(capacity=8, num_envs=2, n_rows=3, beta_anneal_steps=10)
    buf.update_priorities(torch.tensor([0]), torch.tensor([5.0]))
    buf.clear()
    assert (buf.n_added, buf.max_priority, buf.tree.total, len(buf)) == (0, 1.0, 0.0, 0)
    buf.add(**_row(0, 2))
    assert buf.priorities(torch.arange(4)).tolist() == [1.0, 1.0, 0.0, 0.0]


# --------------------------------------------------------------------- persisting
def _sample_sequence(buf: PrioritizedReplayBuffer, seed: int) -> list[list[int]]:
    torch.manual_seed(seed)
    out = []
    for k in range(5):
        batch = buf.sample(8)
        assert batch.index is not None
        out.append(batch.index.tolist())
        buf.update_priorities(batch.index, torch.arange(8.0) + k)
        buf.add(**_row(20 + k, 2))
    return out


def test_state_dict_round_trip_resumes_exactly() -> None:
    buf = _filled(capacity=12, num_envs=2, n_rows=9, alpha=0.7, beta=0.3, beta_anneal_steps=50)
    buf.update_priorities(torch.tensor([0, 3, 5]), torch.tensor([2.0, 0.1, 7.0]))
    buf.add(**_row(9, 2))  # pending when the state is taken
    copy = PrioritizedReplayBuffer(12, 2)  # settings come from the state
    copy.load_state_dict(buf.state_dict())
    assert (copy.alpha, copy.beta_start, copy.beta_anneal_steps) == (0.7, 0.3, 50)
    assert (copy.n_added, copy.max_priority, copy.beta) == (buf.n_added, buf.max_priority, buf.beta)
    assert np.array_equal(copy.tree.nodes, buf.tree.nodes)
    assert _sample_sequence(copy, 3) == _sample_sequence(buf, 3)
    assert np.array_equal(copy.tree.nodes, buf.tree.nodes)


def test_save_load_round_trip(tmp_path: Path) -> None:
    buf = _filled(capacity=8, num_envs=2, n_rows=6, alpha=0.5)
    buf.update_priorities(torch.tensor([1, 2]), torch.tensor([3.0, 0.0]))
    path = tmp_path / "per.pt"
    buf.save(path)
    loaded = PrioritizedReplayBuffer.load(path)
    assert isinstance(loaded, PrioritizedReplayBuffer) and loaded.alpha == 0.5
    assert np.array_equal(loaded.tree.nodes, buf.tree.nodes)
    plain = ReplayBuffer.load(path)  # the plain buffer reads the same file
    assert torch.equal(plain.rollout().rew, buf.rollout().rew)
    assert _sample_sequence(loaded, 0) == _sample_sequence(buf, 0)


def test_a_plain_buffer_file_loads_with_uniform_max_priorities(tmp_path: Path) -> None:
    plain = ReplayBuffer(8, 2)
    for t in range(3):
        plain.add(**_row(t, 2, valid=np.array([True, t != 1])))
    plain.save(tmp_path / "plain.pt")
    buf = PrioritizedReplayBuffer.load(tmp_path / "plain.pt")
    assert buf.priorities(torch.arange(8)).tolist() == [1, 1, 1, 0, 1, 1, 0, 0]
    assert buf.n_added == buf.n_valid == 5


def test_a_state_in_the_binary_tree_format_loads_and_samples_the_same_distribution() -> None:
    # the state as the binary-tree code wrote it: ReplayBuffer's state plus the filled
    # rows' leaves (float64) and the settings; no internal nodes were ever saved
    plain = ReplayBuffer(12, 2)
    for t in range(5):
        plain.add(**_row(t, 2, valid=np.array([t != 2, True])))
    leaves = np.array([0.5, 1.0, 2.0, 0.25, 0.0, 3.0, 1.5, 1.0, 0.75, 2.5])
    state = plain.state_dict()
    state["prioritized"] = {
        "alpha": 0.5,
        "beta": 0.3,
        "beta_anneal_steps": 1000,
        "eps": 1e-6,
        "max_priority": 9.0,
        "n_added": 9,
        "leaves": torch.from_numpy(leaves.copy()),
    }
    buf = PrioritizedReplayBuffer(12, 2)
    buf.load_state_dict(state)
    assert (buf.alpha, buf.beta_start, buf.max_priority, buf.n_added) == (0.5, 0.3, 9.0, 9)
    assert buf.priorities(torch.arange(12)).tolist() == [*leaves.tolist(), 0.0, 0.0]
    assert buf.tree.total == pytest.approx(leaves.sum())
    torch.manual_seed(0)
    counts = np.zeros(12)
    for _ in range(200):
        counts += np.bincount(buf.sample_indices(500).numpy(), minlength=12)
    assert counts[4] == 0 and counts[10:].sum() == 0  # invalid row 2 env 0, unfilled rows
    _assert_frequencies(counts, np.concatenate([leaves, [0.0, 0.0]]))
    assert counts / counts.sum() == pytest.approx(
        np.concatenate([leaves, [0, 0]]) / leaves.sum(), abs=0.005
    )


def test_rewind_restores_the_priorities_of_the_mark() -> None:
    buf = _filled(capacity=6000, num_envs=2, n_rows=40)  # a multi-level tree
    buf.update_priorities(torch.tensor([0, 5, 79]), torch.tensor([3.0, 0.5, 7.0]))
    before = buf.tree.nodes.copy()
    mark = buf.mark()
    buf.update_priorities(torch.tensor([0, 1, 2]), torch.tensor([9.0, 9.0, 9.0]))
    for t in range(40, 45):
        buf.add(**_row(t, 2))
    assert buf.priorities(torch.tensor([80]))[0] > 0
    buf.rewind(mark)
    assert np.array_equal(buf.tree.nodes, before)
    assert buf.priorities(torch.tensor([80]))[0] == 0 and len(buf) == 80
