"""Streaming topology simulator: which frames every rank's loader hands out, batch by batch, over one epoch.

The streaming counterpart of :func:`episodic.order.simulate`, for the order of
``StreamingLeRobotDataset``, without touching data. Each run of the job has a
:class:`~episodic.order.simulate.Topology` (world size, DataLoader workers, batch
size) and stops after ``k`` batches per rank (or at the end of the epoch). The
resume state is the dataset's (``batches_consumed`` of the open segment, closed
segments in ``history``); a run on the same topology as the stopped one continues its
segment, another topology closes it. Within a run every consumer (rank x worker) is
rebuilt from the state alone, with the library's own pieces:
:func:`remaining_after`, :func:`segment_plan`, :func:`consumed_items`,
:func:`consumer_rng` and :class:`PoolOrder`. What is modelled here, not taken from the
library, is the DataLoader: worker ``w`` turns its order into batches of
``batch_size`` items; the loader hands them out round-robin over its workers, skipping
exhausted ones, and a new iterator starts at worker 0 (so worker ``w`` continues the
order of the consumer ``w`` places after the one that was due next).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import cycle

import numpy as np

from episodic.order.pool_order import PoolOrder
from episodic.order.shard import ConsumerId
from episodic.order.simulate import Topology
from episodic.order.stream_keys import consumer_rng
from episodic.order.stream_plan import consumer_plan
from episodic.order.stream_state import StreamState

__all__ = ["StreamBatch", "StreamSimulation", "simulate_stream"]


@dataclass(frozen=True)
class StreamBatch:
    """One batch handed to the training loop of one rank."""

    step: int  # global step since the start of the simulation (each rank hands out at most one batch a step)
    run: int  # 0 for the first run, +1 after each restart
    segment: int  # the epoch's segment: +1 each time a restart changes the topology
    rank: int
    worker: int  # DataLoader worker that produced it; -1 for the main process (workers=0)
    consumer: int  # whose order it continues: rank * max(workers, 1) + logical worker
    episodes: np.ndarray  # episode ids (keys of `lengths`)
    frames: np.ndarray  # frame offsets in those episodes


@dataclass
class StreamSimulation:
    batches: list[StreamBatch] = field(default_factory=list)
    states: list[dict] = field(default_factory=list)  # the state after each run, as the dataset's state_dict

    def items(self, run: int | None = None) -> np.ndarray:
        """``(n, 2)`` int64 array of (episode, frame) handed out (in ``run`` if given), by step then rank."""
        parts = [np.stack([b.episodes, b.frames], axis=1) for b in self.batches if run is None or b.run == run]
        return np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)

    def rank_batches(self, run: int, rank: int) -> list[StreamBatch]:
        """The batches rank ``rank`` handed out in run ``run``, in order."""
        return [b for b in self.batches if b.run == run and b.rank == rank]


def _takes(take_size: int | Sequence[int] | None, batch_size: int) -> Iterator[int]:
    if take_size is None:
        take_size = batch_size
    sizes = [int(t) for t in np.atleast_1d(take_size)]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"take sizes must be >= 1, got {take_size!r}")
    return cycle(sizes)


def _drain(order: PoolOrder, m: int, sizes: Iterator[int]) -> tuple[np.ndarray, np.ndarray]:
    """The next ``m`` items of ``order`` (fewer at its end), taken in pieces of the successive ``sizes``."""
    m = min(m, order.total - order.pos)
    ks, js = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    while m > 0:
        k, j = order.take(min(next(sizes), m))
        ks.append(k)
        js.append(j)
        m -= len(k)
    return np.concatenate(ks), np.concatenate(js)


def _rank_batches(
    lengths: Mapping[int, int], state: StreamState, rank: int, sizes: Iterator[int], pool_size: int, shuffle: bool
) -> list[tuple]:
    """Rank ``rank``'s batches left in the open segment of ``state`` (worker, consumer, episodes, frames), in
    the order a new DataLoader iterator hands them out: every worker's plan is `consumer_plan`'s, as in the
    dataset (whose state holds the same `pool_size` and `shuffle`)."""
    assert state.segment is not None, "a run's state has an open segment"
    ws, workers, bs = state.segment
    nw = max(workers, 1)
    per_worker = []
    for wid in range(nw):
        plan = consumer_plan(
            lengths,
            replace(state, segment=(ws, nw, bs)),
            ConsumerId(rank, ws, wid, nw),
            pool_size,
            shuffle,
        )
        rng = consumer_rng(state.seed, state.epoch, plan.segment, plan.consumer)
        order = PoolOrder([len(r) for r in plan.frames], pool_size, rng, shuffle)
        _drain(order, plan.skip, sizes)  # fast-forward past what was consumed
        k, j = _drain(order, order.total - order.pos, sizes)
        e = plan.episodes[k]
        f = np.fromiter((plan.frames[a][b] for a, b in zip(k.tolist(), j.tolist())), np.int64, len(k))
        worker = wid if workers else -1
        per_worker.append([(worker, plan.consumer, e[p : p + bs], f[p : p + bs]) for p in range(0, len(k), bs)])
    out: list[tuple] = []
    r = 0
    while any(r < len(b) for b in per_worker):  # round-robin over workers, skipping exhausted ones
        out.extend(b[r] for b in per_worker if r < len(b))
        r += 1
    return out


def simulate_stream(
    lengths: Mapping[int, int],
    runs: Sequence[tuple[Topology, int | None]],
    *,
    seed: int = 0,
    epoch: int = 0,
    pool_size: int = 64,
    shuffle: bool = True,
    take_size: int | Sequence[int] | None = None,
) -> StreamSimulation:
    """Simulate one epoch over episodes ``{episode: length}`` consumed by a job restarted on ``runs``.

    ``runs`` is a list of ``(topology, k)``: the job runs on ``topology`` until every rank has handed out
    ``k`` more batches, then stops and saves its state (``k=None``: to the end of the epoch, every rank
    handing out all its batches; only the last run may have it). ``k`` is cut to the fewest batches any
    rank has left, since a synchronous job stops all ranks at the same step. ``topology.drop_last`` must
    be False. Consumers take their order in pieces of ``take_size`` items (an int, or a sequence of sizes
    cycled through; default ``batch_size``): the result must not depend on it. ``states[i]`` is the
    state saved after run ``i`` (the next epoch's start after a ``k=None`` run).
    """
    sim = StreamSimulation()
    lengths = {int(e): int(n) for e, n in lengths.items()}
    state = StreamState(seed=seed, epoch=epoch, episode_pool_size=pool_size, shuffle=shuffle)
    step = 0
    for run, (topo, k) in enumerate(runs):
        if k is None and run != len(runs) - 1:
            raise ValueError("only the last run may go to the end of the epoch (k=None)")
        if k is not None and k < 0:
            raise ValueError(f"a run stops after k >= 0 batches per rank, got {k}")
        if topo.drop_last:
            raise ValueError("the streaming loader has no drop_last")
        state = state.open_segment(topo.world_size, topo.workers, topo.batch_size)  # as StreamingLoader does
        segment = len(state.history)
        sizes = _takes(take_size, topo.batch_size)
        streams = [_rank_batches(lengths, state, r, sizes, pool_size, shuffle) for r in range(topo.world_size)]
        n = max(map(len, streams)) if k is None else min(int(k), *map(len, streams))
        for s in range(n):
            for r, stream in enumerate(streams):
                if s < len(stream):
                    worker, c, e, f = stream[s]
                    sim.batches.append(StreamBatch(step + s, run, segment, r, worker, c, e, f))
        step += n
        state = state.advanced(n)
        if k is None:  # the loader ran to its end: the dataset moves on to the next epoch
            state = state.at_epoch(epoch + 1)
        sim.states.append(state.to_dict(world_size=topo.world_size))
    return sim
