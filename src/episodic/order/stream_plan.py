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
from dataclasses import dataclass

import numpy as np

from episodic.order.episode_split import plan_episodes
from episodic.order.pool_order import PoolOrder
from episodic.order.round_robin import batches_per_worker, consumed_items
from episodic.order.shard import ConsumerId
from episodic.order.stream_keys import consumer_rng
from episodic.order.stream_state import StreamState

__all__ = ["ConsumerPlan", "consumer_plan", "remaining_after", "segment_batches", "segment_plan", "split_problems"]


# the frames (offsets in their episode) an episode has still to emit: an untouched episode's `range`, or an
# ascending int64 array
Frames = range | np.ndarray


def segment_plan(
    remaining: Mapping[int, Frames],
    world_size: int,
    num_workers: int,
    seed: int,
    epoch: int,
    segment: int,
    shuffle: bool,
) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
    """Candidate episodes (ascending), the positions of each consumer's episodes among them, and each
    consumer's number of frames.

    `remaining` maps an episode to the frames (offsets in the episode) still to emit; episodes with none
    left are not candidates. Consumer `c = rank * num_workers + worker` emits the frames of
    `cand[plans[c]]`, in that list order."""
    cand = np.asarray(sorted(e for e, f in remaining.items() if len(f)), dtype=np.int64)
    counts = np.asarray([len(remaining[int(e)]) for e in cand], dtype=np.int64)
    plans = plan_episodes(counts, world_size * num_workers, seed, epoch, segment, shuffle)
    return cand, plans, [int(counts[p].sum()) for p in plans]


def remaining_after(
    lengths: Mapping[int, int], history: Sequence[Sequence[int]], seed: int, epoch: int, pool_size: int, shuffle: bool
) -> dict[int, Frames]:
    """Frames (offsets in their episode) not yet consumed after the closed segments `history`, each
    [world_size, num_workers, batch_size, batches_consumed] (batches consumed per rank).

    Every episode of `lengths` is a key of the result; an episode untouched so far keeps an O(1)
    `range`, a touched one gets an ascending int64 array (empty once it is fully consumed).
    `num_workers=0` (no DataLoader workers) counts as one consumer per rank."""
    remaining: dict[int, Frames] = {int(e): range(int(n)) for e, n in lengths.items()}  # untouched episodes stay O(1)
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


@dataclass(frozen=True)
class ConsumerPlan:
    """One consumer's share of the open segment: its episodes (dataset indices) in pool-admission order, the
    frames (offsets in each episode) it emits of each, the items it already handed out before the resume
    point, its consumer id (rank x workers + worker) and the segment index; plus, for warnings, the number
    of candidate episodes and every consumer's frame count."""

    episodes: np.ndarray
    frames: list
    skip: int
    consumer: int
    segment: int
    candidates: int
    consumer_frames: list[int]


def consumer_plan(
    lengths: Mapping[int, int], state: StreamState, at: ConsumerId, pool_size: int, shuffle: bool
) -> ConsumerPlan:
    """The plan of the consumer `at` (its worker and rank) in the open segment of `state` (after its `history`,
    `batches_consumed` batches of the segment's batch size into it; seed and epoch). A new DataLoader iterator
    starts its round-robin at worker 0: worker w plays the part of the worker that was w places after the one
    due to hand out the next batch."""
    assert state.segment is not None, "a consumer plans the open segment"
    seed, epoch, history, batch_size = state.seed, state.epoch, state.history, state.segment[2]
    remaining = remaining_after(lengths, history, seed, epoch, pool_size, shuffle)
    segment = len(history)
    rank, nw = at.rank, at.num_workers
    cand, plans, frames = segment_plan(remaining, at.world_size, nw, seed, epoch, segment, shuffle)
    took, nxt = consumed_items(frames[rank * nw : (rank + 1) * nw], max(batch_size, 1), state.batches_consumed)
    logical = (nxt + at.worker) % nw
    eps = cand[plans[rank * nw + logical]]
    return ConsumerPlan(
        episodes=eps,
        frames=[remaining[int(e)] for e in eps],
        skip=took[logical],
        consumer=rank * nw + logical,
        segment=segment,
        candidates=len(cand),
        consumer_frames=frames,
    )


def segment_batches(lengths: Mapping[int, int], state: StreamState, pool_size: int, shuffle: bool) -> list[int]:
    """Batches each rank hands out in the open segment of `state` (its topology and batch size, after its
    `history`), counted from its start."""
    assert state.segment is not None, "batches of the open segment"
    world_size, num_workers, batch_size = state.segment
    nw = max(num_workers, 1)
    remaining = remaining_after(lengths, state.history, state.seed, state.epoch, pool_size, shuffle)
    _, _, frames = segment_plan(remaining, world_size, nw, state.seed, state.epoch, len(state.history), shuffle)
    return [sum(batches_per_worker(frames[r * nw : (r + 1) * nw], batch_size)) for r in range(world_size)]


def split_problems(plan: ConsumerPlan, world_size: int, num_workers: int, ranks: bool = True) -> list[str]:
    """What is uneven about a segment's split: consumers left without an episode, and (with `ranks`) ranks
    with different frame counts (in a synchronous job the rank that runs dry first leaves the others
    waiting in a collective op)."""
    ws, nw, out = world_size, num_workers, []
    if plan.candidates < ws * nw:
        out.append(
            f"streaming: {plan.candidates} episodes for {ws * nw} consumers (world_size {ws} x {nw} workers): "
            f"{ws * nw - plan.candidates} consumers get no episode"
        )
    per_rank = [sum(plan.consumer_frames[r * nw : (r + 1) * nw]) for r in range(ws)]
    if ranks and ws > 1 and len(set(per_rank)) > 1:
        out.append(
            f"streaming: world_size {ws} does not divide the epoch evenly: ranks get {min(per_rank)}.."
            f"{max(per_rank)} frames, so some ranks run out of batches first (stop every rank at the shortest, "
            f"e.g. loader(even_batches=True), or expect a hang in collective ops)"
        )
    return out
