"""One streaming consumer (a DataLoader worker of a rank, or the main process): its slots (whole episodes of one
or many entries) read ahead of its pool, and its batches gathered from the pooled episodes.

The consumer's slots and the order it emits their frames in come from `order/` (pure functions: `stream_plan`,
`pool_order`); this module only does I/O and item building. Which slots are read ahead is decided over the whole
list (the next `prefetch_episodes` slots after those admitted to the pool, whatever their entry), each entry's
slots read by its `entry_reader.EntryReader`. An entry's reader is opened when its next slot comes within reach
and closed as soon as it holds nothing, so a consumer keeps at most pool + prefetch entries open; a later slot of
the same entry opens a new reader from there. Decoders are shared by all readers. A pooled episode is a
`gather.Rows` part (its frames located once); a batch is one `gather` over the drawn episodes.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..counters import Counters, Tally
from ..storage.resolve import reopen
from ..video import DecoderCache
from .decode import EntryFrames
from .entry_reader import EntryReader, StreamEntry, episode_files
from .gather import Rows, gather, positions_by_value
from .item_layout import ItemLayout
from .stream_options import StreamOptions

__all__ = ["Consumer", "iterate_consumer"]


class Consumer:
    """Slots `entries[k]` (layout entry), `episodes[k]` (episode of that entry's dataset), emitting the frames
    `frames[k]` (offsets in the episode), gathered in `layout`. `entry(e)` says how to read entry e (called
    once per entry in this consumer's process); `options` the read-ahead, block and mirror settings; `decoders`
    and `counters` the dataset's in this process; `tally` (optional) counts items per entry. Has the interface
    `iterate_consumer` uses: `batch`, `release`, `read_ahead`, `close`."""

    def __init__(
        self,
        layout: ItemLayout,
        entry: Callable[[int], StreamEntry],
        entries: np.ndarray,
        episodes: np.ndarray,
        frames: Sequence,
        options: StreamOptions,
        counters: Counters,
        decoders: DecoderCache,
        mirror_base: str,
        tally: Tally | None = None,
    ):
        self.layout, self.entry_of = layout, entry
        self.entry = np.asarray(entries, dtype=np.int64)
        self.eps = np.asarray(episodes, dtype=np.int64)
        self.frames = list(frames)
        self.options, self.counters, self.decoders, self.tally = options, counters, decoders, tally
        n = len(self.entry)
        self.positions = dict(positions_by_value(self.entry))  # entry -> its list positions, ascending
        self.local = np.empty(n, dtype=np.int64)  # a slot's place among its entry's slots
        for g in self.positions.values():
            self.local[g] = np.arange(len(g))
        self.released = np.zeros(n, dtype=bool)
        self.submitted = 0  # list positions [0, submitted) were handed to their readers
        self.open: dict[int, tuple[EntryReader, int, EntryFrames]] = {}  # entry -> (reader, first local slot, frames)
        self.pooled: dict[int, Rows] = {}  # list position -> its pooled episode
        self.file_users: Counter[str] = Counter()  # local video file -> pooled episodes that read it
        self.next_start: dict[int, int] = {}
        self.entries: dict[int, StreamEntry] = {}  # entry -> its StreamEntry, source reopened in this process
        self.mirror_base = mirror_base
        self.readers_opened = 0
        # local entries' readers read their rows on one shared thread (a remote entry's reader has its own, so
        # that reads of several entries over the network overlap)
        self.tab_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="episodic-tabular")

    # ---------------------------------------------------------------- readers
    def _reader(self, e: int) -> tuple[EntryReader, int, EntryFrames]:
        got = self.open.get(e)
        if got is not None:
            return got
        start = self.next_start.get(e, 0)
        pos = self.positions[e][start:]
        if e not in self.entries:
            meta, spec, source = self.entry_of(e)
            self.entries[e] = StreamEntry(meta, spec, reopen(source))
        meta, spec, source = self.entries[e]
        reader = EntryReader(
            meta,
            spec,
            source,
            self.options,
            self.counters,
            self.decoders,
            self.eps[pos],
            self.mirror_base,
            tab_pool=self.tab_pool if source.is_local else None,
        )
        reader.release((self.local[pos[self.released[pos]]] - start).tolist())  # released before it was opened
        self.readers_opened += 1
        frames = EntryFrames(spec, reader.meta, reader.source, self.decoders, self.counters)
        got = self.open[e] = (reader, start, frames)
        return got

    def _close(self, e: int) -> None:
        reader, _, _ = self.open.pop(e)
        if not reader.local:  # its mirror goes with it: so must the decoders opened on its files
            for rel in reader.reader_gen:
                self.decoders.discard(reader.source.local_path(rel))
        reader.close()

    def _prefetch(self, upto: int) -> None:
        """Read ahead list positions [submitted, upto): first every slot's rows, then the video files of those
        read here (each phase's code and data stay in the CPU's caches over the burst)."""
        upto = min(upto, len(self.entry))
        readers = {}
        while self.submitted < upto:
            k = self.submitted
            self.submitted += 1
            if self.released[k]:
                continue
            e = int(self.entry[k])
            reader, start, _ = self._reader(e)
            reader.prefetch_until(int(self.local[k]) - start + 1)
            readers[e] = reader
        for reader in readers.values():
            reader.open_videos()

    # ---------------------------------------------------------------- iterate_consumer's interface
    def batch(self, ks: np.ndarray, js: np.ndarray, admitted: int, make: Callable):
        """The batch of (list position, frame) pairs, made by `make` (`collate.make_batch` with the dataset's
        settings) from `gather` over the drawn episodes; `admitted` list positions have entered the pool."""
        self._prefetch(admitted)  # (read ahead of them after the last batch: `read_ahead`)
        ks = np.asarray(ks, dtype=np.int64)
        drawn = np.unique(ks)
        parts = [self._pooled(k) for k in drawn.tolist()]
        local = np.fromiter(
            (self.frames[k][j] for k, j in zip(ks.tolist(), np.asarray(js).tolist())), np.int64, len(ks)
        )
        batch = make(lambda dtype: gather(self.layout, parts, np.searchsorted(drawn, ks), local, dtype))
        if self.tally is not None:
            self.tally.add(self.entry[ks])
        return batch

    def read_ahead(self, admitted: int) -> None:
        """Read the slots after the `admitted` ones that entered the pool, up to `prefetch_episodes` ahead, once
        the finished ones are released (the decoder cache holds the pool's and the read-ahead's files), in bursts
        of half the read-ahead or more rather than one slot between two batches' decoding: a burst's parquet reads
        and file opens find their code and data in the CPU's caches (a mixture of one-episode entries: ~1.3 ->
        ~0.95 ms per episode's rows)."""
        ahead = self.options.prefetch_episodes
        if self.submitted < admitted + max(1, ahead // 2):
            self._prefetch(admitted + ahead)

    def _pooled(self, k: int) -> Rows:
        """List position k's episode (read when first drawn from, kept until released)."""
        got = self.pooled.get(k)
        if got is None:
            e = int(self.entry[k])
            reader, start, frames = self._reader(e)
            got = self.pooled[k] = Rows(e, reader.episode_rows(int(self.local[k]) - start), frames, pooled=True)
            self.file_users.update(_video_files(got))
        return got

    def release(self, done: Sequence[int]) -> None:
        """Release finished list positions; a reader left holding nothing is closed."""
        touched = set()
        for k in done:
            k = int(k)
            if self.released[k]:
                continue
            self.released[k] = True
            rows = self.pooled.pop(k, None)
            for path in _video_files(rows) if rows is not None else ():
                self.file_users[path] -= 1
                if self.file_users[path] <= 0:  # no pooled episode reads it: its reader is the first to close
                    del self.file_users[path]
                    self.decoders.demote(path)
            e = int(self.entry[k])
            got = self.open.get(e)
            if got is not None:
                got[0].release([int(self.local[k]) - got[1]])
                touched.add(e)
        for e in touched:
            reader, start, _ = self.open[e]
            if reader.released[: reader.prefetched].all():
                self.next_start[e] = start + reader.prefetched
                self._close(e)

    def close(self) -> None:
        try:
            for e in list(self.open):
                self._close(e)
        finally:
            self.tab_pool.shutdown(wait=True, cancel_futures=True)


def _video_files(rows: Rows) -> list[str]:
    """The local video files of a pooled episode's cameras (none for a remote entry: its mirrored files go with
    their reader, `Consumer._close`)."""
    frames = rows.frames
    if not frames.source.is_local:
        return []
    return episode_files(frames.meta, frames.source, frames.spec, int(rows.columns.episodes[0]))


def iterate_consumer(consumer: Consumer, order, chunk_size: int, counters: Counters, t_start: float, make: Callable):
    """Batches (`make`: `collate.make_batch` with the dataset's settings) of up to `chunk_size` items in `order`
    (a PoolOrder already fast-forwarded to the resume point), releasing finished episodes as it goes; closes the
    consumer at the end."""
    consumer.release(order.finished)  # consumed before the resume point (or empty): never loaded
    order.finished.clear()
    try:
        while order.pos < order.total:
            kk, jj = order.take(chunk_size)
            batch = consumer.batch(kk, jj, order.admitted, make)
            consumer.release(order.finished)
            order.finished.clear()
            consumer.read_ahead(order.admitted)
            counters.add(frames_emitted=len(kk), first_item_seconds=time.perf_counter() - t_start)
            yield batch
    finally:
        consumer.close()
