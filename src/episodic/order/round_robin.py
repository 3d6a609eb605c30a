"""How a DataLoader hands out the batches of its workers: round-robin, skipping exhausted workers.

A ``torch.utils.data.DataLoader`` over an IterableDataset asks its workers for batches
in turn (worker 0, 1, ..., 0, ...); a worker that has run out is skipped from then on.
Given every worker's number of batches, these functions say how many of its batches
each worker had handed out after the loader handed out ``batches_consumed``, and
which worker is due next: what a resumed worker needs to skip exactly the items that
were consumed. Pure integer arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["batches_per_worker", "consumed_items", "round_robin", "worker_batches_consumed"]


def worker_batches_consumed(batches_consumed: int, batches_per_worker: Sequence[int]) -> list[int]:
    """How many of its batches each DataLoader worker had handed out after `batches_consumed` batches: the
    loader takes batches round-robin over workers, skipping the exhausted ones."""
    return round_robin(batches_consumed, batches_per_worker)[0]


def round_robin(batches_consumed: int, batches_per_worker: Sequence[int]) -> tuple[list[int], int]:
    """(batches handed out per worker, the worker that hands out the next batch (0 when none is left)).

    `batches_consumed` beyond the total counts as the total: every worker then has handed out all of its
    batches. Costs O(workers) for the whole rounds plus O(workers * (max - min batches)) for the rest."""
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


def batches_per_worker(counts_per_worker: Sequence[int], batch_size: int) -> list[int]:
    """Batches each worker hands out when worker `w` emits `counts_per_worker[w]` items in batches of
    `batch_size` (its last batch may be short)."""
    return [-(-int(c) // batch_size) for c in counts_per_worker]


def consumed_items(counts_per_worker: Sequence[int], batch_size: int, batches_consumed: int) -> tuple[list[int], int]:
    """Items each worker had handed out, and the worker that serves the next batch, when worker `w` emits
    `counts_per_worker[w]` items in batches of `batch_size` (its last batch may be short)."""
    got, nxt = round_robin(batches_consumed, batches_per_worker(counts_per_worker, batch_size))
    return [min(g * batch_size, c) for g, c in zip(got, counts_per_worker)], nxt
