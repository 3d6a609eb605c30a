"""Sharding rule: how W ranks split ONE global order, as pure functions.

Each global step consumes the next ``W * B`` positions of the epoch's global order
(``B`` = per-rank batch size); rank ``r`` takes the ``r``-th block of ``B`` of them.
Counting from the epoch's ``consumed`` samples, step ``s`` gives rank ``r`` positions
``consumed + s*W*B + r*B + [0, B)``. Since consumption is always a prefix of the
global order, a resumed run with a different ``W`` or ``B`` re-splits exactly the
positions ``[consumed, N)``.

Uneven tail: with ``drop_last=False`` the last global step is padded to a full
``W * B`` by wrapping around to the start of the same epoch's order (position
``p >= N`` reads position ``p % N``); with ``drop_last=True`` a last step with fewer
than ``W * B`` remaining positions is dropped. The rule only depends on
``(N, consumed, W, B)``, so it is identical on resume.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ConsumerId", "steps_in_epoch", "step_positions", "rank_positions", "advance", "resolve_topology"]


@dataclass(frozen=True)
class ConsumerId:
    """Which consumer of the data one process is: rank `rank` of `world_size`, DataLoader worker `worker` of
    `num_workers` (1 in a process without workers). (A whole job's topology, for the simulators, is
    `order.simulate.Topology`.)"""

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    def __post_init__(self):
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank={self.rank}, world_size={self.world_size}")
        if self.num_workers < 1 or not 0 <= self.worker < self.num_workers:
            raise ValueError(
                f"need 0 <= worker < num_workers, got worker={self.worker}, num_workers={self.num_workers}"
            )

    @property
    def consumers(self) -> int:
        """Consumers in all: ranks x workers."""
        return self.world_size * self.num_workers


def steps_in_epoch(num_samples: int, consumed: int, global_batch: int, drop_last: bool = False) -> int:
    """Global steps left in the epoch after ``consumed`` samples."""
    left = max(num_samples - consumed, 0)
    return left // global_batch if drop_last else -(-left // global_batch)


def step_positions(consumed: int, step: int, world_size: int, batch_size: int, num_samples: int) -> np.ndarray:
    """Positions (shape ``(world_size, batch_size)``) of global step ``step`` after ``consumed``, padded."""
    start = consumed + step * world_size * batch_size
    return (start + np.arange(world_size * batch_size, dtype=np.int64)).reshape(world_size, batch_size) % num_samples


def rank_positions(
    consumed: int, step: int, rank: int, world_size: int, batch_size: int, num_samples: int
) -> np.ndarray:
    """Positions of rank ``rank``'s batch at global step ``step`` after ``consumed``, padded."""
    start = consumed + (step * world_size + rank) * batch_size
    return (start + np.arange(batch_size, dtype=np.int64)) % num_samples


def advance(
    epoch: int, consumed: int, steps: int, num_samples: int, global_batch: int, drop_last: bool = False
) -> tuple[int, int]:
    """``(epoch, consumed)`` after ``steps`` more global steps; rolls over at the end of an epoch."""
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    per_epoch = steps_in_epoch(num_samples, 0, global_batch, drop_last)
    if per_epoch == 0:
        raise ValueError(f"an epoch of {num_samples} samples has no full global batch of {global_batch}")
    left = steps_in_epoch(num_samples, consumed, global_batch, drop_last)
    if steps < left:
        return epoch, consumed + steps * global_batch
    steps -= left
    return epoch + 1 + steps // per_epoch, (steps % per_epoch) * global_batch


def resolve_topology(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """``(rank, world_size)``: the given values, else torch.distributed's when initialised, else (0, 1)."""
    if rank is None or world_size is None:
        try:
            import torch.distributed as dist  # lazy: the order package itself needs numpy only

            initialized = dist.is_available() and dist.is_initialized()
        except ImportError:  # pragma: no cover
            initialized = False
        if rank is None:
            rank = dist.get_rank() if initialized else 0
        if world_size is None:
            world_size = dist.get_world_size() if initialized else 1
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    return rank, world_size
