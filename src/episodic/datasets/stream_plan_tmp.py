"""TEMPORARY home of the pure streaming order (moving to order/ in this change; see order/stream_plan.py)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..order.permutation import permute

_MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------------------------------------- pure order
def _segment_seed(seed: int, segment: int) -> int:
    return int(seed) if segment == 0 else (int(seed) * 0x9E3779B97F4A7C15 + segment * 0xBF58476D1CE4E5B9) & _MASK64


def plan_episodes(counts: np.ndarray, num_consumers: int, seed: int, epoch: int, segment: int = 0,
                  shuffle: bool = True) -> list[np.ndarray]:
    """Positions into `counts` (frames to emit per candidate episode) for each consumer.

    Episodes are taken in a keyed random order (`permute(seed, epoch)`; ascending when not shuffling) and
    each goes to the consumer with the fewest frames so far (ties: lowest consumer), so consumers differ
    by at most one episode's length. Each consumer's list keeps the order of assignment."""
    counts = np.asarray(counts, dtype=np.int64)
    n = len(counts)
    order = permute(np.arange(n), n, _segment_seed(seed, segment), epoch) if (shuffle and n > 1) else np.arange(n)
    heap = [(0, c) for c in range(num_consumers)]
    lists: list[list[int]] = [[] for _ in range(num_consumers)]
    for i in order.tolist():
        frames, c = heapq.heappop(heap)
        lists[c].append(i)
        heapq.heappush(heap, (frames + int(counts[i]), c))
    return [np.asarray(x, dtype=np.int64) for x in lists]


class PoolOrder:
    """One consumer's emission order, generated as it is consumed: memory O(pool), not O(frames).

    List episodes enter a pool of up to `pool_size` in list order; each item is a uniformly random remaining
    frame of the pool (a slot drawn with probability proportional to its remaining frames, then the next frame
    of that episode's random permutation); a finished episode is replaced by the next one. Without shuffle,
    episodes are emitted whole, in list order, frames ascending. The sequence depends only on (counts,
    pool_size, rng), never on how it is taken (`take(3); take(5)` == `take(8)`), so resuming is `take(skip)`.
    """

    _BLOCK = 4096  # uniforms are drawn in fixed blocks, so chunking cannot change the sequence

    def __init__(self, counts: Sequence[int], pool_size: int, rng: np.random.Generator | None, shuffle: bool = True):
        self.counts = [int(c) for c in counts]
        self.total = sum(self.counts)
        self.pool_size = max(1, int(pool_size))
        self.shuffle = bool(shuffle) and rng is not None
        if self.shuffle:
            self._perm_rng = np.random.default_rng(int(rng.integers(1 << 62)))
            self._u_rng = np.random.default_rng(int(rng.integers(1 << 62)))
        self._u: list[float] = []
        self._ui = 0
        self.pos = 0  # items emitted so far
        self.admitted = 0  # list episodes that have entered the pool
        self.finished: list[int] = []  # list episodes finished (or empty) since the caller last cleared it
        self._k: list[int] = []
        self._perm: list[list[int] | None] = []
        self._rem: list[int] = []
        self._remaining = 0
        self._fill()

    def _fill(self) -> None:
        while len(self._k) < self.pool_size and self.admitted < len(self.counts):
            e, c = self.admitted, self.counts[self.admitted]
            self.admitted += 1
            if c == 0:
                self.finished.append(e)
                continue
            self._k.append(e)
            self._perm.append(self._perm_rng.permutation(c).tolist() if self.shuffle else None)
            self._rem.append(c)
            self._remaining += c

    def _uniform(self) -> float:
        if self._ui == len(self._u):
            self._u, self._ui = self._u_rng.random(self._BLOCK).tolist(), 0
        self._ui += 1
        return self._u[self._ui - 1]

    def take(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        """The next m items (fewer at the end): list-episode index and frame index (in the episode's frames)."""
        m = max(0, min(int(m), self.total - self.pos))
        out_k = np.empty(m, dtype=np.int64)
        out_j = np.empty(m, dtype=np.int64)
        for p in range(m):
            i = 0
            if self.shuffle:
                x = int(self._uniform() * self._remaining)
                while x >= self._rem[i]:
                    x -= self._rem[i]
                    i += 1
            n = self.counts[self._k[i]]
            r = self._rem[i] - 1
            out_k[p] = self._k[i]
            out_j[p] = self._perm[i][n - 1 - r] if self.shuffle else n - 1 - r
            self._remaining -= 1
            if r == 0:
                self.finished.append(self._k[i])
                del self._k[i], self._perm[i], self._rem[i]
                self._fill()
            else:
                self._rem[i] = r
        self.pos += m
        return out_k, out_j


def consumer_order(counts: Sequence[int], pool_size: int, rng: np.random.Generator | None,
                   shuffle: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The whole order of `PoolOrder` at once (for analysis and tests): (k, j, admit), admit[k] being the
    item position at which list episode k entered the pool."""
    order = PoolOrder(counts, pool_size, rng, shuffle)
    admit = np.zeros(len(order.counts), dtype=np.int64)
    ks, js, seen = [], [], order.admitted
    while order.pos < order.total:
        k, j = order.take(1)
        ks.append(k)
        js.append(j)
        admit[seen:order.admitted] = order.pos
        seen = order.admitted
    k = np.concatenate(ks) if ks else np.empty(0, np.int64)
    return k, (np.concatenate(js) if js else np.empty(0, np.int64)), admit


def worker_batches_consumed(batches_consumed: int, batches_per_worker: Sequence[int]) -> list[int]:
    """How many of its batches each DataLoader worker had handed out after `batches_consumed` batches: the
    loader takes batches round-robin over workers, skipping the exhausted ones."""
    return _round_robin(batches_consumed, batches_per_worker)[0]


def _round_robin(batches_consumed: int, batches_per_worker: Sequence[int]) -> tuple[list[int], int]:
    """(batches handed out per worker, the worker that hands out the next batch (0 when none is left))."""
    n = [int(b) for b in batches_per_worker]
    got = [0] * len(n)
    left = int(batches_consumed)
    full = min(n) if n else 0  # whole rounds in which every worker has a batch
    rounds = min(full, left // max(len(n), 1))
    got = [rounds] * len(n)
    left -= rounds * len(n)
    r = rounds
    while any(r < b for b in n):
        for w, b in enumerate(n):
            if r < b:
                if left == 0:
                    return got, w
                got[w] += 1
                left -= 1
        r += 1
    return got, 0


def _consumer_rng(seed: int, epoch: int, segment: int, consumer: int) -> np.random.Generator:
    return np.random.default_rng([int(seed) & _MASK64, int(epoch), int(segment), int(consumer), 0x5EED])


def _segment_plan(remaining: Mapping[int, Sequence[int]], world_size: int, num_workers: int, seed: int, epoch: int,
                  segment: int, shuffle: bool) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
    """Candidate episodes (ascending), the positions of each consumer's episodes among them, and each
    consumer's number of frames."""
    cand = np.asarray(sorted(e for e, f in remaining.items() if len(f)), dtype=np.int64)
    counts = np.asarray([len(remaining[int(e)]) for e in cand], dtype=np.int64)
    plans = plan_episodes(counts, world_size * num_workers, seed, epoch, segment, shuffle)
    return cand, plans, [int(counts[p].sum()) for p in plans]


def _consumed_items(counts_per_worker: Sequence[int], batch_size: int, batches_consumed: int) -> tuple[list[int], int]:
    """Items each worker had handed out, and the worker that serves the next batch."""
    nb = [-(-c // batch_size) for c in counts_per_worker]
    got, nxt = _round_robin(batches_consumed, nb)
    return [min(g * batch_size, c) for g, c in zip(got, counts_per_worker)], nxt


def remaining_after(lengths: Mapping[int, int], history: Sequence[Sequence[int]], seed: int, epoch: int,
                    pool_size: int, shuffle: bool) -> dict[int, Sequence[int]]:
    """Frames (offsets in their episode) not yet consumed after the closed segments `history`, each
    [world_size, num_workers, batch_size, batches_consumed] (batches consumed per rank)."""
    remaining = {int(e): range(int(n)) for e, n in lengths.items()}  # untouched episodes stay O(1)
    for s, (ws, nw, bs, k) in enumerate(history):
        nw = max(int(nw), 1)  # num_workers=0: the main process is the one consumer of its rank
        cand, plans, _ = _segment_plan(remaining, ws, nw, seed, epoch, s, shuffle)
        consumed: dict[int, list[np.ndarray]] = {}
        for r in range(ws):
            orders = []
            for w in range(nw):
                c = r * nw + w
                eps = cand[plans[c]]
                counts = [len(remaining[int(e)]) for e in eps]
                orders.append((eps, PoolOrder(counts, pool_size, _consumer_rng(seed, epoch, s, c), shuffle)))
            took = _consumed_items([o.total for _, o in orders], bs, k)[0]
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


def consumer_plan(lengths: Mapping[int, int], seed: int, epoch: int, history: Sequence[Sequence[int]],
                  world_size: int, num_workers: int, batch_size: int, batches_consumed: int, pool_size: int,
                  shuffle: bool, rank: int, worker: int) -> ConsumerPlan:
    """The plan of DataLoader worker `worker` (of `num_workers`, at least 1) of rank `rank` in the segment
    after `history`, `batches_consumed` batches of `batch_size` into it. A new DataLoader iterator starts
    its round-robin at worker 0: worker w plays the part of the worker that was w places after the one due
    to hand out the next batch."""
    remaining = remaining_after(lengths, history, seed, epoch, pool_size, shuffle)
    segment = len(history)
    nw = num_workers
    cand, plans, frames = _segment_plan(remaining, world_size, nw, seed, epoch, segment, shuffle)
    took, nxt = _consumed_items(frames[rank * nw:(rank + 1) * nw], max(batch_size, 1), batches_consumed)
    logical = (nxt + worker) % nw
    eps = cand[plans[rank * nw + logical]]
    return ConsumerPlan(episodes=eps, frames=[remaining[int(e)] for e in eps], skip=took[logical],
                        consumer=rank * nw + logical, segment=segment, candidates=len(cand), consumer_frames=frames)


def segment_batches(lengths: Mapping[int, int], seed: int, epoch: int, history: Sequence[Sequence[int]],
                    world_size: int, num_workers: int, batch_size: int, pool_size: int, shuffle: bool) -> list[int]:
    """Batches each rank hands out in the segment after `history`, counted from its start."""
    nw = max(num_workers, 1)
    remaining = remaining_after(lengths, history, seed, epoch, pool_size, shuffle)
    _, _, frames = _segment_plan(remaining, world_size, nw, seed, epoch, len(history), shuffle)
    return [sum(-(-frames[r * nw + w] // batch_size) for w in range(nw)) for r in range(world_size)]
