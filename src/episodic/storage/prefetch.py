"""Background fetching of remote dataset files into a private local mirror: byte ranges of mp4s (only what
the consumer's episodes need) or whole files, with refcounts and a byte budget.

A `Prefetcher` belongs to one consumer (one DataLoader worker of one rank) and one iteration. Files land
under `directory/<relative path>`:

- `acquire_span(rel, from_s, to_s)` (videos): the first time a remote mp4 is needed, FFmpeg opens it once
  through range reads (`RangeFile`) to learn its sample index (`probe_mp4`); the bytes it read (the header)
  are kept. For each episode only the samples of its time span (one contiguous range, from the key frame
  before it) are fetched and written, with the header, at their own offsets into a sparse local file of the
  full size (`SparseFile`); ranges already present are not fetched again. Files that do not allow ranges
  (not mp4/mov, no sample index, an index that misses frames) are fetched whole instead.
- `acquire(rel)`: the whole file (temp file + atomic rename).
- `open_remote(path)`: a seekable read-only remote file whose reads are retried range requests (parquet
  readers read the footer and the row groups they need through it; nothing lands in the mirror).

Files are reference-counted by the episodes that use them (several episodes share one file); files nobody
references are evicted, least recently released first, whenever the mirror holds more than `max_bytes`
(bytes actually written, not a sparse file's apparent size) or more than `max_idle_files` of them (with
the file goes its sample layout, kept in memory). Referenced files and files being written are
never evicted, so the budget is a soft cap when the pool's own files exceed it. `generation(rel)` changes
whenever bytes are written to (or removed with) a mirror file: a decoder opened on a sparse file before
then may have buffered zeros from a hole that is now filled, and must be reopened.

Every remote read goes through the one fetch policy (`storage.fetch`: transient failures retried with
capped exponential backoff and full jitter, "not found" at once, FetchError naming the URL when retries
run out); a range whose body is shorter than asked for is retried, a longer one means the server ignores
Range headers (`RangesIgnored`): from then on whole files are fetched.
"""

from __future__ import annotations

import io
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pyarrow as pa

from ..counters import Counters
from ..format.paths import dataset_path, inside
from .atomic import atomic_write_bytes
from .fetch import FetchPolicy, RangesIgnored, fetch_bytes, file_size
from .ranges import (
    Mp4Layout,
    RangeFile,
    SparseFile,
    add_range,
    missing_ranges,
    open_ranged,
    probe_mp4,
    read_tail,
)

__all__ = ["Prefetcher", "RangesIgnored"]  # RangesIgnored: from storage.fetch

T = TypeVar("T")

RANGE_CHUNK = 8 << 20  # a long range is fetched in requests of at most this many bytes


class Prefetcher:
    """Refcounted prefetch of `root/<rel>` from `fs` into `directory/<rel>`: byte ranges of mp4s
    (`acquire_span`) or whole files (`acquire`).

    `acquire*` returns a Future of the local path (fetching in a background thread if needed) and takes a
    reference; `release(rel)` drops it. The future is done once every byte the caller asked for is written.
    For a local filesystem the files are used in place: `acquire*` return a finished future of the original
    path and nothing is copied or counted. Remote reads follow `policy` (default: a FetchPolicy of
    `retries`, `backoff_s` and `max_backoff_s`).
    """

    def __init__(
        self,
        fs,
        root: str,
        directory: str | os.PathLike | None,
        max_bytes: int,
        local: bool,
        threads: int = 4,
        retries: int | None = None,
        backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        stats: Counters | None = None,
        seed: int | None = None,
        ranges: bool = True,
        max_idle_files: int = 32,
        policy: FetchPolicy | None = None,
    ):
        self.fs, self.root, self.local = fs, root.rstrip("/"), local
        self.directory = Path(directory) if directory is not None else None
        self.max_bytes = int(max_bytes)
        self.max_idle_files = int(max_idle_files)
        self.max_tails = 16
        self._tails: OrderedDict[str, tuple[int, int, bytes]] = OrderedDict()  # path -> (size, start, bytes)
        self.policy = policy or FetchPolicy(retries=retries, backoff_s=backoff_s, max_backoff_s=max_backoff_s)
        self.ranges = ranges
        self.stats = stats if stats is not None else Counters()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._refs: dict[str, int] = {}
        self._futures: dict[str, Future] = {}  # whole files
        self._layouts: dict[str, Future] = {}  # mp4 probes: Mp4Layout, or None (no ranges: whole file)
        self._sparse: dict[str, SparseFile] = {}
        self._inflight: dict[str, list[tuple[int, int, Future]]] = {}  # ranges being fetched, per file
        self._gen: dict[str, int] = {}
        self._sizes: dict[str, int] = {}  # files on disk -> bytes written
        self._idle: OrderedDict[str, None] = OrderedDict()  # unreferenced files on disk, oldest first
        self._pool = None if local else ThreadPoolExecutor(max_workers=threads, thread_name_prefix="episodic-fetch")

    def path(self, rel: str) -> str | Path:
        return self.remote_path(rel) if self.local else self.mirror_path(rel)

    def remote_path(self, rel: str) -> str:
        """`root/rel` on the dataset's filesystem, checked to stay inside the root (format.paths)."""
        return dataset_path(self.fs, self.root, rel)

    def mirror_path(self, rel: str) -> Path:
        """`rel`'s file in the mirror, checked to stay inside the mirror directory (format.paths.inside): the
        one path every write, sparse write and unlink of a mirror file uses."""
        assert self.directory is not None, "a remote source's prefetcher has a mirror directory"
        return Path(inside(self.directory, rel, f"mirror file of {self.url(rel)}"))

    def url(self, rel: str) -> str:
        return self.fs.unstrip_protocol(self.remote_path(rel))

    @property
    def bytes_on_disk(self) -> int:
        return sum(self._sizes.values())

    def generation(self, rel: str) -> int:
        """Changes whenever bytes are written to (or removed with) the mirror file of `rel`."""
        with self._lock:
            return self._gen.get(rel, 0)

    # ------------------------------------------------------------------ references
    def acquire(self, rel: str) -> Future:
        """The whole file."""
        return self._acquire(rel, self._whole, rel)

    def acquire_span(self, rel: str, from_s: float, to_s: float) -> Future:
        """The bytes of the video samples of `rel` between `from_s` and `to_s` (seconds in the file), in a
        sparse mirror file (the whole file when it does not allow ranges)."""
        return self._acquire(rel, self._span, rel, from_s, to_s)

    def _acquire(self, rel: str, fn, *args) -> Future:
        if self.local:
            f: Future = Future()
            f.set_result(self.path(rel))
            return f
        with self._lock:
            self._refs[rel] = self._refs.get(rel, 0) + 1
            self._idle.pop(rel, None)
        assert self._pool is not None, "a remote source's prefetcher has a thread pool"
        return self._pool.submit(fn, *args)

    def release(self, rel: str) -> None:
        if self.local:
            return
        with self._lock:
            n = self._refs.get(rel, 0) - 1
            if n > 0:
                self._refs[rel] = n
                return
            self._refs.pop(rel, None)
            if rel in self._sizes:
                self._idle[rel] = None
            self._evict_locked()

    # ------------------------------------------------------------------ remote reads
    def _fetch_range(self, path: str, url: str, start: int, end: int) -> bytes:
        t0 = time.perf_counter()
        data = fetch_bytes(self.fs, path, url, self.policy, self.stats, start=start, end=end, rng=self._rng)
        self.stats.add(bytes_fetched=len(data), fetch_seconds=time.perf_counter() - t0, ranges_fetched=1)
        return data

    def _size(self, path: str, url: str) -> int | None:
        return file_size(self.fs, path, url, self.policy, self.stats, rng=self._rng)

    def open_remote(self, path: str, min_read: int = 0) -> io.RawIOBase | pa.BufferReader:
        """A seekable read-only file of `path` (on this prefetcher's filesystem) whose reads are retried range
        requests (counted in the stats); the whole file at once when its size is unknown. The file's tail
        (for a parquet file its whole footer) is fetched at once and kept for the next `open_remote` of the
        same path (the last `max_tails` paths): a reader opening it again makes no request for it."""
        url = self.fs.unstrip_protocol(path)
        with self._lock:
            tail = self._tails.get(path)
            if tail is not None:
                self._tails.move_to_end(path)
        if tail is None:
            size = self._size(path, url)
            if size is None:
                data = fetch_bytes(self.fs, path, url, self.policy, self.stats, rng=self._rng)
                self.stats.add(bytes_fetched=len(data))
                return pa.BufferReader(data)  # pyarrow reads it natively, on any thread
            # a server that ignores Range headers shows here (RangesIgnored), not in the middle of a read
            tail = (size, *read_tail(lambda s, e: self._fetch_range(path, url, s, e), size))
            with self._lock:
                self._tails[path] = tail
                while len(self._tails) > self.max_tails:
                    self._tails.popitem(last=False)
        size, start, data = tail
        return open_ranged(lambda s, e: self._fetch_range(path, url, s, e), size, (start, data), min_read=min_read)

    # ------------------------------------------------------------------ whole files
    def _run_once(self, table: dict[str, Future], rel: str, fn: Callable[[], T]) -> T:
        """`fn()` once per `rel` (while its result stands in `table`): the first caller runs it in its own
        thread, concurrent callers wait for that (never for a queued task, so the pool cannot deadlock)."""
        with self._lock:
            fut = table.get(rel)
            owner = fut is None or (fut.done() and fut.exception() is not None)
            if fut is None or owner:
                fut = table[rel] = Future()
        if owner:
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001 -- handed to the waiters
                fut.set_exception(e)
        return fut.result()

    def _whole(self, rel: str) -> str:
        return self._run_once(self._futures, rel, lambda: self._fetch_whole(rel))

    def _fetch_whole(self, rel: str) -> str:
        local = self.mirror_path(rel)
        t0 = time.perf_counter()
        data = fetch_bytes(self.fs, self.remote_path(rel), self.url(rel), self.policy, self.stats, rng=self._rng)
        atomic_write_bytes(local, data)
        self.stats.add(bytes_fetched=len(data), fetch_seconds=time.perf_counter() - t0, files_fetched=1)
        with self._lock:
            self._sizes[rel] = len(data)
            self._gen[rel] = self._gen.get(rel, 0) + 1
            if rel not in self._refs:
                self._idle[rel] = None
            self._evict_locked()
        return str(local)

    # ------------------------------------------------------------------ ranges
    def _layout(self, rel: str) -> Mp4Layout | None:
        """The file's sample layout, probed once (None: the file does not allow ranges)."""

        def probe() -> Mp4Layout | None:
            if not self.ranges or not rel.lower().endswith((".mp4", ".mov", ".m4v")):
                return None
            path, url = self.remote_path(rel), self.url(rel)
            size = self._size(path, url)
            if size is None:
                return None
            self.stats.add(files_fetched=1)
            try:
                # an mp4 header is often a few hundred kB: start with 64 kB reads (then doubling)
                return probe_mp4(RangeFile(lambda s, e: self._fetch_range(path, url, s, e), size, min_read=64 << 10))
            except RangesIgnored:
                self.ranges = False
                return None

        return self._run_once(self._layouts, rel, probe)

    def _sparse_file_locked(self, rel: str, layout: Mp4Layout) -> SparseFile:
        """The sparse mirror file of `rel`, created (with the header bytes in place) when absent."""
        sf = self._sparse.get(rel)
        if sf is None:
            sf = self._sparse[rel] = SparseFile(self.mirror_path(rel), layout.size)
            for offset, data in layout.header:
                sf.write(offset, data)
            self._sizes[rel] = sf.written
            self._gen[rel] = self._gen.get(rel, 0) + 1
        return sf

    def _span(self, rel: str, from_s: float, to_s: float) -> str:
        try:
            return self._span_ranges(rel, from_s, to_s)
        except RangesIgnored:  # the server sends whole files: so do we, from now on
            self.ranges = False
            with self._lock:
                sf = self._sparse.pop(rel, None)
            if sf is not None:
                sf.close()  # the whole file is renamed over it
            return self._whole(rel)

    def _span_ranges(self, rel: str, from_s: float, to_s: float) -> str:
        layout = self._layout(rel) if self.ranges else None
        if layout is None:
            return self._whole(rel)
        start, end = layout.span(from_s, to_s)
        path, url = self.remote_path(rel), self.url(rel)
        # claim the missing parts of [start, end) (not present, not being fetched by another thread)
        with self._lock:  # the caller holds a reference: the file is not evicted while we work
            sf = self._sparse_file_locked(rel, layout)
            inflight = self._inflight.setdefault(rel, [])
            taken = sf.ranges
            for s, e, _ in inflight:
                taken = add_range(taken, s, e)
            mine = missing_ranges(taken, start, end)
            waits = [f for s, e, f in inflight if s < end and e > start]
            fut: Future = Future()
            claims = [(s, e, fut) for s, e in mine]
            inflight.extend(claims)
        error = None
        try:
            for s, e in mine:
                for cs in range(s, e, RANGE_CHUNK):
                    sf.write(cs, self._fetch_range(path, url, cs, min(e, cs + RANGE_CHUNK)))
        except BaseException as exc:  # noqa: BLE001 -- handed to the waiters, then raised
            error = exc
        with self._lock:  # the generation moves before anyone is told the bytes are there
            for c in claims:
                inflight.remove(c)
            if mine:
                self._sizes[rel] = sf.written
                self._gen[rel] = self._gen.get(rel, 0) + 1
            self._evict_locked()
        if error is not None:
            fut.set_exception(error)
            raise error
        fut.set_result(None)
        for f in waits:
            f.result()
        return sf.path

    # ------------------------------------------------------------------ budget
    def _evict_locked(self) -> None:
        """Drop unreferenced files, oldest first, while the mirror holds more than `max_bytes` or more than
        `max_idle_files` of them (each keeps its sample layout in memory)."""
        total = sum(self._sizes.values())
        idle = len(self._idle)
        for rel in list(self._idle):
            if total <= self.max_bytes and idle <= self.max_idle_files:
                break
            if self._inflight.get(rel):
                continue
            del self._idle[rel]
            idle -= 1
            total -= self._sizes.pop(rel)
            self._futures.pop(rel, None)
            self._layouts.pop(rel, None)
            sf = self._sparse.pop(rel, None)
            if sf is not None:
                sf.close(unlink=True)
            else:
                try:
                    os.unlink(self.mirror_path(rel))
                except FileNotFoundError:
                    pass
            self._gen[rel] = self._gen.get(rel, 0) + 1
            self.stats.add(cache_evictions=1)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for sf in self._sparse.values():
                sf.close()
            self._sparse.clear()
