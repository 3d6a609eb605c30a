"""The DataLoader's round-robin over workers: closed-form arithmetic against a step-by-step model."""

import numpy as np

from episodic.order import consumed_items, round_robin, worker_batches_consumed


def handed_out(batches_per_worker):
    """The worker of every batch a DataLoader hands out, one by one: workers in turn, skipping the exhausted."""
    out, r = [], 0
    while any(r < b for b in batches_per_worker):
        out += [w for w, b in enumerate(batches_per_worker) if r < b]
        r += 1
    return out


def test_worker_batches_round_robin_skips_exhausted_workers():
    assert worker_batches_consumed(5, [3, 3]) == [3, 2]
    assert worker_batches_consumed(5, [1, 4]) == [1, 4]
    assert worker_batches_consumed(4, [1, 4, 0]) == [1, 3, 0]


def test_round_robin_matches_the_step_by_step_loader():
    rng = np.random.default_rng(0)
    for _ in range(400):
        n = rng.integers(0, 9, int(rng.integers(1, 6))).tolist()
        seq = handed_out(n)
        for consumed in range(len(seq) + 2):
            got, nxt = round_robin(consumed, n)
            assert got == [seq[:consumed].count(w) for w in range(len(n))], (n, consumed)
            assert nxt == (seq[consumed] if consumed < len(seq) else 0), (n, consumed)
            assert worker_batches_consumed(consumed, n) == got


def test_consumed_items_counts_short_last_batches():
    assert consumed_items([10, 3, 7], 4, 5) == ([8, 3, 7], 0)
    assert consumed_items([0, 9], 2, 3) == ([0, 6], 1)
    rng = np.random.default_rng(1)
    for _ in range(200):
        counts = rng.integers(0, 30, int(rng.integers(1, 5))).tolist()
        bs = int(rng.integers(1, 8))
        seq = handed_out([-(-c // bs) for c in counts])
        for consumed in range(len(seq) + 1):
            items, nxt = consumed_items(counts, bs, consumed)
            assert items == [min(seq[:consumed].count(w) * bs, c) for w, c in enumerate(counts)]
            assert nxt == (seq[consumed] if consumed < len(seq) else 0)
