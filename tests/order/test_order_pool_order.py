"""PoolOrder: one consumer's order over a bounded pool of episodes, independent of how it is taken."""

from collections.abc import Sequence

import numpy as np
import pytest

from episodic.order import PoolOrder, consumer_rng


def consumer_order(
    counts: Sequence[int], pool_size: int, rng: np.random.Generator | None, shuffle: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The whole order of `PoolOrder` at once (for analysis and tests): (k, j, admit), admit[k] being the
    item position at which list episode k entered the pool."""
    order = PoolOrder(counts, pool_size, rng, shuffle)
    admit = np.zeros(len(order.counts), dtype=np.int64)
    ks, js, seen = [], [], order.admitted
    while order.pos < order.total:
        k, j = order.take(1)
        ks.append(k)
        js.append(j)
        admit[seen : order.admitted] = order.pos
        seen = order.admitted
    k = np.concatenate(ks) if ks else np.empty(0, np.int64)
    return k, (np.concatenate(js) if js else np.empty(0, np.int64)), admit


# Reference sequences produced by the implementation of the released streaming format (before the order
# code moved to episodic.order). They pin the order that saved resume states refer to: do not regenerate.
PINNED = [
    (
        ([5, 0, 3, 7, 4], 2, 11, True),
        [0, 0, 0, 0, 2, 0, 3, 3, 3, 3, 2, 2, 3, 4, 3, 4, 4, 4, 3],
        [2, 1, 0, 4, 2, 3, 4, 5, 0, 1, 0, 1, 2, 0, 6, 2, 3, 1, 3],
    ),
    (
        ([5, 0, 3, 7, 4], 1, 11, True),
        [0, 0, 0, 0, 0, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4],
        [2, 1, 0, 4, 3, 2, 0, 1, 4, 5, 0, 1, 2, 6, 3, 0, 2, 3, 1],
    ),
    (([4, 2, 0, 3], 2, None, False), [0, 0, 0, 0, 1, 1, 3, 3, 3], [0, 1, 2, 3, 0, 1, 0, 1, 2]),
]
PINNED_CONSUMER = (
    [1, 0, 0, 1, 1, 3, 1, 1, 1, 1, 0, 1, 0, 0, 0, 4, 4, 4, 4, 4, 4, 3, 4, 3, 4, 3, 1],
    [1, 1, 2, 4, 8, 3, 7, 0, 3, 2, 5, 6, 4, 0, 3, 7, 4, 3, 1, 0, 5, 1, 6, 0, 2, 2, 5],
)


@pytest.mark.parametrize("args,k,j", PINNED)
def test_pool_order_is_pinned(args, k, j):
    counts, pool, rng_seed, shuffle = args
    order = PoolOrder(counts, pool, None if rng_seed is None else np.random.default_rng(rng_seed), shuffle)
    got_k, got_j = order.take(10**6)
    assert got_k.tolist() == k and got_j.tolist() == j


def test_pool_order_with_consumer_rng_is_pinned():
    order = PoolOrder([6, 9, 0, 4, 8], 3, consumer_rng(5, 1, 2, 3))
    k, j = order.take(10**6)
    assert (k.tolist(), j.tolist()) == PINNED_CONSUMER


def test_consumer_order_is_a_permutation_within_the_pool():
    counts = [5, 3, 7, 4]
    k, j, admit = consumer_order(counts, 2, np.random.default_rng(0))
    pairs = sorted(zip(k.tolist(), j.tolist()))
    assert pairs == [(e, f) for e, n in enumerate(counts) for f in range(n)]
    for p in range(len(k)):  # at most 2 episodes admitted and unfinished at any time
        live = {int(e) for e in range(4) if admit[e] <= p and (k[p:] == e).any()}
        assert len(live) <= 2
    k0, j0, _ = consumer_order(counts, 2, None, shuffle=False)
    assert k0.tolist() == sorted(k0.tolist()) and j0[:5].tolist() == list(range(5))


def test_pool_order_does_not_depend_on_how_it_is_taken():
    counts = [int(c) for c in np.random.default_rng(5).integers(0, 40, 30)]
    whole_k, whole_j, _ = consumer_order(counts, 4, np.random.default_rng(9))
    order = PoolOrder(counts, 4, np.random.default_rng(9))
    parts, sizes = [], np.random.default_rng(1).integers(1, 50, 100)
    for m in sizes:
        parts.append(order.take(int(m)))
    k = np.concatenate([p[0] for p in parts])
    j = np.concatenate([p[1] for p in parts])
    assert np.array_equal(k, whole_k) and np.array_equal(j, whole_j) and len(k) == sum(counts)
    assert sorted(order.finished) == list(range(len(counts)))  # every episode reported finished once


def test_pool_order_crosses_the_uniform_block_boundary_unchanged():
    """More items than one block of uniforms (PoolOrder._BLOCK): chunking across the boundary changes nothing."""
    counts = [700] * 9  # 6300 items > 4096
    whole = PoolOrder(counts, 3, np.random.default_rng(2)).take(10**6)
    order = PoolOrder(counts, 3, np.random.default_rng(2))
    parts = [order.take(m) for m in (4095, 1, 1, 2000, 10**6)]
    assert np.array_equal(np.concatenate([p[0] for p in parts]), whole[0])
    assert np.array_equal(np.concatenate([p[1] for p in parts]), whole[1])
    assert order.pos == order.total == 6300 and order.take(5)[0].size == 0
