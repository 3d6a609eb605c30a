"""Encoding camera frames into mp4 files with PyAV.

The writer encodes each episode of each camera into its own mp4 segment (`VideoFileWriter`), so an episode's
video is complete on disk when `add_episode` returns; `remux.concat_mp4` later joins the segments of one video
file without re-encoding. The file itself is written by `mp4_output` (temporary name, read back, renamed).
"""

from __future__ import annotations

import functools
import io
import logging
from collections.abc import Callable
from fractions import Fraction

import av
import numpy as np

from .. import config
from ..format.errors import EncoderError, WriterInputError
from ..format.timebase import frames_to_seconds
from ..storage.atomic import AtomicFile
from .encoder_watch import EncoderStalled, leave_behind, watched
from .mp4_output import close_output, finish_output, open_output

log = logging.getLogger(__name__)

CODECS = {
    "av1": "libsvtav1",
    "libsvtav1": "libsvtav1",
    "h264": "libx264",
    "libx264": "libx264",
    "hevc": "libx265",
    "h265": "libx265",
    "libx265": "libx265",
}
INFO_CODEC = {"libsvtav1": "av1", "libx264": "h264", "libx265": "hevc"}


# Frame sizes the encoders bundled with PyAV cannot take safely. They are refused before the encoder opens:
# a probe could not report them, since each one takes the whole process down or never returns.
SVT_AV1_MIN_WIDTH = 32  # narrower frames crash SVT-AV1 (SIGFPE; 16 and 24 seen)
# SVT-AV1 4.1 (PyAV 18.1) never finishes a stream of frames wider than 64 and at most 24 high: the flush waits
# forever for its end-of-stream packet (every preset and gop; heights 25..31, padded to 32 inside, and widths
# <= 64 work). SVT-AV1 3.0 (PyAV 15.0) dies of SIGFPE on them instead.
SVT_AV1_SHORT_HEIGHT, SVT_AV1_SHORT_MAX_WIDTH = 24, 64
# x265 overflows a heap buffer for frames at most 48 wide: its lookahead keeps one int per 8x8 block of a row
# of the half-resolution frame (width padded to 8, halved, in 8-pixel blocks: fewer than 4 up to 48 pixels),
# and its AVX cost propagation (cuTree) writes 4 at a time (6 or 7 ints past a 3-int buffer at width 40,
# seen with valgrind), so glibc aborts later ("corrupted size vs. prev_size") or memory is silently damaged.
X265_MIN_WIDTH = 49


# x264's AVX-512 code makes its output differ from run to run on the same frames: on this project's machines (their
# CPUs have AVX-512), `reencode` to H.264 wrote ~0.3-3% of its files with other bytes than the run before (other
# encoding decisions from the first frame on; every copy decodes within the codec's loss), more when the encoder
# runs on a thread other than the main one, never with x264's code capped at AVX2 (0 of 4,000 files) or with
# glibc's MALLOC_PERTURB_ set: a dependence on what memory held before. On such a CPU the writer caps x264 at its
# AVX2 code (every CPU with AVX-512 has the rest of what x264 calls AVX2), so one machine writes the same bytes
# for the same frames every time, at ~4% less encoding speed (480x640, 21 pairs: 296 vs 309 frames/s; two runs of
# 7 pairs gave 0.94 and 1.07). (x264's code levels are not bit-exact with each other: a machine without AVX2
# writes other bytes, equally valid.)
X264_AVX2_FLAGS = ("avx2", "fma", "bmi1", "bmi2", "abm")  # /proc/cpuinfo's names of what x264's "AVX2" level uses


@functools.cache
def x264_params() -> str:
    """The ``x264-params`` the writer gives x264 on this machine: ``asm=AVX2`` where the CPU has AVX-512 (see
    above), else nothing (x264's own choice)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:  # not Linux: x264's own choice
        return ""
    return "asm=AVX2" if "avx512f" in flags and all(f in flags for f in X264_AVX2_FLAGS) else ""


def _refuse_unsafe_size(name: str, width: int, height: int) -> None:
    if name == "libsvtav1" and width < SVT_AV1_MIN_WIDTH:
        raise WriterInputError(
            f"{width}x{height} frames are too narrow for AV1 (SVT-AV1): width must be >= "
            f"{SVT_AV1_MIN_WIDTH}; use a wider camera or vcodec='h264'"
        )
    if name == "libsvtav1" and height <= SVT_AV1_SHORT_HEIGHT and width > SVT_AV1_SHORT_MAX_WIDTH:
        raise WriterInputError(
            f"{width}x{height} frames are too flat for AV1 (SVT-AV1 never finishes such a "
            f"stream): frames wider than {SVT_AV1_SHORT_MAX_WIDTH} need a height >= "
            f"{SVT_AV1_SHORT_HEIGHT + 1}; use a taller camera or vcodec='h264'"
        )
    if name == "libx265" and width < X265_MIN_WIDTH:
        raise WriterInputError(
            f"{width}x{height} frames are too narrow for HEVC (x265 corrupts memory below "
            f"{X265_MIN_WIDTH} pixels): width must be >= {X265_MIN_WIDTH}; use a wider camera "
            f"or vcodec='h264'"
        )


def check_gop(name: str, gop) -> None:
    """`gop` (frames from one key frame to the next) for the encoder `name`."""
    if isinstance(gop, bool) or not isinstance(gop, (int, np.integer)) or gop < 1:
        raise WriterInputError(f"gop must be a positive integer (frames from one key frame to the next), got {gop!r}")
    if name == "libsvtav1" and gop == 1:
        # every frame a key frame: SVT-AV1 4.1 then, at random, never finishes the stream (its flush waits
        # forever; seen once in 10 to 50 episodes of 42 frames at 128x64, with the default preset too)
        raise WriterInputError(
            "gop=1 (every frame a key frame) is not written with AV1: SVT-AV1 at random never "
            "finishes such a stream; use gop >= 2, or vcodec='h264' or 'hevc' for key frames only"
        )


def encoder_name(vcodec: str) -> str:
    try:
        return CODECS[vcodec]
    except (KeyError, TypeError):
        raise WriterInputError(f"unknown video codec {vcodec!r}; choose one of {sorted(set(CODECS))}") from None


def _add_stream(
    container,
    width: int,
    height: int,
    fps: int,
    vcodec: str,
    gop: int,
    crf: int | None,
    pix_fmt: str,
    preset: int | str | None,
    lossless: bool = False,
):
    name = encoder_name(vcodec)
    check_gop(name, gop)
    _refuse_unsafe_size(name, width, height)
    if lossless and name != "libx265":
        raise WriterInputError(f"lossless video is written with HEVC (x265), not {vcodec!r}")
    options = {"g": str(gop)}
    if crf is not None and not lossless:
        options["crf"] = str(crf)
    if name == "libsvtav1":
        config.quiet_svt_av1()  # before the encoder starts: it reads SVT_LOG when it opens
        options["preset"] = str(preset if preset is not None else 10)
    elif preset is not None:
        options["preset"] = str(preset)
    if name in ("libx264", "libx265"):
        options.setdefault("bf", "0")  # no B-frames: presentation order == decode order, cheap seeks
    if name == "libx264" and x264_params():
        options["x264-params"] = x264_params()
    stream = container.add_stream(name, rate=fps, options=options)
    stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
    stream.time_base = Fraction(1, fps)
    if name == "libx265":
        params = f"log-level=error:keyint={gop}:min-keyint={gop}" + (":lossless=1" if lossless else "")
        stream.codec_context.options = {**options, "x265-params": params}
    return stream, name


def video_frame(img: np.ndarray, pix_fmt: str) -> av.VideoFrame:
    """A PyAV frame of one camera frame: HWC uint8 RGB, or (H, W[, 1]) uint16 codes for ``gray12le`` (a depth
    camera's, `format.depth`; written row by row into the plane, whose rows may be padded)."""
    if pix_fmt != "gray12le":
        return av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
    codes = img.reshape(img.shape[0], img.shape[1])
    frame = av.VideoFrame(codes.shape[1], codes.shape[0], "gray12le")
    plane = frame.planes[0]
    rows = np.frombuffer(memoryview(plane), np.uint8).reshape(codes.shape[0], plane.line_size)
    rows[:, : codes.shape[1] * 2] = codes.astype("<u2").view(np.uint8).reshape(codes.shape[0], -1)
    return frame


def probe_encoder(key: str, width: int, height: int, fps: int, **opts) -> None:
    """Encode one black frame in memory: a camera the encoder cannot take (size, pixel format, options) fails
    here, when the writer opens, instead of in the middle of a recording."""
    try:
        with av.open(io.BytesIO(), mode="w", format="mp4") as container:
            stream, _ = _add_stream(container, width, height, fps, **opts)
            stream.codec_context.open()  # a size the encoder refuses fails here, before a frame is allocated
            gray = opts.get("pix_fmt") == "gray12le"
            frame = video_frame(
                np.zeros((height, width) if gray else (height, width, 3), np.uint16 if gray else np.uint8),
                opts.get("pix_fmt", "yuv420p"),
            )
            frame.pts = 0
            packets = watched(
                lambda tick: [*stream.encode(frame), *stream.encode(None)], f"camera {key!r} (the encoder probe)"
            )
            for packet in packets:
                container.mux(packet)
    except EncoderStalled as e:  # the stalled encoder is left behind (its container with it, by its thread)
        raise EncoderError(f"camera {key!r}: {e}") from None
    except WriterInputError as e:  # refused before encoding (e.g. too narrow for the encoder)
        raise WriterInputError(f"camera {key!r}: {e}") from None
    except av.FFmpegError as e:
        raise WriterInputError(
            f"camera {key!r}: {opts.get('vcodec')} cannot encode {width}x{height} "
            f"{opts.get('pix_fmt')} frames with these options ({e})"
        ) from None


ENCODE_ATTEMPTS = 3


def encode_file(
    path: str,
    frames: np.ndarray,
    fps: int,
    fsync: bool = False,
    attempts: int = ENCODE_ATTEMPTS,
    label: str = "",
    **opts,
) -> int:
    """Encode HWC uint8 `frames` into the mp4 `path` (temporary name, renamed when complete); returns its
    encoded bytes. An encoder error (`av.FFmpegError`) or a hung encoder (`EncoderStalled`) costs the attempt, not
    the frames: the file is encoded again from them by a fresh encoder, up to `attempts` times, then
    `EncoderError` is raised with nothing left at `path`. Other errors (a full disk: OSError) are raised at once.
    `label` names the frames in messages."""
    n, height, width = frames.shape[:3]
    for attempt in range(1, attempts + 1):
        writer = VideoFileWriter(path, width, height, fps, **opts)
        try:
            writer.add(frames)
            writer.close(fsync=fsync)
            return writer.bytes
        except (av.FFmpegError, EncoderStalled) as e:
            writer.abort()
            if attempt == attempts:
                raise EncoderError(
                    f"{label or path}: the {writer.codec} encoder failed on its {n} frames at each of "
                    f"{attempts} attempts (last: {type(e).__name__}: {e})"
                ) from e
            log.warning(
                "%s: the %s encoder failed (%s: %s); encoding the %d frames again (attempt %d of %d)",
                label or path,
                writer.codec,
                type(e).__name__,
                e,
                n,
                attempt + 1,
                attempts,
            )
        except BaseException:
            writer.abort()
            raise
    raise AssertionError("unreachable")


class VideoFileWriter:
    """An mp4 being written under a temporary name; `close()` flushes the encoder and renames it."""

    def __init__(
        self,
        final_path: str,
        width: int,
        height: int,
        fps: int,
        vcodec: str = "av1",
        gop: int = 2,
        crf: int | None = 30,
        pix_fmt: str = "yuv420p",
        preset: int | str | None = None,
        lossless: bool = False,
    ):
        self.final_path = final_path
        self.fps = fps
        self.stalled = False  # its encoder stopped making progress (`encoder_watch`)
        self.frames = 0
        self.bytes = 0  # encoded bytes so far (the file on disk lags behind the muxer's buffer)
        encoder_name(vcodec)
        self._file = AtomicFile(final_path)
        self.tmp_path = self._file.tmp
        self._container = self._sink = None
        try:
            self._sink, self._container = open_output(self.tmp_path)
            self._stream, name = _add_stream(
                self._container, width, height, fps, vcodec, gop, crf, pix_fmt, preset, lossless
            )
        except BaseException:
            self.abort()
            raise
        self.codec = INFO_CODEC[name]
        self.pix_fmt = pix_fmt

    def add(self, frames: np.ndarray) -> float:
        """Append HWC uint8 frames (a ``gray12le`` file: uint16 codes); returns the time (seconds) of the first one
        inside this file. `EncoderStalled` when the encoder stops making progress (`encoder_watch`)."""
        start = frames_to_seconds(self.frames, self.fps)
        self._watched(lambda tick: self._add(frames, tick))
        return start

    def _add(self, frames: np.ndarray, tick: Callable[[], None]) -> None:
        container = self._container
        assert container is not None, "opened by the constructor"
        for img in frames:
            frame = video_frame(img, self.pix_fmt)
            frame.pts = self.frames
            frame.time_base = Fraction(1, self.fps)
            for packet in self._stream.encode(frame):
                self.bytes += packet.size
                container.mux(packet)
            self.frames += 1
            tick()

    def _watched(self, work):
        try:
            return watched(work, self.final_path)
        except EncoderStalled:
            self.stalled = True  # its thread is still inside the container: never close it, nor free it
            leave_behind(self)
            raise

    def size(self) -> int:
        return self.bytes

    def close(self, fsync: bool = False) -> None:
        """Flush the encoder, close the file and rename it (flushed to the disk first with `fsync`)."""
        sink, container = self._sink, self._container
        assert sink is not None and container is not None, "opened by the constructor"
        try:
            for packet in self._watched(lambda tick: self._stream.encode(None)):
                self.bytes += packet.size
                container.mux(packet)
            finish_output(sink, container, self.tmp_path, self.frames)
            self._file.commit(fsync=fsync)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Drop the file (never raises). A stalled encoder's container is left open (its thread is inside it):
        only the file goes."""
        if not self.stalled:
            close_output(self._sink, self._container)
        self._file.discard()
