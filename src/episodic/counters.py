"""One counters model for fetch, decode, cache and streaming work, summed over a dataset's processes.

A `Counters` is a small table in shared memory: one row (slot) per process, the main process in row 0 and
DataLoader worker w in row 1 + w (`runtime.slot()`), one column per counter. Each process only ever writes
its own row (a lock orders its threads), so no cross-process locking is needed; `snapshot()` adds the rows
up. The memory is an anonymous shared mapping made when the dataset is built: forked DataLoader workers
write into the same table, nothing is published through files and nothing polls. Workers started with
spawn/forkserver get a private table (their counters are not aggregated in the parent).

Kinds: "sum" counters add up (seconds, bytes, frames, hits); "gauge" counters hold a current value per
process (open decoders) and add up across processes; "min" counters keep the smallest value seen (first
item time), NaN until set.

`Tally` is the same per-process table for counts per index of a fixed list (a mixture's items per entry).
"""

from __future__ import annotations

import mmap
import threading
import time

import numpy as np

from . import runtime

__all__ = ["Counters", "FIELDS", "Tally"]

FIELDS: dict[str, str] = {
    # storage/: remote reads
    "bytes_fetched": "sum",
    "fetch_seconds": "sum",
    "files_fetched": "sum",
    "ranges_fetched": "sum",
    "retries": "sum",
    "cache_evictions": "sum",
    # video/: decoder cache and decoding
    "decoder_hits": "sum",
    "decoder_misses": "sum",
    "decoder_evictions": "sum",
    "decoder_open": "gauge",
    "decode_seconds": "sum",
    # datasets/gpu_frames: frames decoded in the main process on the GPU, or on its CPU for a camera allowed to
    # fall back (cpu_fallback)
    "gpu_frames": "sum",
    "gpu_fallback_frames": "sum",
    "gpu_decode_seconds": "sum",
    # datasets/: items built (engine batch + tensor conversion)
    "item_seconds": "sum",
    "items_built": "sum",
    # datasets/streaming: the consumer pipeline
    "tabular_seconds": "sum",
    "wait_seconds": "sum",
    "fast_forward_seconds": "sum",
    "frames_emitted": "sum",
    "episodes_admitted": "sum",
    "first_item_seconds": "min",
}
_COL = {name: i for i, name in enumerate(FIELDS)}
_ACTIVE = len(FIELDS)  # last column: 1 once the process has counted anything


class Counters:
    """Named counters of one dataset, per process, readable as totals over its DataLoader workers."""

    def __init__(self):
        width = len(FIELDS) + 1
        self._buf = mmap.mmap(-1, runtime.MAX_SLOTS * width * 8)  # anonymous + shared: inherited by forks
        self._table = np.frombuffer(self._buf, dtype=np.float64).reshape(runtime.MAX_SLOTS, width)
        for name, kind in FIELDS.items():
            if kind == "min":
                self._table[:, _COL[name]] = np.nan
        self._lock = threading.Lock()
        runtime.after_fork(self)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a thread of the parent may have held it at the fork

    def __reduce__(self):  # spawned workers: a private table (see the module doc)
        return Counters, ()

    def add(self, **deltas: float) -> None:
        """Add to this process's "sum" counters (set "gauge" ones, lower "min" ones)."""
        with self._lock:
            row = self._table[runtime.slot()]
            for name, value in deltas.items():
                kind, col = FIELDS[name], _COL[name]
                if kind == "sum":
                    row[col] += value
                elif kind == "gauge":
                    row[col] = value
                elif not value >= row[col]:  # min: NaN (unset) compares False
                    row[col] = value
            row[_ACTIVE] = 1.0

    def timer(self, name: str) -> _Timer:
        """A context manager that adds the seconds its block takes to counter `name` (also when it raises)."""
        return _Timer(self, name)

    def __getattr__(self, name: str):
        """`counters.bytes_fetched`: this process's value of a counter."""
        if name in FIELDS:
            return self.local()[name]
        raise AttributeError(f"{type(self).__name__} has no counter {name!r} (counters: {list(FIELDS)})")

    def local(self) -> dict:
        """This process's counters."""
        return self._as_dict(self._table[runtime.slot() : runtime.slot() + 1])

    def snapshot(self) -> dict:
        """Totals over every process that counted something ('processes' says how many)."""
        return self._as_dict(self._table)

    def _as_dict(self, rows: np.ndarray) -> dict:
        rows = rows[rows[:, _ACTIVE] > 0]
        out: dict = {}
        for name, kind in FIELDS.items():
            col = rows[:, _COL[name]]
            if kind == "min":
                col = col[~np.isnan(col)]
                out[name] = float(col.min()) if len(col) else None
            else:
                total = float(col.sum())
                out[name] = int(total) if total.is_integer() and not name.endswith("seconds") else total
        out["processes"] = len(rows)
        return out


class _Timer:
    """`Counters.timer`: a plain class rather than a generator context manager (it runs per batch)."""

    __slots__ = ("counters", "name", "t0")

    def __init__(self, counters: Counters, name: str):
        self.counters, self.name = counters, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc) -> None:
        self.counters.add(**{self.name: time.perf_counter() - self.t0})


class Tally:
    """Counts per index 0..size-1 (e.g. items built per mixture entry), one row per process like `Counters`
    (each process writes its own row), summed over the processes by `totals()`."""

    def __init__(self, size: int):
        self.size = int(size)
        self._buf = mmap.mmap(-1, runtime.MAX_SLOTS * max(self.size, 1) * 8)  # anonymous + shared
        self._table = np.frombuffer(self._buf, dtype=np.int64).reshape(runtime.MAX_SLOTS, max(self.size, 1))
        self._lock = threading.Lock()
        runtime.after_fork(self)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()

    def __reduce__(self):  # spawned workers: a private table
        return Tally, (self.size,)

    def add(self, indices) -> None:
        """Count each index of `indices` once (an index may repeat)."""
        counts = np.bincount(np.asarray(indices, dtype=np.int64).reshape(-1), minlength=self.size)[: self.size]
        with self._lock:
            self._table[runtime.slot(), : self.size] += counts

    def totals(self) -> np.ndarray:
        """Counts summed over every process (int64, one per index)."""
        return self._table[:, : self.size].sum(axis=0)
