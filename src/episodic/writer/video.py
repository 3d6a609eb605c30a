"""Encoding camera frames into mp4 files with PyAV, and joining mp4 segments into one file without re-encoding.

The writer encodes each episode of each camera into its own mp4 segment (`VideoFileWriter`), so an episode's
video is complete on disk when `add_episode` returns; `concat_mp4` later joins the segments of one video file
by copying their packets with shifted timestamps: the frames of segment k follow those of segment k-1 as if one
encoder had produced them all (each segment starts with a key frame).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from fractions import Fraction

import av
import numpy as np

from .. import config
from ..format.errors import WriterInputError, WriterSessionError
from ..format.timebase import frames_to_seconds
from ..storage.atomic import AtomicFile

CODECS = {"av1": "libsvtav1", "libsvtav1": "libsvtav1", "h264": "libx264", "libx264": "libx264",
          "hevc": "libx265", "h265": "libx265", "libx265": "libx265"}
INFO_CODEC = {"libsvtav1": "av1", "libx264": "h264", "libx265": "hevc"}


SVT_AV1_MIN_WIDTH = 32  # narrower frames crash SVT-AV1 as PyAV 15 bundles it (16 and 24 seen)
# SVT-AV1 (as PyAV 15-18 bundle it) never returns from flushing frames of 24 rows or fewer that are wider than 64
# pixels (8-24 rows at widths 80-1920 seen; 25 rows and more, or 64 pixels wide and less, encode)
SVT_AV1_LOW_MAX_HEIGHT, SVT_AV1_LOW_MAX_WIDTH = 24, 64
# x265 (as PyAV 15, 18 and 19 bundle it) writes past its buffers on frames 33 to 48 pixels wide, whatever the height
# and pixel format: glibc aborts the process ("free(): invalid next size", "corrupted size vs. prev_size") at once
# or later, when the damaged heap is next touched. 32 and 49 encode.
X265_BAD_WIDTHS = range(33, 49)


def _size_problem(encoder: str, width: int, height: int) -> str | None:
    """Why `encoder` (as PyAV bundles it) cannot take `width`x`height` frames: it crashes, hangs or corrupts the
    memory of the process; or None."""
    if encoder == "libsvtav1":
        if width < SVT_AV1_MIN_WIDTH:
            return f"width must be >= {SVT_AV1_MIN_WIDTH}"
        if height <= SVT_AV1_LOW_MAX_HEIGHT and width > SVT_AV1_LOW_MAX_WIDTH:
            return (f"frames of {SVT_AV1_LOW_MAX_HEIGHT} rows or fewer must be at most {SVT_AV1_LOW_MAX_WIDTH} "
                    f"pixels wide (its encoder hangs)")
    if encoder == "libx265" and width in X265_BAD_WIDTHS:
        return (f"widths {X265_BAD_WIDTHS.start}-{X265_BAD_WIDTHS.stop - 1} corrupt its memory (the process "
                f"aborts)")
    return None


_ENCODER_LABEL = {"libsvtav1": "AV1 (SVT-AV1)", "libx265": "HEVC (x265)"}


def encoder_name(vcodec: str) -> str:
    try:
        return CODECS[vcodec]
    except (KeyError, TypeError):
        raise WriterInputError(f"unknown video codec {vcodec!r}; choose one of {sorted(set(CODECS))}") from None


def _add_stream(container, width: int, height: int, fps: int, vcodec: str, gop: int, crf: int | None, pix_fmt: str,
                preset: int | str | None):
    name = encoder_name(vcodec)
    problem = _size_problem(name, width, height)
    if problem:
        # refused before the encoder opens: these sizes crash (SIGFPE), hang or corrupt the memory of the whole
        # process in the SVT-AV1 and x265 bundled with PyAV, so a probe could not report them
        raise WriterInputError(f"{_ENCODER_LABEL[name]} cannot encode {width}x{height} frames: {problem}; use "
                               f"another camera size or vcodec='h264'")
    options = {"g": str(gop)}
    if crf is not None:
        options["crf"] = str(crf)
    if name == "libsvtav1":
        config.quiet_svt_av1()  # before the encoder starts: it reads SVT_LOG when it opens
        options["preset"] = str(preset if preset is not None else 10)
    elif preset is not None:
        options["preset"] = str(preset)
    if name in ("libx264", "libx265"):
        options.setdefault("bf", "0")  # no B-frames: presentation order == decode order, cheap seeks
    stream = container.add_stream(name, rate=fps, options=options)
    stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
    stream.time_base = Fraction(1, fps)
    if name == "libx265":
        stream.codec_context.options = {**options, "x265-params": f"log-level=error:keyint={gop}:min-keyint={gop}"}
    return stream, name


def probe_encoder(key: str, width: int, height: int, fps: int, **opts) -> None:
    """Encode one black frame in memory: a camera the encoder cannot take (size, pixel format, options) fails
    here, when the writer opens, instead of in the middle of a recording."""
    try:
        with av.open(io.BytesIO(), mode="w", format="mp4") as container:
            stream, _ = _add_stream(container, width, height, fps, **opts)
            frame = av.VideoFrame.from_ndarray(np.zeros((height, width, 3), np.uint8), format="rgb24")
            frame.pts = 0
            for packet in [*stream.encode(frame), *stream.encode(None)]:
                container.mux(packet)
    except WriterInputError as e:  # refused before encoding (e.g. too narrow for the encoder)
        raise WriterInputError(f"camera {key!r}: {e}") from None
    except av.FFmpegError as e:
        raise WriterInputError(f"camera {key!r}: {opts.get('vcodec')} cannot encode {width}x{height} "
                               f"{opts.get('pix_fmt')} frames with these options ({e})") from None


class VideoFileWriter:
    """An mp4 being written under a temporary name; `close()` flushes the encoder and renames it."""

    def __init__(self, final_path: str, width: int, height: int, fps: int, vcodec: str = "av1", gop: int = 2,
                 crf: int | None = 30, pix_fmt: str = "yuv420p", preset: int | str | None = None):
        self.final_path = final_path
        self.fps = fps
        self.frames = 0
        self.bytes = 0  # encoded bytes so far (the file on disk lags behind the muxer's buffer)
        encoder_name(vcodec)
        self._file = AtomicFile(final_path)
        self.tmp_path = self._file.tmp
        self._container = self._sink = None
        try:
            self._sink, self._container = _open_output(self.tmp_path)
            self._stream, name = _add_stream(self._container, width, height, fps, vcodec, gop, crf, pix_fmt, preset)
        except BaseException:
            self.abort()
            raise
        self.codec = INFO_CODEC[name]
        self.pix_fmt = pix_fmt

    def add(self, frames: np.ndarray) -> float:
        """Append HWC uint8 frames; returns the time (seconds) of the first one inside this file."""
        start = frames_to_seconds(self.frames, self.fps)
        for img in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
            frame.pts = self.frames
            frame.time_base = Fraction(1, self.fps)
            for packet in self._stream.encode(frame):
                self.bytes += packet.size
                self._container.mux(packet)
            self.frames += 1
        return start

    def size(self) -> int:
        return self.bytes

    def close(self, fsync: bool = False) -> None:
        """Flush the encoder, close the file and rename it (flushed to the disk first with `fsync`)."""
        try:
            for packet in self._stream.encode(None):
                self.bytes += packet.size
                self._container.mux(packet)
            _finish_output(self._sink, self._container, self.tmp_path, self.frames)
            self._file.commit(fsync=fsync)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Drop the file (never raises)."""
        _close_output(self._sink, self._container)
        self._file.discard()


class _Sink:
    """The file an mp4 muxer writes to, a descriptor we own. FFmpeg takes a short write for a complete one and
    may drop an error raised while it writes the trailer: here every write is complete or raises, the first
    error is kept (`error`) for the caller to raise after closing, and closing never writes (so it cannot
    fail for lack of space), which releases the descriptor whatever the muxer's state."""

    def __init__(self, path: str):
        self._f = open(path, "wb", buffering=0)
        self.error: OSError | None = None

    def write(self, data) -> int:
        view = memoryview(data)
        try:
            done = 0
            while done < len(view):
                n = self._f.write(view[done:])
                if not n:
                    raise OSError(f"{self._f.name}: write made no progress")
                done += n
        except OSError as e:
            self.error = self.error or e
            raise
        return len(view)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        self._f.close()


def _open_output(path: str):
    sink = _Sink(path)
    try:
        return sink, av.open(sink, mode="w", format="mp4")
    except BaseException:
        sink.close()
        raise


def _finish_output(sink: _Sink, container, path: str, frames: int) -> None:
    """Close a muxer that wrote `frames` frames, raise what went wrong while writing, and check that the file
    reads back as that many frames (never rename a file that does not)."""
    container.close()
    sink.close()
    if sink.error is not None:
        raise sink.error
    with av.open(path) as check:
        streams = check.streams.video
        got = streams[0].frames if streams else 0
    if got != frames:
        raise OSError(f"{path}: reads back as {got} frames after writing {frames}")


def _close_output(sink, container) -> None:
    """Close a muxer and its file after a failure (never raises: the first error is the one to report)."""
    for close in (container.close if container is not None else None, sink.close if sink is not None else None):
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001
                pass


def _stream_params(stream) -> tuple:
    cc = stream.codec_context
    return (cc.name, cc.width, cc.height, cc.format.name if cc.format else None, bytes(cc.extradata or b""),
            stream.time_base)


def concat_mp4(segments: Sequence[str], final: str, fps: int, fsync: bool = False) -> int:
    """Join mp4 `segments` (one video stream each, same encoder and settings, each starting at time 0) into
    `final` without re-encoding; returns the number of frames. Written under a temporary name and renamed;
    on any error nothing is left at `final` (nor a temporary file) and the segments are untouched."""
    if not segments:
        raise ValueError(f"{final}: no segments to join")
    out_file = AtomicFile(final)
    try:
        sink, out = _open_output(out_file.tmp)
        try:
            total = _remux(segments, out, fps)
            _finish_output(sink, out, out_file.tmp, total)
        except BaseException:
            _close_output(sink, out)
            raise
        out_file.commit(fsync=fsync)
    except BaseException:
        out_file.discard()
        raise
    return total


def _remux(segments: Sequence[str], out, fps: int) -> int:
    ost, ref, ticks, offset, total = None, None, 0, 0, 0
    for path in segments:
        with av.open(path) as inp:
            ist = inp.streams.video[0]
            params = _stream_params(ist)
            if ost is None:
                ost = out.add_stream_from_template(ist, opaque=True)
                ost.time_base = ist.time_base
                ref, frame_ticks = params, Fraction(1, fps) / ist.time_base
                if frame_ticks.denominator != 1:
                    raise WriterSessionError(f"{path}: time base {ist.time_base} does not divide a frame at {fps} fps")
                ticks = int(frame_ticks)
            elif params != ref:
                raise WriterSessionError(f"{path}: encoded with other settings than {segments[0]} "
                                         f"({params[:4]} vs {ref[:4]}); the segments cannot be joined")
            count = 0
            for packet in inp.demux(ist):
                if packet.dts is None:  # the demuxer's flush packet
                    continue
                if count == 0 and packet.pts != 0:
                    raise WriterSessionError(f"{path}: the first frame is at {packet.pts} x {ist.time_base} s, not 0")
                packet.pts += offset
                packet.dts += offset
                packet.stream = ost
                out.mux(packet)
                count += 1
        offset += count * ticks
        total += count
    return total
