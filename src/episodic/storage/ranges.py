"""Byte ranges of remote files: a read-only remote file over a range-fetch function (`RangeFile`, opened
with `open_for_read`), where a parquet file's footer and row groups lie, the sample layout of an mp4
(which bytes an episode's frames need), and sparse local files that hold only fetched ranges.

A consumer of a remote dataset fetches the mp4 header once (whatever FFmpeg reads to open the file, recorded
by `RangeFile`), then per episode only the samples of its time span (`Mp4Layout.span`), and writes them at
their own offsets into a `SparseFile` of the full size: FFmpeg opens that file as if it were the whole mp4
and only ever reads the present ranges for the episodes it was fetched for.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from ..format.timebase import SPAN_FRAMES_AFTER, SPAN_FRAMES_BEFORE, frames_to_seconds, span_window
from .fetch import FetchPolicy, RangesIgnored, fetch_bytes, file_size, is_local

Range = tuple[int, int]  # [start, end)


# ---------------------------------------------------------------------------------------------- range sets
def add_range(ranges: list[Range], start: int, end: int) -> list[Range]:
    """`ranges` (sorted, disjoint, not touching) with [start, end) added, merged."""
    if end <= start:
        return list(ranges)
    out: list[Range] = []
    for s, e in ranges:
        if e < start or s > end:
            out.append((s, e))
        else:
            start, end = min(s, start), max(e, end)
    out.append((start, end))
    return sorted(out)


def missing_ranges(ranges: list[Range], start: int, end: int) -> list[Range]:
    """The parts of [start, end) not covered by `ranges` (sorted, disjoint)."""
    out: list[Range] = []
    pos = start
    for s, e in ranges:
        if e <= pos:
            continue
        if s >= end:
            break
        if s > pos:
            out.append((pos, s))
        pos = max(pos, e)
        if pos >= end:
            break
    if pos < end:
        out.append((pos, end))
    return out


def covered(ranges: list[Range]) -> int:
    return sum(e - s for s, e in ranges)


# ---------------------------------------------------------------------------------------------- remote file
class RangeFile(io.RawIOBase):
    """A read-only, seekable file of `size` bytes whose bytes come from `fetch(start, end)` (a retried range
    read of the remote file). Fetched pieces are kept (and listed in `pieces`, by offset) so nothing is
    fetched twice; a read that continues where the last fetch ended fetches twice as much as that one (up
    to `max_read`), so sequential reads of a large header take few requests."""

    def __init__(self, fetch: Callable[[int, int], bytes], size: int, min_read: int = 8192, max_read: int = 4 << 20):
        super().__init__()
        self._fetch, self.size = fetch, int(size)
        self.min_read, self.max_read = int(min_read), int(max_read)
        self.pieces: dict[int, bytes] = {}
        self._ranges: list[Range] = []
        self._pos = 0
        self._last: Range = (-1, -1)
        self._lock = threading.Lock()  # pyarrow may read from its IO threads

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self.size}[whence]
        self._pos = max(0, base + int(offset))
        return self._pos

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def read(self, n: int = -1) -> bytes:
        with self._lock:
            start = self._pos
            end = self.size if n is None or n < 0 else min(self.size, start + int(n))
            if end <= start:
                return b""
            self._ensure(start, end)
            self._pos = end
            return self._slice(start, end)

    def _ensure(self, start: int, end: int) -> None:
        want = self.min_read
        if start == self._last[1]:  # sequential: read ahead more each time
            want = min(self.max_read, 2 * (self._last[1] - self._last[0]))
        for s, e in missing_ranges(self._ranges, start, end):
            e = min(self.size, max(e, s + want))
            e = min(e, next((ps for ps, _ in self._ranges if ps > s), e))  # do not fetch what is present
            self._put_locked(s, self._fetch(s, e))
            self._last = (s, e)

    def _put_locked(self, start: int, data: bytes) -> None:
        self.pieces[start] = data
        self._ranges = add_range(self._ranges, start, start + len(data))

    def add_piece(self, start: int, data: bytes) -> None:
        """Bytes of the file at `start` known already (fetched earlier)."""
        with self._lock:
            self._put_locked(start, data)

    def prefetch(self, spans: list[Range], threads: int = 16, merge_gap: int = 32 << 10) -> None:
        """Fetch the parts of `spans` not present yet, concurrently (a reader about to read several
        far-apart pieces, like a parquet reader its row groups, then waits for one round trip, not one per
        piece). Spans closer than `merge_gap` bytes are fetched as one."""
        merged: list[Range] = []
        for s, e in sorted(spans):
            if merged and s - merged[-1][1] <= merge_gap:
                merged[-1] = (merged[-1][0], max(merged[-1][1], e))
            else:
                merged.append((s, e))
        with self._lock:
            todo = [r for s, e in merged for r in missing_ranges(self._ranges, max(0, s), min(self.size, e))]
        if not todo:
            return
        with ThreadPoolExecutor(max_workers=min(threads, len(todo)), thread_name_prefix="episodic-ranges") as ex:
            datas = list(ex.map(lambda r: self._fetch(*r), todo))
        with self._lock:
            for (s, _), data in zip(todo, datas):
                self._put_locked(s, data)

    def _slice(self, start: int, end: int) -> bytes:
        out = bytearray()
        pos = start
        for s in sorted(self.pieces):
            data = self.pieces[s]
            e = s + len(data)
            if e <= pos or s >= end:
                continue
            out += data[pos - s : min(e, end) - s]
            pos = min(e, end)
            if pos >= end:
                break
        assert pos == end, (start, end, pos)
        return bytes(out)


def open_ranged(
    fetch: Callable[[int, int], bytes], size: int, tail: tuple[int, bytes] | None = None, min_read: int = 0
) -> RangeFile:
    """A RangeFile of `size` bytes over `fetch(start, end)` with the file's tail in place: `tail`
    ((start, bytes), from `read_tail`, e.g. kept from an earlier open) or fetched now."""
    start, data = tail if tail is not None else read_tail(fetch, size)
    rf = RangeFile(fetch, size, min_read=min_read)
    rf.add_piece(start, data)
    return rf


def open_for_read(
    fs, path: str, policy: FetchPolicy | None = None, counters: Any = None, min_read: int = 0
) -> BinaryIO | RangeFile:
    """A seekable read-only binary file of `path` on `fs`. A local file is opened directly. A remote file
    is a `RangeFile` whose reads are range requests retried under `policy` (its tail, for a parquet file
    the whole footer, fetched at once); the whole file (retried) when its size is unknown or the server
    ignores Range headers."""
    if is_local(fs):
        return fs.open(path, "rb")
    url = fs.unstrip_protocol(path)
    size = file_size(fs, path, url, policy, counters)
    if size is not None:

        def fetch(s: int, e: int) -> bytes:
            return fetch_bytes(fs, path, url, policy, counters, start=s, end=e)

        try:
            return open_ranged(fetch, size, min_read=min_read)
        except RangesIgnored:
            pass
    return pa.BufferReader(fetch_bytes(fs, path, url, policy, counters))  # read natively by pyarrow


# ---------------------------------------------------------------------------------------------- parquet
TAIL_BYTES = 64 << 10  # the first read of a remote file's end: most parquet footers fit in it
PARQUET_MAGIC = b"PAR1"


def parquet_footer_length(tail: bytes) -> int | None:
    """Bytes of a parquet file's footer (its metadata, then a 4-byte little-endian length and the magic
    "PAR1"), read from the file's last bytes; None when they do not end a parquet file."""
    if len(tail) < 8 or tail[-4:] != PARQUET_MAGIC:
        return None
    return int.from_bytes(tail[-8:-4], "little") + 8


def read_tail(fetch: Callable[[int, int], bytes], size: int, first: int = TAIL_BYTES) -> tuple[int, bytes]:
    """(start, bytes) of the end of a file of `size` bytes through `fetch(start, end)`: its last `first`
    bytes, extended back (one more request) to the whole footer of a parquet file whose footer is longer.
    A server that ignores Range headers shows here (RangesIgnored), not in the middle of a read."""
    start = max(0, size - first)
    data = fetch(start, size)
    need = parquet_footer_length(data)
    if need is not None and len(data) < need <= size:
        data = fetch(size - need, start) + data
        start = size - need
    return start, data


def _leaves(t) -> int:
    """Parquet leaf columns of an Arrow type (nested types are stored as one column per leaf)."""
    import pyarrow as pa

    if pa.types.is_struct(t):
        return sum(_leaves(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaves(t.key_type) + _leaves(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaves(t.value_type)
    return 1


def leaf_columns(schema, names: list[str]) -> list[int]:
    """Indices of the parquet leaf columns (column chunks) that hold the top-level fields `names` of a
    file whose Arrow schema is `schema` (`ParquetFile(...).schema_arrow`)."""
    wanted, pos = set(names), 0
    out: list[int] = []
    for f in schema:
        n = _leaves(f.type)
        if f.name in wanted:
            out.extend(range(pos, pos + n))
        pos += n
    return out


def row_group_spans(metadata, groups, leaves: list[int] | None = None) -> list[Range]:
    """Byte spans [start, end) to read for row groups `groups` of a parquet file, from its metadata
    (`pyarrow.parquet.FileMetaData`, e.g. `ParquetFile(...).metadata`): one span per row group holding all
    its column chunks, or with `leaves` (`leaf_columns`) one span per column chunk of those columns."""
    spans: list[Range] = []
    for g in groups:
        rg = metadata.row_group(g)
        lo: int | None = None
        hi: int | None = None
        for j in range(rg.num_columns) if leaves is None else leaves:
            c = rg.column(j)
            start = c.data_page_offset
            if c.has_dictionary_page and c.dictionary_page_offset:
                start = min(start, c.dictionary_page_offset)
            end = start + c.total_compressed_size
            if leaves is not None:
                spans.append((int(start), int(end)))
                continue
            lo = start if lo is None else min(lo, start)
            hi = end if hi is None else max(hi, end)
        if lo is not None and hi is not None:
            spans.append((int(lo), int(hi)))
    return spans


# ---------------------------------------------------------------------------------------------- mp4 layout
@dataclass
class Mp4Layout:
    """What a consumer keeps of one remote mp4: the bytes FFmpeg read to open it, its size, and the video
    samples' byte positions, sizes, times (seconds) and key flags (from the container's sample index)."""

    size: int
    header: list[tuple[int, bytes]]
    pos: np.ndarray
    nbytes: np.ndarray
    times: np.ndarray
    key: np.ndarray
    frame_s: float

    def span(
        self, from_s: float, to_s: float, before: int = SPAN_FRAMES_BEFORE, after: int = SPAN_FRAMES_AFTER
    ) -> Range:
        """[start, end) of the samples with times in [from_s - before frames, to_s + after frames]
        (`timebase.span_window`), extended back to the key frame at or before the first of them."""
        lo, hi = span_window(from_s, to_s, self.frame_s, before, after)
        sel = np.flatnonzero((self.times >= lo) & (self.times <= hi))
        if not len(sel):
            return (0, 0)
        first = int(sel[0])
        keys = np.flatnonzero(self.key[: first + 1])
        first = int(keys[-1]) if len(keys) else 0
        idx = np.arange(first, int(sel[-1]) + 1)
        return int(self.pos[idx].min()), int((self.pos[idx] + self.nbytes[idx]).max())


def mp4_ranges_supported() -> bool:
    """Whether this PyAV exposes a stream's sample index (`index_entries`, PyAV >= 16), which byte-range
    streaming of mp4 files needs. Without it `probe_mp4` gives None and streaming fetches whole files
    (same items, more bytes)."""
    import av.video.stream

    return hasattr(av.video.stream.VideoStream, "index_entries")


def probe_mp4(rf: RangeFile) -> Mp4Layout | None:
    """Open `rf` with FFmpeg and read its video sample index; None when the file does not allow ranges
    (not mp4/mov, no video stream, no index or an index that does not list every frame, or a PyAV without
    `index_entries`: see `mp4_ranges_supported`)."""
    import av

    try:
        with av.open(rf, mode="r", buffer_size=8192) as c:
            if "mp4" not in c.format.name and "mov" not in c.format.name or not c.streams.video:
                return None
            s = c.streams.video[0]
            entries = getattr(s, "index_entries", None)
            if not entries or len(entries) != s.frames or s.time_base is None:
                return None
            tb = float(s.time_base)
            pos = np.fromiter((e.pos for e in entries), np.int64, len(entries))
            nbytes = np.fromiter((e.size for e in entries), np.int64, len(entries))
            times = np.fromiter((e.timestamp for e in entries), np.float64, len(entries)) * tb
            key = np.fromiter((e.is_keyframe for e in entries), bool, len(entries))
            rate = float(s.average_rate) if s.average_rate else 0.0
    except av.FFmpegError:
        return None
    if (pos < 0).any() or ((pos + nbytes) > rf.size).any():
        return None
    key[0] = True
    frame_s = (
        frames_to_seconds(1, rate) if rate > 0 else float(np.median(np.diff(np.sort(times)))) if len(times) > 1 else 0.0
    )
    return Mp4Layout(
        size=rf.size, header=sorted(rf.pieces.items()), pos=pos, nbytes=nbytes, times=times, key=key, frame_s=frame_s
    )


# ---------------------------------------------------------------------------------------------- sparse file
class SparseFile:
    """A local file of the remote file's full size: holes except where ranges were written (`ranges`).
    `written` counts the bytes written (what the file holds on disk, not its apparent size)."""

    def __init__(self, path: str | os.PathLike, size: int):
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self._fd, int(size))
        self.size = int(size)
        self.ranges: list[Range] = []
        self._lock = threading.Lock()

    @property
    def written(self) -> int:
        return covered(self.ranges)

    def missing(self, start: int, end: int) -> list[Range]:
        with self._lock:
            return missing_ranges(self.ranges, start, end)

    def write(self, offset: int, data: bytes) -> int:
        """Write `data` at `offset` (all of it); returns the bytes newly covered."""
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.pwrite(self._fd, view[done:], offset + done)
        with self._lock:
            before = covered(self.ranges)
            self.ranges = add_range(self.ranges, offset, offset + len(data))
            return covered(self.ranges) - before

    def close(self, unlink: bool = False) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if unlink:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
