"""Frame-accurate video decoding with PyAV: a per-file frame index, then one forward pass per request.

A `VideoReader` demuxes its file once (packets only, no decode) to learn every frame's time and the key
frames; a request for frames at some times maps each time to the nearest frame, checks the tolerance,
clamps at the file end, and decodes forward from the nearest key frame, seeking only when that is shorter
than decoding on from where the decoder already is.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from .. import runtime
from ..counters import Counters
from ..format.errors import FrameTimestampError, VideoDecodeError
from ..format.timebase import end_clamp_s
from . import codec_contexts
from .codec_contexts import SharedDecoder
from .output import FrameOutput, write_frame

_FEW_TIMES = 8  # up to this many times, `FrameIndex.nearest` bisects in Python
# FFmpeg's demuxer runs no parser over the packets (`fflags=+noparse`): an mp4 holds every sample's size, times and
# key flag, which is all a reader uses, and the decoder parses what it decodes. With a parser (AV1 in mp4 has one),
# every seek closes it and the next packet builds it again: at 96x128 a tenth of the CPU of a random-access read,
# more with hundreds of files open (measured in benchmarks/bench_mixture.py's setting).
_OPEN_OPTIONS = {"fflags": "+noparse"}


def _open(path: str) -> av.container.InputContainer:
    """`path` opened for reading: a ``.mp4`` (every LeRobot dataset's videos) as mp4 without probing every format
    FFmpeg knows (~90 instead of ~145 us per file: a streaming mixture opens files all the time); anything else,
    or a ``.mp4`` that is not one, as what FFmpeg's probe finds."""
    if path.lower().endswith(".mp4"):
        try:
            return av.open(path, mode="r", format="mp4", options=_OPEN_OPTIONS)
        except av.InvalidDataError:
            pass
    return av.open(path, mode="r", options=_OPEN_OPTIONS)


@dataclass(frozen=True)
class FrameIndex:
    """Times (seconds, ascending) and key-frame flags of every frame of a video stream."""

    pts: np.ndarray  # int64, stream time base
    times: np.ndarray  # float64 seconds
    keyframe_of: np.ndarray  # int64: index of the key frame at or before each frame
    time_base: Fraction
    fps: float

    def __len__(self) -> int:
        return len(self.pts)

    def nearest(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index of the frame nearest to each time, and its distance in seconds (a tie goes to the earlier
        frame)."""
        t = self.times
        if len(times) <= _FEW_TIMES:  # a mixture entry's part: a few times, where numpy's calls cost most
            return self._nearest_few(times)
        # the frames either side of each time (both the first / last frame at the ends); ufuncs, not np.clip,
        # whose Python wrapper costs more than the search for the few times of a mixture's part
        hi = np.minimum(np.maximum(np.searchsorted(t, times), 1), len(t) - 1)
        lo = np.maximum(hi - 1, 0)
        pick = np.where(np.abs(t[hi] - times) < np.abs(times - t[lo]), hi, lo)
        return pick, np.abs(t[pick] - times)

    def _nearest_few(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`nearest` for a few times, by bisection in Python (the same values)."""
        t = self.__dict__.get("_times_list")
        if t is None:
            t = self.__dict__["_times_list"] = self.times.tolist()  # a frozen dataclass: set through __dict__
        last = len(t) - 1
        picks, dists = [], []
        for x in times.tolist():
            hi = min(max(bisect_left(t, x), 1), last)
            lo = max(hi - 1, 0)
            p = hi if abs(t[hi] - x) < abs(x - t[lo]) else lo
            picks.append(p)
            dists.append(abs(t[p] - x))
        return np.array(picks, dtype=np.int64), np.array(dists, dtype=np.float64)


def _container_index(stream) -> tuple[list, list] | None:
    """Frame times and key flags from the container's own index (mp4 sample tables), without reading
    packets. Only for AV1, whose samples carry no composition offset in mp4 (index time == pts); codecs
    with B-frames (H.264, HEVC) may reorder, so their index is built from the packets."""
    entries = getattr(stream, "index_entries", None)
    if (
        stream.codec_context.name not in ("av1", "libdav1d", "libaom-av1")
        or not entries
        or len(entries) != stream.frames
    ):
        return None
    pts = [e.timestamp for e in entries]
    return pts, [e.is_keyframe for e in entries]


def build_index(container: av.container.InputContainer, stream: av.video.stream.VideoStream, path: str) -> FrameIndex:
    from_container = _container_index(stream)
    if from_container is not None:
        return _frame_index(*from_container, stream)
    pts, key = [], []
    try:
        for packet in container.demux(stream):
            if packet.pts is None or packet.size == 0:
                continue
            pts.append(packet.pts)
            key.append(packet.is_keyframe)
    except av.FFmpegError as e:
        raise VideoDecodeError(f"{path}: cannot read video packets ({e})") from None
    if not pts:
        raise VideoDecodeError(f"{path}: the video stream has no frames")
    return _frame_index(pts, key, stream)


def _frame_index(pts: list, key: list, stream) -> FrameIndex:
    p = np.asarray(pts, dtype=np.int64)
    order = np.argsort(p, kind="stable")
    p, k = p[order], np.asarray(key, dtype=bool)[order]
    k[0] = True  # decoding always starts at the first packet
    keyframe_of = np.maximum.accumulate(np.where(k, np.arange(len(p)), 0))
    tb = stream.time_base
    rate = float(stream.average_rate) if stream.average_rate else (len(p) / max(float((p[-1] - p[0]) * tb), 1e-9))
    return FrameIndex(pts=p, times=p.astype(np.float64) * float(tb), keyframe_of=keyframe_of, time_base=tb, fps=rate)


class VideoReader:
    """An open video file with its frame index. Not shared across processes (see DecoderCache)."""

    def __init__(self, path: str, thread_count: int = 1):
        self.path = path
        try:
            self._container = _open(path)
        except FileNotFoundError:
            raise VideoDecodeError(f"{path}: video file not found") from None
        except (av.FFmpegError, OSError) as e:
            raise VideoDecodeError(f"{path}: cannot open video ({e})") from None
        try:
            if not self._container.streams.video:
                raise VideoDecodeError(f"{path}: no video stream")
            self._stream = self._container.streams.video[0]
            if self._stream.codec_context is None:  # e.g. a truncated file: the codec's parameters are missing
                raise VideoDecodeError(
                    f"{path}: the video stream cannot be decoded (no codec parameters: a truncated or corrupt file?)"
                )
            self.index = build_index(self._container, self._stream, path)
        except BaseException:
            self._container.close()
            raise
        self._stream.codec_context.thread_count = thread_count
        self.shape: tuple[int, int] = (self._stream.codec_context.height, self._stream.codec_context.width)
        # None: decoded by the stream's own codec context (the first few files alike of this process, or a stream
        # whose parameters PyAV cannot read), else through its thread's shared ones
        self._signature, self._own_slot = codec_contexts.SHARED.admit(
            self, codec_contexts.stream_signature(self._stream, thread_count)
        )
        self._decoder: SharedDecoder | None = None  # the shared decoder the live generator feeds
        self.reads_forward = False  # its last frame was reachable by decoding on from the one before
        self._reformatter = VideoReformatter()
        self._frames: Iterator[av.VideoFrame] | None = None  # live decode generator
        self._next = 0  # index of the frame the live generator yields next (-1: unknown)
        self.frames_decoded = 0
        self.seeks = 0

    def close(self) -> None:
        self._frames = self._decoder = None
        if self._own_slot is not None:
            self._own_slot()
        self._container.close()

    @property
    def codec_name(self) -> str:
        return self._stream.codec_context.name

    def locate(self, times: np.ndarray, tolerance_s: float, clamp_s: float | None = None) -> np.ndarray:
        """Frame indices for `times`; queries past the last frame by at most `clamp_s` (default `timebase.end_clamp_s`:
        one frame + tolerance_s) are clamped to it. Raises FrameTimestampError for any other time farther than
        tolerance_s."""
        times = np.asarray(times, dtype=np.float64)
        idx, dist = self.index.nearest(times)
        far = dist >= tolerance_s
        if not far.any():
            return idx
        last = self.index.times[-1]
        clamp_s = end_clamp_s(self.index.fps, tolerance_s) if clamp_s is None else clamp_s
        clamped = (times > last) & (times <= last + clamp_s)
        bad = far & ~clamped
        if bad.any():
            raise FrameTimestampError(
                f"{self.path}: no frame within tolerance_s={tolerance_s} of timestamps "
                f"{np.round(times[bad][:8], 6).tolist()} "
                f"(nearest frames at {np.round(self.index.times[idx[bad][:8]], 6).tolist()}; "
                f"the file holds {len(self.index)} frames from {self.index.times[0]:.4f}s to {last:.4f}s)",
            )
        return idx

    def decode(self, frame_indices: np.ndarray) -> np.ndarray:
        """RGB frames (len, H, W, 3) uint8 for frame indices, in the given order; one forward pass."""
        frame_indices = np.asarray(frame_indices, dtype=np.int64)
        out = np.empty((len(frame_indices), *self.shape, 3), dtype=np.uint8)
        self.decode_into(frame_indices, out, _HWC_UINT8)
        return out

    def decode_into(
        self,
        frame_indices: np.ndarray | Sequence[int],
        dest: np.ndarray,
        output: FrameOutput,
        slots: np.ndarray | Sequence[int] | None = None,
    ) -> None:
        """Write frame `frame_indices[i]` into `dest[slots[i]]` (default `dest[i]`; `dest`: (N, *output.shape(
        self.shape)) of output.dtype) in one forward pass: frames in file order, each decoded once however
        often it is asked for, converted straight into its slot."""
        if isinstance(frame_indices, list) and len(frame_indices) == 1:  # a mixture's batch: one frame of each of
            self._decode_one(int(frame_indices[0]), dest[0 if slots is None else int(slots[0])], output)  # many files
            return
        frame_indices = np.asarray(frame_indices, dtype=np.int64).reshape(-1)
        slot_of = list(range(len(frame_indices))) if slots is None else np.asarray(slots).reshape(-1).tolist()
        frames = frame_indices.tolist()
        if len(frames) == 1:
            self._decode_one(frames[0], dest[slot_of[0]], output)
            return
        first: dict[int, int] = {}
        for i in np.argsort(frame_indices, kind="stable").tolist():
            f, slot = frames[i], slot_of[i]
            if f in first:  # asked for again (a window padded at an episode edge): a copy, not a decode
                np.copyto(dest[slot], dest[first[f]])
                continue
            self._decode_one(f, dest[slot], output)
            first[f] = slot

    def _decode_one(self, f: int, dest: np.ndarray, output: FrameOutput) -> None:
        """Frame `f` into `dest` (one slot)."""
        k = int(self.index.keyframe_of[f])
        # decode on from where the decoder is when no key frame lies between; else seek to f's key frame
        onward = self._frames is not None and k <= self._next <= f  # reachable by decoding on
        self.reads_forward = onward
        if not onward or not self._holds_decoder():
            self._seek(k)
        write_frame(self._decode_until(f), dest, output, self._reformatter)

    def _seek(self, k: int) -> None:
        try:
            self._container.seek(int(self.index.pts[k]), stream=self._stream, backward=True, any_frame=False)
        except av.FFmpegError as e:
            raise VideoDecodeError(f"{self.path}: seek to {self.index.times[k]:.4f}s failed ({e})") from None
        if self._signature is not None:
            try:
                self._decoder = codec_contexts.SHARED.take(self._signature, self, self._decoder)
            except (AttributeError, TypeError, ValueError, av.FFmpegError):  # PyAV cannot make a context like it
                self._signature = self._decoder = None
        if self._decoder is None:
            self._frames = self._container.decode(self._stream)
        else:
            self._frames = self._decoded(self._decoder)
        self._next = k
        self.seeks += 1

    def _holds_decoder(self) -> bool:
        """Whether the decoder the live generator feeds is still this reader's, on this thread."""
        d = self._decoder
        return d is None or (d.owner is self and d.thread == threading.get_ident())

    def _decoded(self, decoder: SharedDecoder) -> Iterator[av.VideoFrame]:
        """Frames from this file's packets (from where the container was sought to) through `decoder` (only while
        this reader owns it: `_holds_decoder`). A frame handed out is no longer referenced here: a reader that
        waits for its next request holds no picture (~0.5 MB at 480x640, kept from the codec's pool: with
        hundreds of files open, hundreds of MB and fresh pages for every decode)."""
        decode = decoder.ctx.decode
        for packet in self._container.demux(self._stream):
            frames = decode(packet)[::-1]
            while frames:
                yield frames.pop()

    def _decode_until(self, f: int) -> av.VideoFrame:
        target = int(self.index.pts[f])
        frames = self._frames
        assert frames is not None, "a seek starts the live generator first"
        try:
            for frame in frames:
                self.frames_decoded += 1
                if frame.pts is None:
                    continue
                if frame.pts >= target:
                    self._next = f + 1
                    if frame.pts != target:
                        raise VideoDecodeError(f"{self.path}: decoder skipped the frame at {self.index.times[f]:.4f}s")
                    return frame
        except av.FFmpegError as e:
            self._frames = None
            raise VideoDecodeError(
                f"{self.path}: decoding the frame at {self.index.times[f]:.4f}s failed ({e})"
            ) from None
        self._frames = None
        raise VideoDecodeError(
            f"{self.path}: the file ended before the frame at {self.index.times[f]:.4f}s (truncated video?)"
        )

    def frames_at(self, times: np.ndarray, tolerance_s: float = 1e-4) -> np.ndarray:
        return self.decode(self.locate(times, tolerance_s))


_HWC_UINT8 = FrameOutput(channels_first=False)


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
