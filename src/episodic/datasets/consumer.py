"""One streaming consumer (a DataLoader worker of a rank, or the main process): its slots (whole episodes of one
or many entries) read ahead of its pool, and its batches gathered from the pooled episodes.

The consumer's slots and the order it emits their frames in come from `order/` (pure functions: `stream_plan`,
`pool_order`); this module only does I/O and item building:

- `EntryReader`: one entry's slots of the consumer, in list order: rows read in blocks of `tabular_block`
  episodes (one thread, or the consumer's own for a small local block, `SYNC_READ_ROWS`; remote parquet files
  in place through retried range requests, or fetched whole when the server ignores Range), and for a remote
  entry each episode's byte span of each mp4 fetched into a sparse file of a private mirror
  (`storage.prefetch.Prefetcher`) ahead of the pool; a decoder that may have seen a hole now filled is
  reopened.
- `Consumer`: which slots are read ahead is decided over the whole list (the next `prefetch_episodes` slots
  after those admitted to the pool, whatever their entry). An entry's reader is opened when its next slot comes
  within reach and closed as soon as it holds nothing, so a consumer keeps at most pool + prefetch entries open;
  a later slot of the same entry opens a new reader from there. Decoders are shared by all readers. A pooled
  episode is a `gather.Rows` part (its frames located once); a batch is one `gather` over the drawn episodes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import NamedTuple

import numpy as np
from fsspec.implementations.local import LocalFileSystem

from ..counters import Counters, Tally
from ..format.errors import DatasetFormatError, FrameTimestampError, VideoDecodeError
from ..format.metadata import DatasetMetadata
from ..storage.prefetch import Prefetcher, RangesIgnored
from ..storage.resolve import reopen
from ..storage.source import Source
from ..tabular import Columns, load_columns
from ..video import DecoderCache
from .decode import EntryFrames
from .gather import Rows, gather, positions_by_value
from .item_layout import ItemLayout
from .item_spec import ItemSpec
from .stream_options import StreamOptions

__all__ = ["Consumer", "EntryReader", "StreamEntry", "iterate_consumer"]

# A local block of at most this many rows is read on the consumer's own thread when it is planned: handing a
# read this small to the tabular thread cost more than the read (a mixture of one-episode entries reads one
# ~100-row file per episode: the thread's wake-ups and GIL hand-overs with the decoding thread took ~2x the
# read's own CPU time, `benchmarks/bench_mixture.py` streaming 0.83 -> 0.88 of the single dataset). Larger
# blocks, and every remote read, stay on the thread, where they overlap decoding.
SYNC_READ_ROWS = 4096


class StreamEntry(NamedTuple):
    """What a consumer reads of one entry: its metadata, item spec and source (reopened in the consumer's
    process)."""

    meta: DatasetMetadata
    spec: ItemSpec
    source: Source


class EntryReader:
    """Rows and video bytes of one entry's episodes of a consumer (`episodes[k]`), read ahead of the pool as far
    as `prefetch_until` says; `episode_rows(k)` waits for episode k's. Its `meta` and `source` are where frames
    are decoded from (a remote entry's: its private mirror)."""

    def __init__(
        self,
        meta: DatasetMetadata,
        spec: ItemSpec,
        source: Source,
        options: StreamOptions,
        counters: Counters,
        decoders: DecoderCache,
        episodes: np.ndarray,
        mirror_base: str,
        tab_pool: ThreadPoolExecutor | None = None,
    ):
        self.spec, self.options, self.counters, self.decoders = spec, options, counters, decoders
        self.eps = episodes
        self.local = source.is_local
        mirror = None
        if not self.local:
            os.makedirs(mirror_base, exist_ok=True)
            mirror = tempfile.mkdtemp(prefix="mirror-", dir=mirror_base)
        self.mirror = mirror
        o = options
        self.prefetcher = Prefetcher(
            source.fs,
            source.root,
            self.mirror,
            o.mirror_max_bytes,
            self.local,
            threads=o.prefetch_threads,
            policy=o.fetch,
            stats=counters,
        )
        if mirror is None:
            self.meta = self.remote_meta = meta
            self.source = source
        else:  # videos are decoded from the mirror; data files are read by range requests
            self.meta = replace(meta, fs=LocalFileSystem(), root=mirror)
            self.remote_meta = replace(meta, fs=source.fs, root=source.root)
            self.source = Source(fs=LocalFileSystem(), root=mirror)
        # the thread that reads rows ahead: the reader's own, or one its consumer shares among readers (a consumer
        # opens one reader per entry it draws from: a thread started and joined for each cost ~3 ms)
        self.own_pool = tab_pool is None
        self.tab_pool = (
            tab_pool
            if tab_pool is not None
            else ThreadPoolExecutor(max_workers=1, thread_name_prefix="episodic-tabular")
        )
        self.blocks: dict[int, Future] = {}
        self.rows: dict[int, Columns] = {}  # list position -> the episode's rows, once admitted
        self.videos: dict[int, list[str]] = {}  # list position -> acquired video files
        self.video_futs: dict[int, list[Future]] = {}
        self.reader_gen: dict[str, int] = {}  # video file -> mirror generation its reader may have seen
        self.prefetched = 0  # list positions [0, prefetched) have been submitted
        self.to_open: list[int] = []  # local episodes read on the consumer's thread whose files are not open yet
        self.released = np.zeros(len(episodes), dtype=bool)

    # ---------------------------------------------------------------- loading
    def prefetch_until(self, upto: int) -> None:
        """Start reading the rows and video bytes of list episodes [0, upto) not read yet (its consumer decides
        how far ahead each of its entries' readers reads)."""
        upto = min(upto, len(self.eps))
        G = self.options.tabular_block
        while self.prefetched < upto:
            k = self.prefetched
            self.prefetched += 1
            if self.released[k]:
                continue
            b = k // G
            if b not in self.blocks:
                lo, hi = b * G, min((b + 1) * G, len(self.eps))
                wanted = self.eps[lo:hi][~self.released[lo:hi]]
                if self.local and int(self.meta.episodes.length[wanted].sum()) <= SYNC_READ_ROWS:
                    self.blocks[b] = _run_now(self._load_block, wanted)
                    self.to_open.extend(wanted.tolist())  # opened by `open_videos`, after the burst's rows
                else:
                    self.blocks[b] = self.tab_pool.submit(self._load_block, wanted)
            if not self.local:
                ep = int(self.eps[k])
                rels = [self.meta.video_file_of(ep, key) for key in self.spec.video_keys]
                cams = [self.meta.episodes.cameras[key] for key in self.spec.video_keys]
                self.videos[k] = rels
                self.video_futs[k] = [
                    self.prefetcher.acquire_span(r, float(c.from_ts[ep]), float(c.to_ts[ep]))
                    for r, c in zip(rels, cams)
                ]

    def open_videos(self) -> None:
        """Open the video files of the local episodes whose rows were read on this thread since the last call
        (the decoder cache holds the pool's and the read-ahead's files). A file that fails to open is left to the
        first decode of its episode, whose error names the episode and camera."""
        episodes, self.to_open = self.to_open, []
        paths = dict.fromkeys(p for e in episodes for p in _episode_files(self.meta, self.source, self.spec, int(e)))
        for path in paths:
            try:
                self.decoders.get(path)
            except (FrameTimestampError, VideoDecodeError, DatasetFormatError, OSError):
                continue

    def _load_block(self, wanted: np.ndarray) -> dict[int, Columns]:
        with self.counters.timer("tabular_seconds"):
            block_eps = np.unique(wanted)
            keys = list(self.spec.data_keys)
            unknown = self.spec.unknown_tasks  # the dataset's (a mixture: the entry's): warns once
            cols = None
            if self.local:
                cols = load_columns(self.meta, block_eps, keys, unknown_tasks=unknown)
            elif self.prefetcher.ranges:  # read in place through retried range requests
                try:
                    cols = load_columns(
                        self.remote_meta, block_eps, keys, open_file=self.prefetcher.open_remote, unknown_tasks=unknown
                    )
                except RangesIgnored:
                    self.prefetcher.ranges = False
            if cols is None:  # a server without range requests: whole files into the mirror
                rels = sorted({self.meta.data_file_of(int(e)) for e in block_eps})
                futs = [self.prefetcher.acquire(r) for r in rels]
                try:
                    for f in futs:
                        f.result()
                    cols = load_columns(self.meta, block_eps, keys, unknown_tasks=unknown)
                finally:
                    for r in rels:
                        self.prefetcher.release(r)
            cols = self.spec.resample(cols, self.meta)  # rows as items read them (a control rate: resampled)
            return {e: cols.episode(i) for i, e in enumerate(block_eps.tolist())}

    def episode_rows(self, k: int) -> Columns:
        """The rows of list episode k, waiting for its block and video bytes the first time."""
        cols = self.rows.get(k)
        if cols is not None:
            return cols
        with self.counters.timer("wait_seconds"):
            cols = self.blocks[k // self.options.tabular_block].result()[int(self.eps[k])]
            for f in self.video_futs.get(k, ()):
                f.result()
            self._discard_stale_readers(self.videos.get(k, ()))
        self.rows[k] = cols
        self.counters.add(episodes_admitted=1)
        return cols

    def _discard_stale_readers(self, rels: Sequence[str]) -> None:
        """Close the decoders of mirror files written to since they may have been opened: FFmpeg may have
        buffered zeros of a hole that now holds this episode's bytes (consumer thread only: the decoder
        cache is not thread-safe)."""
        for rel in rels:
            gen = self.prefetcher.generation(rel)
            if self.reader_gen.get(rel) != gen:
                self.decoders.discard(self.source.local_path(rel))
                self.reader_gen[rel] = gen

    def release(self, done: Sequence[int]) -> None:
        """Release finished list episodes: their rows, decoders' claim and video files."""
        G = self.options.tabular_block
        for k in done:
            if self.released[k]:
                continue
            self.released[k] = True
            if k >= self.prefetched:  # never loaded
                continue
            self.rows.pop(k, None)
            for r in self.videos.pop(k, ()):
                self.prefetcher.release(r)
            self.video_futs.pop(k, None)
            b = k // G
            if self.released[b * G : min((b + 1) * G, len(self.eps))].all():
                self.blocks.pop(b, None)

    def close(self) -> None:
        if self.own_pool:
            self.tab_pool.shutdown(wait=True, cancel_futures=True)
        else:  # the shared thread goes on: only this reader's reads are called off, or waited for when under way
            for f in self.blocks.values():
                if not f.cancel():
                    try:
                        f.result()
                    except Exception:  # noqa: BLE001 -- closing: the error belonged to rows no one reads now
                        pass
        self.prefetcher.close()
        self.rows.clear()
        self.blocks.clear()
        if self.mirror is not None:
            shutil.rmtree(self.mirror, ignore_errors=True)


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


def _run_now(fn: Callable, *args) -> Future:
    """`fn(*args)` run here, as a finished future (its error raised where its result is asked for, as a
    thread's would be)."""
    fut: Future = Future()
    try:
        fut.set_result(fn(*args))
    except Exception as e:  # noqa: BLE001 -- handed to whoever asks for the rows
        fut.set_exception(e)
    return fut


def _video_files(rows: Rows) -> list[str]:
    """The local video files of a pooled episode's cameras (none for a remote entry: its mirrored files go with
    their reader, `Consumer._close`)."""
    frames = rows.frames
    if not frames.source.is_local:
        return []
    return _episode_files(frames.meta, frames.source, frames.spec, int(rows.columns.episodes[0]))


def _episode_files(meta: DatasetMetadata, source: Source, spec: ItemSpec, ep: int) -> list[str]:
    """The local paths of episode `ep`'s video files, one per camera of `spec`."""
    return [source.local_path(meta.video_file_of(ep, key)) for key in spec.video_keys]


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
