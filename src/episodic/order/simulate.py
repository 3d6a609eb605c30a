"""Topology simulator: who consumes which indices, step by step, without touching data.

Runs the real :class:`EpisodicBatchSampler` code for every rank of
``nodes x ranks_per_node`` processes, models the DataLoader handing batch ``k`` of
an iterator to worker ``k % workers`` (worker ``-1``: the main process), models
prefetching (batches pulled from the sampler but never consumed are discarded at a
stop), and at each event stops, saves rank 0's state and restarts every rank with
the new topology from it. A public test utility: cheap enough for hundreds of
topologies per second on small datasets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from episodic.order.batch_sampler import EpisodicBatchSampler
from episodic.order.sampler import EpisodeAwareSampler

__all__ = ["Topology", "ConsumedBatch", "Simulation", "simulate"]


@dataclass(frozen=True)
class Topology:
    nodes: int = 1
    ranks_per_node: int = 1
    workers: int = 0
    batch_size: int = 1
    drop_last: bool = False

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node


@dataclass(frozen=True)
class ConsumedBatch:
    """One batch handed to the training loop of one rank."""

    step: int  # global step since the start of the simulation
    epoch: int
    segment: int  # 0 for the initial topology, +1 after each restart
    rank: int
    node: int
    local_rank: int
    worker: int  # DataLoader worker that loaded it; -1 for the main process (workers=0)
    indices: np.ndarray


@dataclass
class Simulation:
    batches: list[ConsumedBatch] = field(default_factory=list)
    states: list[dict] = field(default_factory=list)  # state saved at each stop, then the final state

    def indices(self, epoch: int | None = None) -> np.ndarray:
        """All consumed indices (of ``epoch`` if given) in consumption order: by step, then rank."""
        parts = [b.indices for b in self.batches if epoch is None or b.epoch == epoch]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def by_consumer(self) -> dict[tuple[int, int, int], list[np.ndarray]]:
        """``{(segment, rank, worker): [batch indices, ...]}`` in the order each consumer saw them."""
        out: dict[tuple[int, int, int], list[np.ndarray]] = {}
        for b in self.batches:
            out.setdefault((b.segment, b.rank, b.worker), []).append(b.indices)
        return out


def _as_sampler(source, shuffle: bool, seed: int):
    if hasattr(source, "indices_at"):  # an EpisodeAwareSampler, a MixtureSampler
        return source
    if isinstance(source, (int, np.integer)):
        return EpisodeAwareSampler([0], [int(source)], shuffle=shuffle, seed=seed)
    starts, ends = source
    return EpisodeAwareSampler(starts, ends, shuffle=shuffle, seed=seed)


def simulate(
    source,
    topology: Topology,
    events=(),
    *,
    epochs: int = 1,
    max_steps: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    state: dict | None = None,
    prefetch_factor: int = 2,
    batch_sampler=EpisodicBatchSampler,
) -> Simulation:
    """Simulate training over ``source`` (a dataset size, ``(from, to)`` arrays or a sampler).

    ``batch_sampler`` is the per-rank batch sampler class (``MixtureBatchSampler`` for a ``MixtureSampler``).
    ``events`` is a list of ``(stop_step, new_topology)``: after global step ``stop_step``
    (counted from the start of the simulation) the job stops and restarts with
    ``new_topology``. Runs until ``epochs`` epochs have ended or ``max_steps`` steps.
    """
    sampler = _as_sampler(source, shuffle, seed)
    events = sorted(events, key=lambda e: e[0])
    sim = Simulation()
    current = state or {"seed": sampler.seed, "epoch": 0, "consumed": 0}
    end_epoch = int(current["epoch"]) + epochs
    step, segment = 0, 0
    while True:
        stop = events[segment][0] if segment < len(events) else None
        topo = topology if segment == 0 else events[segment - 1][1]
        ranks = []
        for rank in range(topo.world_size):
            bs = batch_sampler(
                sampler, topo.batch_size, rank=rank, world_size=topo.world_size, drop_last=topo.drop_last
            )
            bs.load_state_dict(current)
            ranks.append(bs)
        iters, pulled = None, 0
        while ranks[0].epoch < end_epoch and (max_steps is None or step < max_steps) and step != stop:
            if iters is None:  # a new DataLoader iterator: worker round-robin restarts at 0
                iters, pulled, epoch = [iter(bs) for bs in ranks], 0, ranks[0].epoch
            batch = [next(it, None) for it in iters]
            if batch[0] is None:
                assert all(b is None for b in batch), "ranks disagree on the number of steps"
                iters = None
                continue
            worker = pulled % topo.workers if topo.workers else -1
            for rank, idx in enumerate(batch):
                node, local = divmod(rank, topo.ranks_per_node)
                sim.batches.append(
                    ConsumedBatch(step, epoch, segment, rank, node, local, worker, np.asarray(idx, dtype=np.int64))
                )
            for bs in ranks:
                bs.advance(1)
            pulled += 1
            step += 1
        if iters is not None:  # prefetched but never consumed: must not affect the state
            for it in iters:
                for _ in range(prefetch_factor * max(topo.workers, 1)):
                    next(it, None)
        states = [bs.state_dict() for bs in ranks]
        assert all(s == states[0] for s in states), f"rank states diverged: {states}"
        current = states[0]
        sim.states.append(current)
        if step != stop:
            return sim
        segment += 1
