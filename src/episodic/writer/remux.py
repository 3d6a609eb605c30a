"""Packets of mp4 files copied into a new mp4 file, retimed, without re-encoding.

- `concat_mp4(segments, final, fps)`: the writer's join of whole segments (one episode's frames each, each starting
  at time 0 with a key frame): the frames of segment k follow those of segment k-1 as if one encoder had produced
  them all.
- The general case, how `episodic convert` and `repack` move episodes' frames between video files: any packet
  range of any file, at any offset:
  - `packet_table(path)`: every packet of a file's first video stream, in decode order (presentation and decode
    times, key-frame flag, size, duration), and what a stream joined with it must share (`stream_params`: codec,
    size, pixel format, codec configuration, time base); nothing is decoded.
  - `copy_runs(runs, final)`: packets ``[start, stop)`` of each run's file, in the runs' order, with both times
    moved by the run's `shift` (ticks of the stream's time base). The caller chooses the shifts: times must keep
    increasing from one run to the next (`tools.fleet.video_units` does).

Either writes `final` through `mp4_output.write_mp4`: under a temporary name, read back (as many frames as packets
copied) and renamed; on any error nothing is left at `final`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np

from ..format.errors import DatasetFormatError, WriterSessionError
from .mp4_output import write_mp4

__all__ = ["PacketRun", "PacketTable", "concat_mp4", "copy_runs", "packet_table", "params_key", "stream_params"]


def params_key(params: tuple) -> str:
    """A short text naming `stream_params` (extradata included): equal keys, joinable streams."""
    name, width, height, pix_fmt, extradata, time_base = params
    text = f"{name}|{width}x{height}|{pix_fmt}|{time_base}|{hashlib.sha256(extradata).hexdigest()[:16]}"
    return text


def stream_params(stream) -> tuple:
    """What two video streams must share for their packets to be joined into one: codec, frame size, pixel
    format, codec configuration (extradata), time base."""
    cc = stream.codec_context
    return (
        cc.name,
        cc.width,
        cc.height,
        cc.format.name if cc.format else None,
        bytes(cc.extradata or b""),
        stream.time_base,
    )


@dataclass
class PacketTable:
    """The packets of one video stream in decode order (arrays of equal length)."""

    pts: np.ndarray  # int64, ticks of `time_base`
    dts: np.ndarray  # int64
    key: np.ndarray  # bool: a key frame (decoding can start here)
    size: np.ndarray  # int64 bytes
    duration: np.ndarray  # int64 ticks (0: unknown)
    time_base: Fraction
    params: str  # `params_key` of the stream

    def __len__(self) -> int:
        return len(self.pts)

    @property
    def times(self) -> np.ndarray:
        """Presentation times in seconds (float64)."""
        return self.pts * float(self.time_base)


def packet_table(path: str, label: str | None = None) -> PacketTable:
    """The packet table of `path`'s first video stream (`label`: the file's name in messages, e.g. its URL)."""
    where = label or path
    try:
        with av.open(path) as container:
            if not container.streams.video:
                raise DatasetFormatError(f"{where}: no video stream")
            stream = container.streams.video[0]
            params = params_key(stream_params(stream))
            time_base = stream.time_base
            rows: list[tuple[int, int, bool, int, int]] = []
            for p in container.demux(stream):
                if p.dts is None:  # the demuxer's flush packet
                    continue
                if p.pts is None:
                    raise DatasetFormatError(f"{where}: packet {len(rows)} has no presentation time")
                rows.append((p.pts, p.dts, p.is_keyframe, p.size, p.duration or 0))
    except av.FFmpegError as e:
        raise DatasetFormatError(f"{where}: not a readable mp4 file ({e})") from None
    if time_base is None or time_base <= 0:
        raise DatasetFormatError(f"{where}: the video stream has no time base")
    if not rows:
        raise DatasetFormatError(f"{where}: the video stream has no packet")
    a = np.array(rows, dtype=np.int64)
    return PacketTable(
        pts=a[:, 0],
        dts=a[:, 1],
        key=a[:, 2].astype(bool),
        size=a[:, 3],
        duration=a[:, 4],
        time_base=Fraction(time_base),
        params=params,
    )


@dataclass(frozen=True)
class PacketRun:
    """Packets ``[start, stop)`` (decode order, as `packet_table` numbers them) of the file at `path`, times moved
    by `shift` ticks. `label` names the file in messages."""

    path: str
    start: int
    stop: int
    shift: int
    label: str = ""


def copy_runs(runs: Sequence[PacketRun], final: str, fsync: bool = False) -> int:
    """Copy `runs` into the new mp4 `final` (see the module docstring); returns the number of packets (frames)."""
    if not runs:
        raise ValueError(f"{final}: no packets to copy")
    return write_mp4(final, lambda out: _mux(runs, out), fsync)


def _mux(runs: Sequence[PacketRun], out) -> int:
    ost, total = None, 0
    ref: tuple = ()  # the first run's stream_params
    inp, pos, current = None, 0, None
    packets: Iterator[av.Packet] = iter(())  # the current file's packets (opened by the first run)
    try:
        for run in runs:
            where = run.label or run.path
            if run.stop <= run.start:
                continue
            if run.path != current or pos > run.start:  # a run earlier in the same file: read it again
                if inp is not None:
                    inp.close()
                inp = av.open(run.path)
                ist = inp.streams.video[0]
                params = stream_params(ist)
                if ost is None:
                    ost = out.add_stream_from_template(ist, opaque=True)
                    ost.time_base = ist.time_base
                    ref = params
                elif params != ref:
                    raise WriterSessionError(
                        f"{where}: encoded with other settings than {runs[0].label or runs[0].path} "
                        f"({params_key(params)} vs {params_key(ref)}); its packets cannot join "
                        f"the same file"
                    )
                packets = (p for p in inp.demux(ist) if p.dts is not None)
                pos, current = 0, run.path
            for p in packets:
                if pos >= run.start:
                    pts, dts = p.pts, p.dts
                    if pts is None or dts is None:  # the packet table refuses such a file: it changed since
                        raise DatasetFormatError(f"{where}: packet {pos} has no presentation time")
                    p.pts, p.dts = pts + run.shift, dts + run.shift
                    p.stream = ost
                    out.mux(p)
                    total += 1
                pos += 1
                if pos >= run.stop:
                    break
            if pos < run.stop:
                raise DatasetFormatError(f"{where}: has {pos} packets, fewer than the {run.stop} to copy")
    finally:
        if inp is not None:
            inp.close()
    return total


def concat_mp4(segments: Sequence[str], final: str, fps: int, fsync: bool = False) -> int:
    """Join mp4 `segments` (one video stream each, same encoder and settings, each starting at time 0) into
    `final` without re-encoding; returns the number of frames. Written under a temporary name and renamed;
    on any error nothing is left at `final` (nor a temporary file) and the segments are untouched."""
    if not segments:
        raise ValueError(f"{final}: no segments to join")
    return write_mp4(final, lambda out: _remux(segments, out, fps), fsync)


def _remux(segments: Sequence[str], out, fps: int) -> int:
    ost, ticks, offset, total = None, 0, 0, 0
    ref: tuple = ()  # the first segment's stream_params
    for path in segments:
        with av.open(path) as inp:
            ist = inp.streams.video[0]
            params = stream_params(ist)
            if ost is None:
                if ist.time_base is None:
                    raise WriterSessionError(f"{path}: the video stream has no time base")
                ost = out.add_stream_from_template(ist, opaque=True)
                ost.time_base = ist.time_base
                ref, frame_ticks = params, Fraction(1, fps) / ist.time_base
                if frame_ticks.denominator != 1:
                    raise WriterSessionError(f"{path}: time base {ist.time_base} does not divide a frame at {fps} fps")
                ticks = int(frame_ticks)
            elif params != ref:
                raise WriterSessionError(
                    f"{path}: encoded with other settings than {segments[0]} "
                    f"({params[:4]} vs {ref[:4]}); the segments cannot be joined"
                )
            count = 0
            for packet in inp.demux(ist):
                if packet.dts is None:  # the demuxer's flush packet
                    continue
                if packet.pts is None:
                    raise WriterSessionError(f"{path}: packet {count} has no presentation time")
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
