"""One entry's episodes of a streaming consumer, read ahead of its pool (`EntryReader`; the consumer that decides
how far each of its entries' readers reads is `consumer.Consumer`).

Rows are read in blocks of `tabular_block` episodes: on one thread, or on the consumer's own for a small local
block (`SYNC_READ_ROWS`); remote parquet files in place through retried range requests, or fetched whole when the
server ignores Range. For a remote entry, each episode's byte span of each mp4 is fetched into a sparse file of a
private mirror (`storage.prefetch.Prefetcher`) ahead of the pool; a decoder that may have seen a hole now filled
is reopened. A local episode read on the consumer's thread has its video files opened by `open_videos`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import NamedTuple

import numpy as np
from fsspec.implementations.local import LocalFileSystem

from ..counters import Counters
from ..format.errors import DatasetFormatError, FrameTimestampError, VideoDecodeError
from ..format.metadata import DatasetMetadata
from ..storage.prefetch import Prefetcher, RangesIgnored
from ..storage.source import Source
from ..tabular import Columns, load_columns
from ..video import DecoderCache
from .item_spec import ItemSpec
from .stream_options import StreamOptions

__all__ = ["SYNC_READ_ROWS", "EntryReader", "StreamEntry", "episode_files"]

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
        self.sync_blocks: set[int] = set()  # blocks read on the consumer's thread
        self.to_open: list[int] = []  # local episodes in reach read on the consumer's thread, files not open yet
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
                    self.sync_blocks.add(b)
                else:
                    self.blocks[b] = self.tab_pool.submit(self._load_block, wanted)
            if b in self.sync_blocks:  # its files opened by `open_videos`, after the burst's rows: only the
                # episodes in reach, not the rest of the block (the decoder cache holds the pool's and the
                # read-ahead's files: a whole block's would evict files still in use, opened again when drawn)
                self.to_open.append(int(self.eps[k]))
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
        paths = dict.fromkeys(p for e in episodes for p in episode_files(self.meta, self.source, self.spec, int(e)))
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
                self.sync_blocks.discard(b)

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


def _run_now(fn: Callable, *args) -> Future:
    """`fn(*args)` run here, as a finished future (its error raised where its result is asked for, as a
    thread's would be)."""
    fut: Future = Future()
    try:
        fut.set_result(fn(*args))
    except Exception as e:  # noqa: BLE001 -- handed to whoever asks for the rows
        fut.set_exception(e)
    return fut


def episode_files(meta: DatasetMetadata, source: Source, spec: ItemSpec, ep: int) -> list[str]:
    """The local paths of episode `ep`'s video files, one per camera of `spec`."""
    return [source.local_path(meta.video_file_of(ep, key)) for key in spec.video_keys]
