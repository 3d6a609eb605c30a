"""Split whole episodes over consumers: keyed random order, then greedy to the least-loaded consumer.

Consumers are ``world_size x num_workers`` (consumer id ``rank * num_workers + worker``).
The split is by episode, not by file, so consumers stay busy when files are fewer than
consumers; frame counts differ by at most one episode's length.
"""

from __future__ import annotations

import heapq

import numpy as np

from episodic.order.permutation import permute
from episodic.order.stream_keys import segment_seed

__all__ = ["plan_episodes"]


def plan_episodes(
    counts: np.ndarray, num_consumers: int, seed: int, epoch: int, segment: int = 0, shuffle: bool = True
) -> list[np.ndarray]:
    """Positions into `counts` (frames to emit per candidate episode) for each consumer.

    Episodes are taken in a keyed random order (`permute` keyed by `segment_seed(seed, segment)` and
    `epoch`; ascending when not shuffling) and each goes to the consumer with the fewest frames so far
    (ties: lowest consumer), so consumers differ by at most one episode's length. Each consumer's list
    keeps the order of assignment. Every position appears in exactly one list; a pure function of its
    arguments."""
    counts = np.asarray(counts, dtype=np.int64)
    n = len(counts)
    order = permute(np.arange(n), n, segment_seed(seed, segment), epoch) if (shuffle and n > 1) else np.arange(n)
    heap = [(0, c) for c in range(num_consumers)]
    lists: list[list[int]] = [[] for _ in range(num_consumers)]
    for i in order.tolist():
        frames, c = heapq.heappop(heap)
        lists[c].append(i)
        heapq.heappush(heap, (frames + int(counts[i]), c))
    return [np.asarray(x, dtype=np.int64) for x in lists]
