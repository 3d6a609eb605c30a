"""The streaming order of one epoch over a sequence of topologies ("segments").

Within a segment, consumers = ``world_size x num_workers``; the frames not consumed
by the earlier segments are split by :func:`plan_episodes` (keyed by the segment) and
each consumer emits its share by a :class:`PoolOrder` keyed by
:func:`consumer_rng`. A segment is closed by a resume on another topology and recorded
as ``[world_size, num_workers, batch_size, batches_consumed]`` (batches consumed per
rank); :func:`remaining_after` replays closed segments, order arithmetic only, to find
the frames left for the next one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from episodic.order.episode_split import plan_episodes
from episodic.order.pool_order import PoolOrder
from episodic.order.round_robin import consumed_items
from episodic.order.stream_keys import consumer_rng

__all__ = ["remaining_after", "segment_plan"]


def segment_plan(remaining: Mapping[int, Sequence[int]], world_size: int, num_workers: int, seed: int, epoch: int,
                 segment: int, shuffle: bool) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
    """Candidate episodes (ascending), the positions of each consumer's episodes among them, and each
    consumer's number of frames.

    `remaining` maps an episode to the frames (offsets in the episode) still to emit; episodes with none
    left are not candidates. Consumer `c = rank * num_workers + worker` emits the frames of
    `cand[plans[c]]`, in that list order."""
    cand = np.asarray(sorted(e for e, f in remaining.items() if len(f)), dtype=np.int64)
    counts = np.asarray([len(remaining[int(e)]) for e in cand], dtype=np.int64)
    plans = plan_episodes(counts, world_size * num_workers, seed, epoch, segment, shuffle)
    return cand, plans, [int(counts[p].sum()) for p in plans]


def remaining_after(lengths: Mapping[int, int], history: Sequence[Sequence[int]], seed: int, epoch: int,
                    pool_size: int, shuffle: bool) -> dict[int, Sequence[int]]:
    """Frames (offsets in their episode) not yet consumed after the closed segments `history`, each
    [world_size, num_workers, batch_size, batches_consumed] (batches consumed per rank).

    Every episode of `lengths` is a key of the result; an episode untouched so far keeps an O(1)
    `range`, a touched one gets an ascending int64 array (empty once it is fully consumed).
    `num_workers=0` (no DataLoader workers) counts as one consumer per rank."""
    remaining = {int(e): range(int(n)) for e, n in lengths.items()}  # untouched episodes stay O(1)
    for s, (ws, nw, bs, k) in enumerate(history):
        nw = max(int(nw), 1)  # num_workers=0: the main process is the one consumer of its rank
        cand, plans, _ = segment_plan(remaining, ws, nw, seed, epoch, s, shuffle)
        consumed: dict[int, list[np.ndarray]] = {}
        for r in range(ws):
            orders = []
            for w in range(nw):
                c = r * nw + w
                eps = cand[plans[c]]
                counts = [len(remaining[int(e)]) for e in eps]
                orders.append((eps, PoolOrder(counts, pool_size, consumer_rng(seed, epoch, s, c), shuffle)))
            took = consumed_items([o.total for _, o in orders], bs, k)[0]
            for (eps, order), m in zip(orders, took):
                kk, jj = order.take(m)
                for e, j in zip(eps[kk].tolist(), jj.tolist()):
                    consumed.setdefault(e, []).append(j)
        for e, js in consumed.items():
            keep = np.ones(len(remaining[e]), dtype=bool)
            keep[np.asarray(js, dtype=np.int64)] = False
            remaining[e] = np.asarray(remaining[e], dtype=np.int64)[keep]
    return remaining

