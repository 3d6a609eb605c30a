"""plan_episodes: whole episodes over consumers, balanced by frames, keyed by (seed, epoch, segment)."""

import numpy as np
import pytest

from episodic.order import permute, plan_episodes

# Reference splits produced by the implementation of the released streaming format (before the order code
# moved to episodic.order). They pin the order that saved resume states refer to: do not regenerate them.
PIN_COUNTS = [34, 25, 20, 10, 12, 1, 3, 0, 7, 32, 25, 36, 20]
PINNED_PLANS = {
    (0, 0, 0, 3, True): [[7, 9, 11], [10, 5, 1, 4, 12], [3, 6, 0, 8, 2]],
    (7, 2, 1, 4, True): [[1, 5, 10], [3, 6, 2, 12], [0, 9], [7, 4, 8, 11]],
    (123456789012, 1, 3, 5, True): [[3, 9], [11], [6, 12, 10], [7, 4, 2, 1], [0, 5, 8]],
    (2**64 + 9, 0, 2, 2, True): [[1, 9, 10, 5, 7, 6, 3, 4], [2, 8, 12, 11, 0]],
    (3, 0, 0, 4, False): [[0, 12], [1, 10], [2, 5, 6, 9], [3, 4, 7, 8, 11]],
}


@pytest.mark.parametrize("key", list(PINNED_PLANS))
def test_plan_is_pinned(key):
    seed, epoch, segment, consumers, shuffle = key
    got = plan_episodes(np.array(PIN_COUNTS), consumers, seed, epoch, segment, shuffle)
    assert [p.tolist() for p in got] == PINNED_PLANS[key]
    assert all(p.dtype == np.int64 for p in got)


def test_plan_splits_episodes_evenly_and_deterministically():
    counts = np.array([30, 10, 25, 17, 22, 15, 29, 11])
    a = plan_episodes(counts, 3, seed=1, epoch=2)
    b = plan_episodes(counts, 3, seed=1, epoch=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert sorted(np.concatenate(a).tolist()) == list(range(8))
    frames = [int(counts[x].sum()) for x in a]
    assert max(frames) - min(frames) <= counts.max()
    c = plan_episodes(counts, 3, seed=1, epoch=3)
    assert any(not np.array_equal(x, y) for x, y in zip(a, c))
    assert all(len(x) > 0 for x in plan_episodes(counts, 8, seed=0, epoch=0))  # no idle consumer


def test_greedy_bound_and_partition_over_random_inputs():
    rng = np.random.default_rng(3)
    for _ in range(300):
        n, consumers = int(rng.integers(0, 40)), int(rng.integers(1, 12))
        counts = rng.integers(0, 50, n)
        plans = plan_episodes(
            counts,
            consumers,
            int(rng.integers(1 << 40)),
            int(rng.integers(5)),
            int(rng.integers(4)),
            bool(rng.integers(2)),
        )
        assert len(plans) == consumers
        assert sorted(np.concatenate(plans).tolist()) == list(range(n))
        loads = [int(counts[p].sum()) for p in plans]
        for p, load in zip(plans, loads):  # the last episode went to a least-loaded consumer
            if len(p):
                assert load - counts[p[-1]] <= min(loads)


def test_segment_zero_follows_permute_and_segments_differ():
    counts = np.ones(50, dtype=np.int64)
    assert np.array_equal(plan_episodes(counts, 1, 9, 4)[0], permute(np.arange(50), 50, 9, 4))
    assert not np.array_equal(plan_episodes(counts, 1, 9, 4, segment=1)[0], plan_episodes(counts, 1, 9, 4)[0])
    unshuffled = plan_episodes(counts, 3, 9, 4, shuffle=False)
    assert [p.tolist() for p in unshuffled] == [list(range(c, 50, 3)) for c in range(3)]
