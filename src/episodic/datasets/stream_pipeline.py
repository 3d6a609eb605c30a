"""One streaming consumer's I/O pipeline: reads its episodes' rows in blocks and their video bytes ahead
of the pool (in background threads), and builds the items of a chunk with the shared `FrameEngine`.

A consumer is one DataLoader worker of one rank (or the main process). Its episodes and the order it emits
their frames in come from `order/` (pure functions); this module only does I/O and item building:

- rows: blocks of `tabular_block` episodes read in one go (one thread), kept until all their episodes are
  released; remote parquet files are read in place through retried range requests (footer + the needed
  row groups), or fetched whole when the server ignores Range headers;
- videos (remote sources): `prefetch_episodes` ahead of the pool, each episode's byte span of each mp4 is
  fetched into a sparse file of a private mirror directory (`storage.prefetch.Prefetcher`); a decoder that
  may have seen a hole now filled is reopened;
- items: the pooled episodes a chunk draws from are put side by side in one `Columns`, and one
  `FrameEngine.batch` call builds the chunk (one decode pass per file).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np
from fsspec.implementations.local import LocalFileSystem

from ..counters import Counters
from ..format.metadata import DatasetMetadata
from ..storage.prefetch import Prefetcher, RangesIgnored
from ..storage.source import Source
from ..tabular import Columns, load_columns
from ..video import DecoderCache
from .collate import Batch
from .engine import FrameEngine, ItemSpec
from .stream_options import StreamOptions


class ConsumerPipeline:
    """Rows and video bytes of one consumer's episodes (`episodes[k]`, emitting frames `frames[k]`), read
    ahead of the pool; `batch(ks, js, admitted)` builds the items of (list position, frame) pairs."""

    def __init__(self, meta: DatasetMetadata, spec: ItemSpec, source: Source, options: StreamOptions,
                 counters: Counters, decoders: DecoderCache, episodes: np.ndarray, frames: list,
                 mirror_base: str, tab_pool: ThreadPoolExecutor | None = None):
        self.spec, self.options, self.counters, self.decoders = spec, options, counters, decoders
        self.eps, self.frames = episodes, frames
        self.local = source.is_local
        self.mirror = None
        if not self.local:
            os.makedirs(mirror_base, exist_ok=True)
            self.mirror = tempfile.mkdtemp(prefix="mirror-", dir=mirror_base)
        o = options
        self.prefetcher = Prefetcher(source.fs, source.root, self.mirror, o.cache_max_bytes, self.local,
                                     threads=o.prefetch_threads, policy=o.fetch, stats=counters)
        if self.local:
            self.meta = self.remote_meta = meta
            self.source = source
        else:  # videos are decoded from the mirror; data files are read by range requests
            self.meta = replace(meta, fs=LocalFileSystem(), root=self.mirror)
            self.remote_meta = replace(meta, fs=source.fs, root=source.root)
            self.source = Source(fs=LocalFileSystem(), root=self.mirror)
        # the thread that reads rows ahead: the pipeline's own, or one its owner shares among pipelines (a mixture's
        # consumer opens one pipeline per entry it draws from: a thread started and joined for each cost ~3 ms)
        self.own_pool = tab_pool is None
        self.tab_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="episodic-tabular") if self.own_pool \
            else tab_pool
        self.blocks: dict[int, Future] = {}
        self.rows: dict[int, Columns] = {}  # list position -> the episode's rows, once admitted
        self.videos: dict[int, list[str]] = {}  # list position -> acquired video files
        self.video_futs: dict[int, list[Future]] = {}
        self.reader_gen: dict[str, int] = {}  # video file -> mirror generation its reader may have seen
        self.prefetched = 0  # list positions [0, prefetched) have been submitted
        self.released = np.zeros(len(episodes), dtype=bool)

    # ---------------------------------------------------------------- loading
    def _submit_until(self, upto: int) -> None:
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
                self.blocks[b] = self.tab_pool.submit(self._load_block, wanted)
            if not self.local:
                ep = int(self.eps[k])
                rels = [self.meta.video_file_of(ep, key) for key in self.spec.video_keys]
                cams = [self.meta.episodes.cameras[key] for key in self.spec.video_keys]
                self.videos[k] = rels
                self.video_futs[k] = [self.prefetcher.acquire_span(r, float(c.from_ts[ep]), float(c.to_ts[ep]))
                                      for r, c in zip(rels, cams)]

    def prefetch_until(self, upto: int) -> None:
        """Start reading the rows and video bytes of list episodes [0, upto) not read yet (a mixture's consumer
        decides how far ahead each of its entries' pipelines reads)."""
        self._submit_until(upto)

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
                    cols = load_columns(self.remote_meta, block_eps, keys, open_file=self.prefetcher.open_remote,
                                        unknown_tasks=unknown)
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

    # ---------------------------------------------------------------- items
    def batch(self, ks: np.ndarray, js: np.ndarray, admitted: int, make: Callable) -> Batch:
        """The batch of items for (list episode, frame) pairs, made by `make` (`collate.make_batch` with the
        dataset's settings); `admitted` list episodes have entered the pool so far."""
        engine, rows = self.engine_for(ks, js, admitted)
        return make(lambda dtype: engine.batch(rows, dtype))

    def engine_for(self, ks: np.ndarray, js: np.ndarray, admitted: int) -> tuple[FrameEngine, np.ndarray]:
        """An engine over the rows of the pooled episodes the pairs draw from, and the pairs' positions in it."""
        self._submit_until(admitted + self.options.prefetch_episodes)
        groups = np.unique(ks)
        cols = Columns.concat([self.episode_rows(int(k)) for k in groups])
        engine = FrameEngine(self.spec, self.meta, self.source, cols, decoders=self.decoders, counters=self.counters)
        g = np.searchsorted(groups, ks)
        rows = cols.starts[g] + np.fromiter((self.frames[k][j] for k, j in zip(ks.tolist(), js.tolist())),
                                            np.int64, len(ks))
        return engine, rows

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
            if self.released[b * G:min((b + 1) * G, len(self.eps))].all():
                self.blocks.pop(b, None)

    def close(self) -> None:
        if self.own_pool:
            self.tab_pool.shutdown(wait=True, cancel_futures=True)
        else:  # the shared thread goes on: only this pipeline's reads are called off, or waited for when under way
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


def iterate_consumer(pipeline: ConsumerPipeline, order, chunk_size: int, counters: Counters, t_start: float,
                     make: Callable):
    """Batches (`make`: `collate.make_batch` with the dataset's settings) of up to `chunk_size` items in `order` (a PoolOrder already fast-forwarded to the resume
    point), releasing finished episodes as it goes; closes the pipeline at the end."""
    pipeline.release(order.finished)  # consumed before the resume point (or empty): never loaded
    order.finished.clear()
    try:
        while order.pos < order.total:
            kk, jj = order.take(chunk_size)
            batch = pipeline.batch(kk, jj, order.admitted, make)
            pipeline.release(order.finished)
            order.finished.clear()
            counters.add(frames_emitted=len(kk), first_item_seconds=time.perf_counter() - t_start)
            yield batch
    finally:
        pipeline.close()
