"""SumTree: sums, searches, stratified draws and their frequencies, rounding at row ends."""

from __future__ import annotations

import numpy as np
import pytest

from epochtrain.data import SumTree

TREE_SHAPES = [
    pytest.param({}, id="default"),  # small trees: the leaves are the top level
    pytest.param({"branching": 2, "top_width": 1}, id="binary"),
    pytest.param({"branching": 4, "top_width": 3}, id="4-ary"),
    pytest.param({"branching": 8, "top_width": 2}, id="8-ary"),
]


@pytest.mark.parametrize("shape", TREE_SHAPES)
@pytest.mark.parametrize("n", [13, 1000])
def test_sum_tree_sums_and_finds_like_a_cumulative_sum(shape: dict[str, int], n: int) -> None:
    rng = np.random.default_rng(0)
    tree = SumTree(n, **shape)  # not a power of the branching: padded leaves stay 0
    values = rng.uniform(0.0, 5.0, size=n)
    values[[2, 7]] = 0.0
    values[n - 3 :] = 0.0  # zeros at the end, next to the padding
    tree.update(np.arange(n), values)
    assert tree.total == pytest.approx(values.sum())
    assert np.array_equal(tree.leaves, values)
    prefix = rng.uniform(0.0, tree.total, size=1000)
    expected = np.searchsorted(np.cumsum(values), prefix, side="right")
    assert np.array_equal(tree.find(prefix), expected)
    leaf, found, smallest = tree.stratified(rng.uniform(size=64))
    assert np.array_equal(found, values[leaf]) and smallest == found.min() > 0
    assert np.all(np.diff(leaf) >= 0)  # one draw per slice, in order


@pytest.mark.parametrize("shape", TREE_SHAPES)
def test_sum_tree_repeated_updates_keep_the_last_and_match_a_rebuild(
    shape: dict[str, int],
) -> None:
    rng = np.random.default_rng(1)
    tree, rebuilt = SumTree(100, **shape), SumTree(100, **shape)
    for _ in range(50):
        index = rng.integers(0, 100, size=16)  # repeats included
        tree.update(index, rng.uniform(0.0, 3.0, size=16))
    tree.update(np.array([5, 5]), np.array([1.0, 2.0]))
    assert tree.leaves[5] == 2.0
    rebuilt.set_all(tree.leaves.copy())
    assert np.array_equal(tree.nodes, rebuilt.nodes)  # bit for bit: exact resume


@pytest.mark.parametrize("shape", TREE_SHAPES)
def test_sum_tree_never_finds_a_zero_leaf_even_at_the_top_of_the_range(
    shape: dict[str, int],
) -> None:
    tree = SumTree(6, **shape)
    tree.update(np.arange(6), np.array([0.1, 0.0, 0.2, 0.0, 0.3, 0.0]))
    top = np.nextafter(tree.total, 0.0)
    prefix = np.array([0.0, 0.1, 0.1 + 1e-17, 0.3, top, tree.total * (1 + 1e-12)])
    found = tree.find(prefix)
    assert np.all(tree.leaves[found] > 0)
    assert found.tolist()[:2] == [0, 2] and found[-1] == 4
    leaf, _, _ = tree.stratified(np.nextafter(1.0, 0.0) * np.ones(7))  # the top of each slice
    assert np.all(tree.leaves[leaf] > 0) and leaf[-1] == 4


@pytest.mark.parametrize("shape", TREE_SHAPES)
def test_single_leaf_tree(shape: dict[str, int]) -> None:
    tree = SumTree(1, **shape)
    tree.update(np.array([0]), np.array([2.5]))
    assert tree.total == 2.5 and tree.find(np.array([0.0, 2.4])).tolist() == [0, 0]


def test_sum_tree_levels_follow_branching_and_top_width() -> None:
    assert SumTree(4096).depth == 0  # defaults: the leaves are searched directly
    assert SumTree(100_000).depth == 1 and SumTree(1_000_000).depth == 2
    tree = SumTree(1000, branching=4, top_width=10)  # 1000 -> 250 -> 63 -> 16 -> 4
    assert tree.depth == 4
    with pytest.raises(ValueError, match="branching"):
        SumTree(10, branching=3)
    with pytest.raises(ValueError, match="nothing to draw"):
        tree.find(np.array([0.0]))  # every leaf is 0


def test_sum_tree_search_at_a_rounded_row_end_falls_back_to_a_positive_leaf(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a row whose running sum is exactly 1.0 while numpy's sum (pairwise) adds the small
    # values first: the parent is a little above 1.0, so a prefix just below the parent
    # passes the end of the row's running sum, and the row's first child is 0
    row = np.array([0.0, 1.0] + [1e-16] * 30)
    tree = SumTree(64, branching=32, top_width=2)
    tree.update(np.arange(64), np.concatenate([row, np.ones(32)]))
    parent = tree.nodes[64]  # the top level: the sums of the two rows
    if not parent > np.cumsum(row)[-1]:
        pytest.skip("numpy sums this row in order: no rounded row end to test")
    search = tree._search
    clamps: list[bool] = []

    def spy(prefix: np.ndarray, *, clamp: bool = False) -> tuple[np.ndarray, np.ndarray, float]:
        clamps.append(clamp)
        return search(prefix, clamp=clamp)

    monkeypatch.setattr(tree, "_search", spy)
    assert tree.find(np.array([np.nextafter(parent, 0.0), 0.5])).tolist() == [1, 1]
    assert clamps == [False, True]  # the first pass ended on leaf 0: searched again
    u = np.array([(1.0 + 1.5e-15) / tree.total])  # a single draw inside that window
    assert 1.0 < u[0] * tree.total < parent
    leaf, found, smallest = tree.stratified(u)
    assert leaf.tolist() == [1] and found.tolist() == [1.0] and smallest == 1.0
    assert clamps == [False, True, False, True]


@pytest.mark.parametrize("shape", TREE_SHAPES[1:])
def test_sum_tree_draws_follow_the_leaf_values(shape: dict[str, int]) -> None:
    rng = np.random.default_rng(2)
    values = rng.uniform(0.2, 4.0, size=300)
    values[rng.choice(300, size=30, replace=False)] = 0.0
    tree = SumTree(300, **shape)
    tree.set_all(values)
    # independent prefixes: the counts are multinomial, a plain chi-square test
    counts = np.zeros(300)
    for _ in range(200):
        counts += np.bincount(tree.find(rng.uniform(0.0, tree.total, size=500)), minlength=300)
    _assert_frequencies(counts, values)
    # stratified draws: less spread than independent ones, so the same bound holds
    counts = np.zeros(300)
    for _ in range(200):
        leaf, found, _ = tree.stratified(rng.uniform(size=500))
        assert np.array_equal(found, values[leaf])
        counts += np.bincount(leaf, minlength=300)
    _assert_frequencies(counts, values)
    # the middle of each slice, exactly where the running sum puts it
    n = 1000
    middle = (np.arange(n) + 0.5) * (tree.total / n)
    expected = np.searchsorted(np.cumsum(values), middle, side="right")
    assert np.array_equal(tree.stratified(np.full(n, 0.5))[0], expected)


def _assert_frequencies(counts: np.ndarray, weights: np.ndarray) -> None:
    """``counts`` of draws proportional to ``weights``: none where the weight is 0, and a
    chi-square statistic within 6 standard deviations of its mean; every cell is
    expected at least 20 times, so each must be drawn."""
    keep = weights > 0
    assert counts[~keep].sum() == 0
    expected = counts.sum() * weights[keep] / weights[keep].sum()
    assert expected.min() >= 20
    assert counts[keep].min() > 0
    chi2 = float((((counts[keep] - expected) ** 2) / expected).sum())
    dof = int(keep.sum()) - 1
    assert chi2 < dof + 6 * np.sqrt(2 * dof), (chi2, dof)
