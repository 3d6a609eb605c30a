"""Encoding camera frames into mp4 files with PyAV, several episodes per file."""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

from .. import config
from ..format.timebase import frames_to_seconds
from ..storage.atomic import AtomicFile

CODECS = {"av1": "libsvtav1", "libsvtav1": "libsvtav1", "h264": "libx264", "libx264": "libx264",
          "hevc": "libx265", "h265": "libx265", "libx265": "libx265"}
INFO_CODEC = {"libsvtav1": "av1", "libx264": "h264", "libx265": "hevc"}


def encoder_name(vcodec: str) -> str:
    try:
        return CODECS[vcodec]
    except KeyError:
        raise ValueError(f"unknown video codec {vcodec!r}; choose one of {sorted(set(CODECS))}") from None


class VideoFileWriter:
    """An mp4 being written under a temporary name; `close()` flushes the encoder and renames it."""

    def __init__(self, final_path: str, width: int, height: int, fps: int, vcodec: str = "av1", gop: int = 2,
                 crf: int | None = 30, pix_fmt: str = "yuv420p", preset: int | str | None = None):
        self.final_path = final_path
        self.fps = fps
        self.frames = 0
        self.bytes = 0  # encoded bytes so far (the file on disk lags behind the muxer's buffer)
        name = encoder_name(vcodec)
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
        self._file = AtomicFile(final_path)
        self.tmp_path = self._file.tmp
        try:
            self._container = av.open(self.tmp_path, mode="w", format="mp4")
            self._stream = self._container.add_stream(name, rate=fps, options=options)
            self._stream.width, self._stream.height, self._stream.pix_fmt = width, height, pix_fmt
            self._stream.time_base = Fraction(1, fps)
            if name == "libx265":
                self._stream.codec_context.options = {**options, "x265-params": f"log-level=error:keyint={gop}:min-keyint={gop}"}
        except BaseException:
            self._file.discard()
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

    def close(self) -> None:
        try:
            for packet in self._stream.encode(None):
                self._container.mux(packet)
            self._container.close()
        except BaseException:
            self.abort()
            raise
        self._file.commit()

    def abort(self) -> None:
        try:
            self._container.close()
        except Exception:
            pass
        self._file.discard()
