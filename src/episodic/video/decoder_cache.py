"""The per-process cache of open video readers (`DecoderCache`) and how many readers a process keeps open when the
user gives no number: one per file it reads from at once, within its share of the machine's memory
(`default_cache_size`, `CacheRule`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from .. import runtime
from ..counters import Counters
from .decoder import VideoReader

__all__ = ["CacheRule", "DecoderCache", "decoder_budget_bytes", "default_cache_size"]

# What the open readers of a process may take by default at least (`decoder_budget_bytes`), and the estimate of
# one open reader: its demuxer and frame index (~70 KB measured for an AV1 480x640 file of one episode; more for
# long files), no pictures: it decodes through its thread's `SharedDecoders` (at most 16 per decode thread, each a
# codec context with a few pictures, outside this budget). A process's first 8 readers of each kind of stream
# (`SharedDecoders.own`), and one whose stream's parameters PyAV cannot read, keep a codec context of their own
# (~1.5 MB at 480x640): few, not counted.
DECODER_BUDGET_BYTES = 512 << 20
DECODER_MEMORY_SHARE = 8  # the open readers of every loading process of a machine: up to 1/8 of its memory
_READER_BYTES = 256 << 10
DEFAULT_MIN_OPEN = 32


def decoder_budget_bytes() -> int:
    """The estimated memory of open video readers this process may hold: its share of an eighth of the machine's
    memory, shared by every process loading data on it (`runtime.loading_processes`: this DataLoader's workers,
    times the ranks of the node), at least `DECODER_BUDGET_BYTES` (512 MB)."""
    share = runtime.usable_memory() // DECODER_MEMORY_SHARE // runtime.loading_processes()
    return max(DECODER_BUDGET_BYTES, share)


def default_cache_size(
    files: Sequence[tuple[int, int, int]], budget_bytes: int | None = None, minimum: int = DEFAULT_MIN_OPEN
) -> int:
    """The decoder cache size of a process when the user gives none, one rule for every dataset: one reader per
    video file the process reads from at once (`files`: (height, width, number of files) per camera: a
    map-style dataset's whole selection, a streaming consumer's pooled and prefetched episodes), since
    reopening a file (demuxer, codec, frame index) costs several times the decode of a frame; as many as
    `budget_bytes` (default `decoder_budget_bytes()` of this process) of estimated reader memory allow when that
    is fewer (readers are then reopened as the LRU evicts them); at least `minimum`."""
    if budget_bytes is None:
        budget_bytes = decoder_budget_bytes()
    count = sum(n for _, _, n in files)
    if not count:
        return minimum
    return max(minimum, min(count, budget_bytes // _READER_BYTES))


@dataclass(frozen=True)
class CacheRule:
    """A decoder cache size left to each process: `default_cache_size(files)` with the budget of the process that
    decodes (a DataLoader worker knows how many share the machine only once it runs)."""

    files: tuple[tuple[int, int, int], ...]
    minimum: int = DEFAULT_MIN_OPEN

    def size(self) -> int:
        return default_cache_size(self.files, None, self.minimum)


class DecoderCache:
    """A bounded LRU of open VideoReaders for this process: `max_open` readers, or a `CacheRule` each process
    sizes itself by when it first decodes. After a fork, a child starts empty: it never touches a container its
    parent opened (not even to close it). Hits, misses, evictions and the number of open readers go to
    `counters` (the dataset's, or a private one)."""

    def __init__(self, max_open: int | CacheRule = 32, thread_count: int = 1, counters: Counters | None = None):
        if not isinstance(max_open, CacheRule) and (
            isinstance(max_open, bool) or not isinstance(max_open, int) or max_open < 1
        ):
            raise ValueError(f"decoder_cache_size must be an int >= 1, got {max_open!r}")
        self.rule: CacheRule | None = max_open if isinstance(max_open, CacheRule) else None
        self._max_open: int | None = None if isinstance(max_open, CacheRule) else max_open
        self.thread_count = thread_count
        self.counters = counters if counters is not None else Counters()
        self._readers: OrderedDict[str, VideoReader] = OrderedDict()  # least recently used first
        runtime.after_fork(self)

    @property
    def max_open(self) -> int:
        """Readers kept open in this process (a rule's size is taken when first asked, in each process)."""
        if self._max_open is None:
            assert self.rule is not None
            self._max_open = self.rule.size()
        return self._max_open

    def _after_fork(self) -> None:  # set the parent's readers aside without touching them
        # freeing FFmpeg objects whose threads live only in the parent hangs (pthread_cond_destroy in swscale/dav1d)
        runtime.keep_inherited(self._readers)
        self._readers = OrderedDict()
        if self.rule is not None:
            self._max_open = None  # sized again in this process

    def __getstate__(self) -> dict:  # a spawned process (DataLoader worker) starts empty too, a rule unsized
        return {**self.__dict__, "_readers": OrderedDict(), **({"_max_open": None} if self.rule is not None else {})}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        runtime.after_fork(self)

    def get(self, path: str) -> VideoReader:
        return self.get_many((path,))[0]

    def get_many(self, paths: Sequence[str]) -> list[VideoReader]:
        """The readers of `paths`, in order (opened where not open), counted once: a mixture's batch takes one
        reader for each of ~64 files, and counting each costs about what taking it does."""
        readers: list[VideoReader] = []
        hits = misses = evicted = 0
        try:
            for path in paths:
                reader = self._readers.pop(path, None)
                if reader is not None:
                    hits += 1
                else:
                    reader = VideoReader(path, thread_count=self.thread_count)
                    misses += 1
                    while len(self._readers) >= self.max_open:
                        self._readers.pop(next(iter(self._readers))).close()
                        evicted += 1
                self._readers[path] = reader  # most recent last
                readers.append(reader)
        finally:
            if misses:
                self.counters.add(
                    decoder_hits=hits, decoder_misses=misses, decoder_evictions=evicted, decoder_open=len(self._readers)
                )
            elif hits:
                self.counters.add(decoder_hits=hits)
        return readers

    def __contains__(self, path: object) -> bool:
        """Whether this process holds an open reader of `path` (a lookup: not counted, the order kept)."""
        return path in self._readers

    def demote(self, path: str) -> None:
        """Make this process's reader of `path`, if open, the first to be closed when a file is opened with the
        cache full (a streaming consumer's file that no pooled episode reads any more): the least recently used
        reader may still be in use (a pooled episode not drawn from lately), this one is not."""
        if path in self._readers:
            self._readers.move_to_end(path, last=False)

    def discard(self, path: str) -> bool:
        """Close and drop this process's reader of `path`, if open (the next `get` reopens the file): for a
        file whose bytes changed since the reader opened it (FFmpeg may have buffered the old bytes).
        Readers inherited from a parent process are never touched. True when a reader was dropped."""
        reader = self._readers.pop(path, None)
        if reader is None:
            return False
        reader.close()
        self.counters.add(decoder_open=len(self._readers))
        return True

    def stats(self) -> dict:
        """This process's hits, misses, evictions, hit rate and open readers."""
        c = self.counters.local()
        hits, misses = c["decoder_hits"], c["decoder_misses"]
        return {
            "hits": hits,
            "misses": misses,
            "evictions": c["decoder_evictions"],
            "hit_rate": (hits / (hits + misses)) if hits + misses else 0.0,
            "open": len(self._readers),
        }

    def clear(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers.clear()
        self.counters.add(decoder_open=0)
