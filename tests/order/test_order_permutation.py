"""The keyed permutation: bijectivity, inverse, determinism and statistical quality."""

import math
import time

import numpy as np
import pytest

from episodic.order import permute, unpermute

ALPHA = 0.01


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square(df): scipy if installed, else the regularized upper gamma Q(df/2, x/2)."""
    try:
        from scipy.stats import chi2
    except ImportError:
        pass
    else:
        return float(chi2.sf(x, df))
    a, x = df / 2.0, x / 2.0
    if x <= 0:
        return 1.0
    log_prefactor = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:  # series for the lower function P
        term = total = 1.0 / a
        k = a
        while abs(term) > abs(total) * 1e-15:
            k += 1
            term *= x / k
            total += term
        return max(0.0, 1.0 - total * math.exp(log_prefactor))
    # continued fraction for Q (modified Lentz)
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return h * math.exp(log_prefactor)


def chi2_pvalue(observed: np.ndarray, expected: float, df: int) -> float:
    stat = float(((observed - expected) ** 2 / expected).sum())
    return chi2_sf(stat, df)


def test_chi2_sf_reference_values():
    # textbook critical values at the 1% and 5% levels
    assert chi2_sf(6.635, 1) == pytest.approx(0.01, rel=1e-3)
    assert chi2_sf(23.209, 10) == pytest.approx(0.01, rel=1e-3)
    assert chi2_sf(124.342, 100) == pytest.approx(0.05, rel=1e-3)
    assert chi2_sf(3.0, 7) == pytest.approx(1 - 0.1150, abs=1e-3)


@pytest.mark.parametrize(
    "n", [1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 31, 64, 97, 100, 256, 257, 1000, 1009, 4096, 65536, 65537, 10**6]
)
def test_every_epoch_is_a_permutation_and_inverts(n):
    positions = np.arange(n)
    for seed, epoch in [(0, 0), (1, 0), (0, 1), (12345, 678)]:
        indices = permute(positions, n, seed, epoch)
        assert indices.dtype == np.int64
        assert np.array_equal(np.sort(indices), positions)
        assert np.array_equal(unpermute(indices, n, seed, epoch), positions)


def test_scalar_shapes_determinism_and_range_checks():
    n = 1_000_003
    p = np.array([[0, 5], [n - 1, 17]])
    out = permute(p, n, 7, 3)
    assert out.shape == (2, 2)
    assert [permute(int(x), n, 7, 3) for x in p.ravel()] == out.ravel().tolist()
    assert isinstance(permute(5, n, 7, 3), int)
    assert np.array_equal(permute(p, n, 7, 3), out)  # pure function: no hidden state
    with pytest.raises(ValueError):
        permute(n, n, 0, 0)
    with pytest.raises(ValueError):
        permute(-1, n, 0, 0)


def test_huge_domain_is_injective_on_a_sample():
    n = 10**12 + 39
    p = np.random.default_rng(0).choice(n, 200_000, replace=False)
    out = permute(p, n, 3, 9)
    assert out.min() >= 0 and out.max() < n
    assert np.unique(out).size == p.size
    assert np.array_equal(unpermute(out, n, 3, 9), p)


def test_one_million_positions_take_milliseconds():
    p = np.arange(10**6)
    times = []
    for epoch in range(5):
        t0 = time.perf_counter()
        permute(p, 10**9, 0, epoch)
        times.append(time.perf_counter() - t0)
    assert sorted(times)[2] < 0.25  # typically ~20 ms; loose for a loaded CI box


@pytest.mark.parametrize("n", [2, 3, 7, 10, 16, 33])
def test_position_distribution_chi_square(n):
    """Over many epochs, index i lands at every position equally often (n x n table)."""
    epochs = 300 * n
    table = np.zeros((n, n), dtype=np.int64)
    for epoch in range(epochs):
        table[permute(np.arange(n), n, 42, epoch), np.arange(n)] += 1
    assert table.sum(axis=0).tolist() == [epochs] * n
    # Each epoch adds a permutation matrix, whose covariance is isotropic on the (n-1)^2
    # dimensional space of zero row/column sums: Pearson's statistic is n/(n-1) * chi2((n-1)^2).
    stat = float(((table - epochs / n) ** 2 / (epochs / n)).sum()) * (n - 1) / n
    assert chi2_sf(stat, (n - 1) ** 2) > ALPHA


@pytest.mark.parametrize("n", [4, 5])
def test_whole_permutation_distribution_chi_square(n):
    """Small n: every one of the n! permutations is equally likely across epochs."""
    cells = math.factorial(n)
    epochs = 100 * cells
    counts: dict[tuple, int] = {}
    for epoch in range(epochs):
        key = tuple(permute(np.arange(n), n, 7, epoch).tolist())
        counts[key] = counts.get(key, 0) + 1
    assert len(counts) == cells
    assert chi2_pvalue(np.array(list(counts.values())), epochs / cells, cells - 1) > ALPHA


@pytest.mark.parametrize("n", [6, 11, 20])
def test_pair_distribution_chi_square(n):
    """The ordered pair of indices at positions (0, 1) is uniform over the n(n-1) pairs."""
    cells = n * (n - 1)
    epochs = 60 * cells
    table = np.zeros((n, n), dtype=np.int64)
    for epoch in range(epochs):
        a, b = permute(np.array([0, 1]), n, 99, epoch)
        table[a, b] += 1
    assert np.trace(table) == 0
    observed = table[~np.eye(n, dtype=bool)]
    assert chi2_pvalue(observed, epochs / cells, cells - 1) > ALPHA


def test_large_epoch_bucket_and_neighbour_statistics():
    """One big epoch: position bucket vs index bucket, and buckets of neighbours, are independent."""
    n, k = 10**6 + 3, 10
    perm = permute(np.arange(n), n, 2024, 0)
    pos_bucket = np.arange(n) * k // n
    idx_bucket = perm * k // n
    table = np.bincount(pos_bucket * k + idx_bucket, minlength=k * k).reshape(k, k)
    expected = np.outer(table.sum(1), table.sum(0)) / n
    stat = float(((table - expected) ** 2 / expected).sum())
    assert chi2_sf(stat, (k - 1) ** 2) > ALPHA
    first, second = idx_bucket[0:-1:2], idx_bucket[1::2]
    pairs = np.bincount(first * k + second, minlength=k * k)
    assert chi2_pvalue(pairs, first.size / k**2, k * k - 1) > ALPHA


def test_seeds_and_epochs_are_uncorrelated():
    """Spearman rho between orders of different (seed, epoch), and vs the identity, is ~N(0, 1/(n-1))."""
    n = 20_000
    keys = [(s, e) for s in (0, 1, 2, 2**40 + 1) for e in (0, 1, 2)]
    perms = [np.arange(n)] + [permute(np.arange(n), n, s, e) for s, e in keys]
    bound = 5 / math.sqrt(n - 1)
    worst = 0.0
    for i in range(len(perms)):
        for j in range(i + 1, len(perms)):
            rho = np.corrcoef(perms[i], perms[j])[0, 1]  # orders are ranks already
            worst = max(worst, abs(rho))
            assert (perms[i] == perms[j]).mean() < 0.01  # no shared fixed structure
    assert worst < bound


def test_permute_lanes_equals_permute_lane_by_lane():
    from episodic.order.permutation import permute_lanes

    rng = np.random.default_rng(0)
    n = np.concatenate(
        [rng.integers(1, 40, 300), rng.integers(1, 5000, 300), rng.integers(1, 2**40, 300), [1, 2, 4, 5]]
    )
    x = (rng.random(n.size) * n).astype(np.int64)
    seed = rng.integers(0, 2**63, n.size)
    epoch = rng.integers(-5, 50, n.size)  # negative epochs too (taken modulo 2**64, like permute)
    want = [permute(int(a), int(b), int(c), int(d)) for a, b, c, d in zip(x, n, seed, epoch)]
    assert permute_lanes(x, n, seed, epoch).tolist() == want
    for k in (3, 16, 17, 1025):  # whole permutations, one key
        xs = np.arange(k)
        assert np.array_equal(permute_lanes(xs, np.full(k, k), np.full(k, 7), np.full(k, 3)), permute(xs, k, 7, 3))
    with pytest.raises(ValueError, match="lane by lane"):
        permute_lanes([5], [5], [0], [0])
