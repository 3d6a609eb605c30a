"""Frame-accurate video decoding with PyAV: a per-file frame index, then one forward pass per request.

A `VideoReader` demuxes its file once (packets only, no decode) to learn every frame's time and the key
frames; a request for frames at some times maps each time to the nearest frame, checks the tolerance,
clamps at the file end, and decodes forward from the nearest key frame, seeking only when that is shorter
than decoding on from where the decoder already is.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np

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
        write_frame(self._decode_until(f), dest, output)

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
