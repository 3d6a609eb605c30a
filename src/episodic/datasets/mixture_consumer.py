"""One streaming consumer of a mixture: its slots (whole episodes of many entries) read by one
`ConsumerPipeline` per entry, items brought into the mixture's layout.

The consumer's list of slots comes from the streaming plan (`order.stream_plan` over `order.epoch_episodes`);
its `PoolOrder` draws (list position, frame) pairs as for a single dataset. Entry ``e``'s slots, in list order,
form the episode list of a `ConsumerPipeline` over ``e``'s dataset (its own fps, windows, cameras, source,
prefetching of rows and mp4 byte ranges). Which slots are read ahead is decided here, over the whole list:
the next ``prefetch_episodes`` slots after those admitted to the pool, whatever their entry. A pipeline is
opened when its entry's next slot comes within reach and closed as soon as it holds nothing (every slot it
read was released), so a consumer keeps at most pool + prefetch entries open, not every entry of the
mixture; a later slot of the same entry opens a new pipeline from there. Decoders are shared by all
pipelines (a local entry's files stay open across its pipelines). A slot's rows are brought into the mixture's
layout when it is first drawn from (`mixture_pool.PooledEpisode`, dropped when released), and a batch is gathered
from the drawn slots at once (`mixture_pool.gather`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from ..storage.resolve import reopen
from .mixture_pool import PooledEpisode, gather, positions_by_value
from .stream_pipeline import ConsumerPipeline

__all__ = ["MixtureConsumer"]


class MixtureConsumer:
    """Slots `entries[k]` (sampler entry), `episodes[k]` (episode of that entry's dataset), emitting the frames
    `frames[k]` (offsets in the episode), for the mixture dataset `owner` (a `StreamingMixtureDataset`). Has
    the interface `stream_pipeline.iterate_consumer` uses: `batch`, `release`, `close`."""

    def __init__(self, owner, entries: np.ndarray, episodes: np.ndarray, frames: Sequence, mirror_base: str):
        self.owner = owner
        self.entry = np.asarray(entries, dtype=np.int64)
        self.eps = np.asarray(episodes, dtype=np.int64)
        self.frames = list(frames)
        n = len(self.entry)
        self.positions = dict(positions_by_value(self.entry))  # entry -> its list positions, ascending
        self.local = np.empty(n, dtype=np.int64)  # a slot's place among its entry's slots
        for g in self.positions.values():
            self.local[g] = np.arange(len(g))
        self.released = np.zeros(n, dtype=bool)
        self.submitted = 0  # list positions [0, submitted) were handed to their pipelines
        self.open: dict[int, tuple[ConsumerPipeline, int]] = {}  # entry -> (pipeline, first local slot it covers)
        self.pooled: dict[int, PooledEpisode] = {}  # list position -> its episode in the mixture's layout
        self.next_start: dict[int, int] = {}
        self.sources: dict = {}
        self.mirror_base = mirror_base
        self.options = replace(owner.options, prefetch_episodes=0)  # read-ahead is decided here, over all entries
        self.pipelines_opened = 0
        # local entries' pipelines read their rows on one shared thread (a remote entry's pipeline has its own, so
        # that reads of several entries over the network overlap)
        self.tab_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="episodic-tabular")

    # ---------------------------------------------------------------- pipelines
    def _pipeline(self, e: int) -> tuple[ConsumerPipeline, int]:
        got = self.open.get(e)
        if got is not None:
            return got
        owner = self.owner
        start = self.next_start.get(e, 0)
        pos = self.positions[e][start:]
        index = owner.layout.entries[e].index
        if e not in self.sources:
            self.sources[e] = reopen(owner.report.sources[index])
        pipe = ConsumerPipeline(owner.report.metadata[index], owner.engines.spec(e), self.sources[e], self.options,
                                owner.counters, owner.decoders, self.eps[pos], [self.frames[p] for p in pos],
                                self.mirror_base, tab_pool=self.tab_pool if self.sources[e].is_local else None)
        pipe.release((self.local[pos[self.released[pos]]] - start).tolist())  # released before it was opened
        self.pipelines_opened += 1
        got = self.open[e] = (pipe, start)
        return got

    def _close(self, e: int) -> None:
        pipe, _ = self.open.pop(e)
        if not pipe.local:  # its mirror goes with it: so must the decoders opened on its files
            for rel in pipe.reader_gen:
                owner_decoders = self.owner.decoders
                owner_decoders.discard(pipe.source.local_path(rel))
        pipe.close()

    def _prefetch(self, upto: int) -> None:
        upto = min(upto, len(self.entry))
        while self.submitted < upto:
            k = self.submitted
            self.submitted += 1
            if self.released[k]:
                continue
            e = int(self.entry[k])
            pipe, start = self._pipeline(e)
            pipe.prefetch_until(int(self.local[k]) - start + 1)

    # ---------------------------------------------------------------- iterate_consumer's interface
    def batch(self, ks: np.ndarray, js: np.ndarray, admitted: int, make: Callable):
        """The batch of (list position, frame) pairs in the mixture's layout, made by `make`
        (`collate.make_batch` with the dataset's settings); `admitted` list positions have entered the pool."""
        owner = self.owner
        self._prefetch(admitted + owner.options.prefetch_episodes)
        ks = np.asarray(ks, dtype=np.int64)
        drawn = np.unique(ks)
        slots = [self._pooled(k) for k in drawn.tolist()]
        local = np.fromiter((self.frames[k][j] for k, j in zip(ks.tolist(), np.asarray(js).tolist())), np.int64, len(ks))
        batch = make(lambda dtype: gather(owner.layout, slots, np.searchsorted(drawn, ks), local, dtype))
        owner.items_per_entry.add(self.entry[ks])
        return batch

    def _pooled(self, k: int) -> PooledEpisode:
        """List position k's episode in the mixture's layout (built when first drawn from, kept until released)."""
        got = self.pooled.get(k)
        if got is None:
            e = int(self.entry[k])
            pipe, start = self._pipeline(e)
            got = self.pooled[k] = PooledEpisode(self.owner.layout, self.owner.layout.entries[e], pipe.spec, pipe.meta,
                                                 pipe.source, pipe.episode_rows(int(self.local[k]) - start),
                                                 pipe.decoders, pipe.counters)
        return got

    def release(self, done: Sequence[int]) -> None:
        """Release finished list positions; a pipeline left holding nothing is closed."""
        touched = set()
        for k in done:
            k = int(k)
            if self.released[k]:
                continue
            self.released[k] = True
            self.pooled.pop(k, None)
            e = int(self.entry[k])
            got = self.open.get(e)
            if got is not None:
                got[0].release([int(self.local[k]) - got[1]])
                touched.add(e)
        for e in touched:
            pipe, start = self.open[e]
            if pipe.released[:pipe.prefetched].all():
                self.next_start[e] = start + pipe.prefetched
                self._close(e)

    def close(self) -> None:
        try:
            for e in list(self.open):
                self._close(e)
        finally:
            self.tab_pool.shutdown(wait=True, cancel_futures=True)
