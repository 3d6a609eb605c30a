"""Background fetching of whole remote files into a private local mirror, with refcounts and a byte budget.

A `Prefetcher` belongs to one consumer (one DataLoader worker of one rank) and one iteration: files land
under `directory/<relative path>` (temp file + atomic rename), are reference-counted by the episodes that
use them (several episodes share one file), and files nobody references are evicted, least recently
released first, whenever the mirror holds more than `max_bytes`. Referenced files are never evicted, so
the budget is a soft cap when the pool's own files exceed it.

Transient errors (anything but "not found") are retried with capped exponential backoff and full jitter;
after `retries` retries the error is permanent and names the URL.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from ..format.errors import DatasetFormatError
from .cache import atomic_write_bytes


class FetchStats:
    """Counters of one process (thread-safe increments)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.bytes_fetched = 0
        self.fetch_seconds = 0.0
        self.files_fetched = 0
        self.retries = 0
        self.evictions = 0

    def add(self, **kw) -> None:
        with self._lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)

    def as_dict(self) -> dict:
        return {"bytes_fetched": self.bytes_fetched, "fetch_seconds": self.fetch_seconds,
                "files_fetched": self.files_fetched, "retries": self.retries, "cache_evictions": self.evictions}


def fetch_bytes(fs, path: str, url: str, retries: int = 8, backoff_s: float = 0.05, max_backoff_s: float = 2.0,
                stats: FetchStats | None = None, rng: random.Random | None = None) -> bytes:
    """The whole file, checked against its size when the filesystem reports one; transient failures are
    retried with capped exponential backoff + full jitter. Raises DatasetFormatError naming `url`."""
    rng = rng or random.Random()
    for attempt in range(retries + 1):
        try:
            size = None
            try:
                size = fs.info(path).get("size")
            except FileNotFoundError:
                raise
            except Exception:
                if attempt < retries:  # the size is a check only; a failed HEAD is retried like a failed GET
                    raise
            data = fs.cat_file(path)
            if size is not None and len(data) != size:
                raise OSError(f"truncated body: {len(data)} of {size} bytes")
            return data
        except FileNotFoundError:
            raise DatasetFormatError(f"{url}: file not found") from None
        except Exception as e:  # transient: 5xx, resets, truncated bodies, timeouts
            if attempt == retries:
                raise DatasetFormatError(f"{url}: cannot fetch after {attempt + 1} attempts "
                                         f"({type(e).__name__}: {e})") from None
            if stats is not None:
                stats.add(retries=1)
            time.sleep(rng.uniform(0, min(max_backoff_s, backoff_s * (2 ** attempt))))
    raise AssertionError("unreachable")


class Prefetcher:
    """Refcounted whole-file prefetch of `root/<rel>` from `fs` into `directory/<rel>`.

    `acquire(rel)` returns a Future of the local path (fetching in a background thread if needed) and
    takes a reference; `release(rel)` drops it. For a local filesystem the files are used in place:
    `acquire` returns a finished future of the original path and nothing is copied or counted.
    """

    def __init__(self, fs, root: str, directory: str | os.PathLike | None, max_bytes: int, local: bool,
                 threads: int = 4, retries: int = 8, backoff_s: float = 0.05, max_backoff_s: float = 2.0,
                 stats: FetchStats | None = None, seed: int | None = None):
        self.fs, self.root, self.local = fs, root.rstrip("/"), local
        self.directory = Path(directory) if directory is not None else None
        self.max_bytes = int(max_bytes)
        self.retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s
        self.stats = stats or FetchStats()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._refs: dict[str, int] = {}
        self._futures: dict[str, Future] = {}
        self._sizes: dict[str, int] = {}  # files on disk -> bytes
        self._idle: OrderedDict[str, None] = OrderedDict()  # unreferenced files on disk, oldest first
        self._pool = None if local else ThreadPoolExecutor(max_workers=threads, thread_name_prefix="episodic-fetch")

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.local else str(self.directory / rel)

    @property
    def bytes_on_disk(self) -> int:
        return sum(self._sizes.values())

    def acquire(self, rel: str) -> Future:
        if self.local:
            f: Future = Future()
            f.set_result(self.path(rel))
            return f
        with self._lock:
            self._refs[rel] = self._refs.get(rel, 0) + 1
            self._idle.pop(rel, None)
            fut = self._futures.get(rel)
            if fut is None or (fut.done() and fut.exception() is not None):
                fut = self._pool.submit(self._fetch, rel)
                self._futures[rel] = fut
            return fut

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

    def _fetch(self, rel: str) -> str:
        local = self.directory / rel
        url = self.fs.unstrip_protocol(f"{self.root}/{rel}")
        t0 = time.perf_counter()
        data = fetch_bytes(self.fs, f"{self.root}/{rel}", url, self.retries, self.backoff_s, self.max_backoff_s,
                           self.stats, self._rng)
        atomic_write_bytes(local, data)
        self.stats.add(bytes_fetched=len(data), fetch_seconds=time.perf_counter() - t0, files_fetched=1)
        with self._lock:
            self._sizes[rel] = len(data)
            if rel not in self._refs:
                self._idle[rel] = None
            self._evict_locked()
        return str(local)

    def _evict_locked(self) -> None:
        total = sum(self._sizes.values())
        while total > self.max_bytes and self._idle:
            rel, _ = self._idle.popitem(last=False)
            total -= self._sizes.pop(rel)
            self._futures.pop(rel, None)
            try:
                os.unlink(self.directory / rel)
            except FileNotFoundError:
                pass
            self.stats.add(evictions=1)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
