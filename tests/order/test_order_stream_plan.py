"""segment_plan and remaining_after: the composition of one epoch over closed segments, pinned."""

import hashlib
import json

import numpy as np
import pytest

from episodic.order import PoolOrder, consumer_rng, remaining_after, segment_plan


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def as_lists(remaining) -> dict:
    return {int(e): [int(x) for x in v] for e, v in remaining.items()}


LENGTHS = {0: 12, 2: 7, 3: 15, 5: 9, 8: 4, 9: 1}

# Reference outputs produced by the implementation of the released streaming format (before the order code
# moved to episodic.order), seed 5, epoch 1, pool 2. They pin which frames a saved resume state still has
# to emit: do not regenerate them.
PINNED_REMAINING = [
    (
        [[2, 2, 3, 2]],
        {
            0: [0, 2, 3, 4, 5, 6, 8, 9, 10, 11],
            2: [0, 2, 3, 5],
            3: [0, 1, 2, 4, 5, 7, 8, 9, 10, 11, 12, 14],
            5: [0, 1, 2, 5, 6, 7],
            8: [0, 1, 2, 3],
            9: [],
        },
    ),
    (
        [[2, 2, 3, 2], [1, 0, 2, 4]],
        {
            0: [2, 5, 11],
            2: [2, 3, 5],
            3: [0, 1, 2, 4, 5, 7, 8, 9, 10, 11, 12, 14],
            5: [0, 1, 2, 5, 6, 7],
            8: [0, 1, 2, 3],
            9: [],
        },
    ),
    (
        [[2, 2, 3, 2], [1, 0, 2, 4], [3, 1, 1, 2]],
        {0: [2, 5, 11], 2: [3, 5], 3: [0, 2, 4, 5, 7, 8, 9, 10, 11, 14], 5: [1, 5, 6, 7], 8: [1, 2, 3], 9: []},
    ),
]
PINNED_UNSHUFFLED = {
    0: [],
    2: [],
    3: [5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
    5: [0, 1, 2, 3, 4, 5, 6, 7, 8],
    8: [0, 1, 2, 3],
    9: [0],
}
# a larger case, pinned by digest: (remaining, plan of the next segment, every consumer's whole order)
PINNED_DIGESTS = ("d6332a0ba95dbdad", "c9e4b8debd1f41ee", "b93782eb1d42e5f3")


def test_no_history_leaves_every_frame_as_a_range():
    got = remaining_after(LENGTHS, [], 5, 1, 2, True)
    assert got == {e: range(n) for e, n in LENGTHS.items()}


@pytest.mark.parametrize("history,want", PINNED_REMAINING)
def test_remaining_after_is_pinned(history, want):
    assert as_lists(remaining_after(LENGTHS, history, 5, 1, 2, True)) == want


def test_remaining_after_unshuffled_is_pinned():
    assert as_lists(remaining_after(LENGTHS, [[2, 1, 4, 3]], 5, 1, 2, False)) == PINNED_UNSHUFFLED


def test_larger_case_is_pinned_by_digest():
    rng = np.random.default_rng(42)
    lengths = {int(e): int(n) for e, n in zip(np.sort(rng.choice(500, 120, replace=False)), rng.integers(1, 200, 120))}
    history = [[4, 3, 16, 5], [2, 0, 32, 7], [3, 2, 8, 11]]
    rem = remaining_after(lengths, history, 99, 4, 8, True)
    cand, plans, frames = segment_plan(rem, 3, 2, 99, 4, 3, True)
    ks, js = [], []
    for c in range(6):
        eps = cand[plans[c]]
        k, j = PoolOrder([len(rem[int(e)]) for e in eps], 8, consumer_rng(99, 4, 3, c)).take(10**9)
        ks.append(eps[k].tolist())
        js.append(j.tolist())
    got = (
        digest({str(e): v for e, v in as_lists(rem).items()}),
        digest([cand.tolist(), [p.tolist() for p in plans], frames]),
        digest([ks, js]),
    )
    assert got == PINNED_DIGESTS


def test_segment_plan_covers_the_remaining_frames():
    rem = remaining_after(LENGTHS, PINNED_REMAINING[0][0], 5, 1, 2, True)
    cand, plans, frames = segment_plan(rem, 2, 3, 5, 1, 1, True)
    assert cand.tolist() == [0, 2, 3, 5, 8]  # episode 9 has nothing left
    assert sorted(np.concatenate(plans).tolist()) == list(range(len(cand)))
    assert frames == [sum(len(rem[int(e)]) for e in cand[p]) for p in plans]
    assert sum(frames) == sum(len(v) for v in rem.values())


def test_each_closed_segment_removes_what_its_ranks_consumed():
    """Replaying history segment by segment: each step removes exactly min(k * batch, frames) per consumer
    of the frames left, and never a frame twice."""
    rng = np.random.default_rng(8)
    for _ in range(60):
        lengths = {int(e): int(rng.integers(0, 20)) for e in rng.choice(40, int(rng.integers(1, 12)), replace=False)}
        history, prev = [], remaining_after(lengths, [], 1, 0, 3, True)
        for _ in range(int(rng.integers(1, 4))):
            ws, nw, bs, k = (
                int(rng.integers(1, 4)),
                int(rng.integers(0, 3)),
                int(rng.integers(1, 6)),
                int(rng.integers(0, 6)),
            )
            _, _, frames = segment_plan(prev, ws, max(nw, 1), 1, 0, len(history), True)
            history.append([ws, nw, bs, k])
            now = remaining_after(lengths, history, 1, 0, 3, True)
            n = max(nw, 1)
            taken = 0
            for r in range(ws):
                per_worker = frames[r * n : (r + 1) * n]
                nb = [-(-f // bs) for f in per_worker]
                order = [w for i in range(max(nb, default=0)) for w in range(n) if i < nb[w]][:k]
                taken += sum(min(order.count(w) * bs, f) for w, f in enumerate(per_worker))
            assert sum(map(len, prev.values())) - sum(map(len, now.values())) == taken
            for e in lengths:
                assert set(now[e]) <= set(prev[e])
            prev = now
