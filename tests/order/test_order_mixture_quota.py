"""The quota tree: exact integer arithmetic, every prefix within QUOTA_BOUND of every entry's share, random access."""

import math

import numpy as np
import pytest

from episodic.order.mixture_quota import QUOTA_BOUND, TOTAL_UNITS, QuotaTree, muldiv, quantize


def test_muldiv_is_exact_beyond_int64_products():
    rng = np.random.default_rng(0)
    m = rng.integers(0, 2**52, 20000)
    b = rng.integers(1, 2**40, 20000)
    a = rng.integers(0, 2**62, 20000) % (b + 1)
    h = rng.integers(0, 2**62, 20000) % b
    got = muldiv(m, a, b, h)
    want = [(int(x) * int(y) + int(z)) // int(w) for x, y, z, w in zip(m, a, h, b)]
    assert got.tolist() == want
    edge = np.array([0, 1, 2**52 - 1], dtype=np.int64)
    full = np.full(3, 2**32)
    assert muldiv(edge, full, full, full - 1).tolist() == edge.tolist()


def test_quantize_sums_to_the_total_and_keeps_every_positive_weight():
    w = [1e-12, 3.0, 0.0, 1.0, 2.5e-9]
    u = quantize(w)
    assert u.sum() == TOTAL_UNITS and u.dtype == np.int64
    assert u[2] == 0 and (u[[0, 1, 3, 4]] >= 1).all()
    exact = np.asarray(w) / sum(w) * TOTAL_UNITS
    assert np.abs(u[[1, 3]] - exact[[1, 3]]).max() <= 2  # largest remainder (+ what the lifted tiny ones took)
    u2 = quantize([1, 1, 1], total=10)
    assert u2.tolist() == [4, 3, 3]  # remainders tie: lower index first
    for bad in ([], [0, 0], [1, -1], [1, float("nan")], [float("inf")]):
        with pytest.raises(ValueError):
            quantize(bad)


def prefix_deviation(tree: QuotaTree, m: int) -> float:
    """Largest |count_e(p) - p * share_e| over p in 1..m and all entries, from one pass of locate."""
    entry, _ = tree.locate(np.arange(m))
    share = tree.units / tree.total
    p = np.arange(1, m + 1)
    return max(float(np.abs(np.cumsum(entry == e) - p * share[e]).max()) for e in np.flatnonzero(tree.units))


@pytest.mark.parametrize("case", ["lognormal", "one_heavy", "tiny_shares", "geometric", "uniform", "two"])
def test_every_prefix_is_within_the_bound(case):
    rng = np.random.default_rng(hash(case) % 2**32)
    weights = {
        "lognormal": rng.lognormal(0, 3, 300),
        "one_heavy": np.r_[1e6, np.ones(200)],
        "tiny_shares": np.r_[np.ones(3), np.full(50, 1e-5)],  # far below one sample per batch
        "geometric": 2.0 ** -np.arange(40),
        "uniform": np.ones(97),
        "two": [0.3, 0.7],
    }[case]
    for seed in (None, 0, 1):
        tree = QuotaTree.build(quantize(weights), seed)
        dev = prefix_deviation(tree, 60000)
        assert dev < (2 if seed is None else QUOTA_BOUND), (case, seed, dev)


def test_bound_holds_far_into_the_sequence():
    tree = QuotaTree.build(quantize(np.random.default_rng(3).lognormal(0, 2, 64)), 5)
    t = tree.total
    for m in [2**40 + 12345, 3 * 10**12, 2**50 - 1]:
        c = tree.counts(m)
        assert c.sum() == m
        dev = np.abs(c.astype(object) * t - np.asarray(tree.units.tolist(), dtype=object) * m)  # exact integers
        assert max(dev) < QUOTA_BOUND * t
        entry, local = tree.locate(np.arange(m - 2000, m))
        assert np.array_equal(np.bincount(entry, minlength=tree.num_entries), c - tree.counts(m - 2000))
        for e in np.unique(entry)[:5]:  # the index inside an entry is its count before the position
            first = int(np.flatnonzero(entry == e)[0])
            assert local[first] == tree.counts(m - 2000 + first)[e]


def test_locate_and_counts_agree_and_local_is_the_count_before():
    tree = QuotaTree.build(quantize([5, 0, 1, 1e-3, 7]), 11)
    entry, local = tree.locate(np.arange(50000))
    assert not (entry == 1).any()  # weight 0: never drawn
    for e in (0, 2, 3, 4):
        idx = np.flatnonzero(entry == e)
        assert np.array_equal(local[idx], np.arange(idx.size))
    for m in (0, 1, 999, 50000):
        assert np.array_equal(tree.counts(m), np.bincount(entry[:m], minlength=5))
    e0, l0 = tree.locate(np.array([[3, 4], [5, 6]]))
    assert e0.shape == (2, 2) and np.array_equal(e0.reshape(-1), entry[3:7])


def test_a_pure_function_of_units_and_seed():
    u = quantize(np.random.default_rng(1).uniform(0.1, 5, 30))
    a = QuotaTree.build(u, 7).locate(np.arange(5000))[0]
    b = QuotaTree.build(u.copy(), 7).locate(np.arange(5000))[0]
    c = QuotaTree.build(u, 8).locate(np.arange(5000))[0]
    assert np.array_equal(a, b)
    assert (a != c).mean() > 0.5  # another seed, another interleaving (same bound)
    assert np.abs(np.bincount(a, minlength=30) - np.bincount(c, minlength=30)).max() < 2 * QUOTA_BOUND


def test_lookup_depth_is_logarithmic_on_average():
    rng = np.random.default_rng(2)
    for n in (2, 50, 400):
        units = quantize(rng.lognormal(0, 1.5, n))
        tree = QuotaTree.build(units)
        share = units / units.sum()
        depth = tree.depths()
        entropy = -(share * np.log2(share)).sum()
        assert (share * depth).sum() <= entropy + 1 <= math.log2(n) + 1
        assert depth.max() <= 2 * math.log2(units.sum() / units.min()) + 1


def test_single_entry_and_bad_input():
    tree = QuotaTree.build([5])
    entry, local = tree.locate(np.arange(10))
    assert (entry == 0).all() and np.array_equal(local, np.arange(10))
    with pytest.raises(ValueError):
        QuotaTree.build([0, 0])
    with pytest.raises(ValueError):
        tree.locate([-1])


def _walk_exact(tree: QuotaTree, m: int) -> tuple[int, int]:
    """`locate` of one position by the tree's definition in Python integers (no float estimate): at each
    internal node, the positions before `m` that go to the first child are floor((m * split + phase) / weight);
    `m` goes first when that count grows at m + 1."""
    n = tree.num_entries
    node, local = tree.root, m
    while node >= n:
        k = node - n
        a, b, h = int(tree.split[k]), int(tree.weight[k]), int(tree.phase[k])
        before = (local * a + h) // b
        if ((local + 1) * a + h) // b > before:
            node, local = int(tree.first[k]), before
        else:
            node, local = int(tree.second[k]), local - before
    return node, local


@pytest.mark.parametrize("seed", [None, 0, 12345])
def test_locate_equals_the_walk_in_python_integers(seed):
    rng = np.random.default_rng(3 if seed is None else seed)
    for trial in range(6):
        units = rng.integers(0, 2 ** int(rng.integers(1, 40)), int(rng.integers(1, 300)))
        units[0] += 1
        tree = QuotaTree.build(units, seed)
        m = np.concatenate([np.arange(50), rng.integers(0, 2**52, 300), 2**52 - 1 - np.arange(20)]).astype(np.int64)
        entry, local = tree.locate(m)
        want = [_walk_exact(tree, int(x)) for x in m.tolist()]
        assert entry.tolist() == [e for e, _ in want], trial
        assert local.tolist() == [lo for _, lo in want], trial
