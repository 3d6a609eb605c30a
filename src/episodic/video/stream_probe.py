"""What a video file's stream is, read from its header alone (no packets demuxed, nothing decoded): codec (the
codec's canonical name: "av1" whichever decoder PyAV picks, "h264", "hevc"), pixel format, size, frame count,
and whether frames are reordered (B-frames).
Used to decide where a camera can be decoded (`video.nvdec_caps`) and by `episodic doctor`."""

from __future__ import annotations

from dataclasses import dataclass

import av

from ..format.errors import VideoDecodeError

__all__ = ["StreamFacts", "chroma_and_depth", "probe_stream"]


@dataclass(frozen=True)
class StreamFacts:
    codec: str
    pix_fmt: str
    height: int
    width: int
    frames: int  # as the container says (0 when it does not)
    # whether frames are stored out of presentation order (B-frames: the codec's `has_b_frames`); None when the
    # file was not read (a remote dataset's camera described by info.json)
    reorders: bool | None = None

    @property
    def chroma(self) -> int:
        return chroma_and_depth(self.pix_fmt)[0]

    @property
    def bit_depth(self) -> int:
        return chroma_and_depth(self.pix_fmt)[1]


def chroma_and_depth(pix_fmt: str) -> tuple[int, int]:
    """(chroma subsampling: 400 (monochrome), 420, 422 or 444; bits per sample) of an FFmpeg pixel format."""
    fmt = av.VideoFormat(pix_fmt, 64, 64)
    comps = fmt.components
    depth = max(c.bits for c in comps) if comps else 8
    if len(comps) < 3:  # gray, gray + alpha
        return 400, depth
    if fmt.is_rgb:
        return 444, depth
    luma, chroma = comps[0], comps[1]
    return {(True, True): 420, (False, True): 422}.get(
        (chroma.height < luma.height, chroma.width < luma.width), 444
    ), depth


def probe_stream(path: str) -> StreamFacts:
    """The first video stream's facts of the file at `path` (a local path)."""
    try:
        with av.open(path) as c:
            if not c.streams.video:
                raise VideoDecodeError(f"{path}: no video stream")
            s = c.streams.video[0]
            cc = s.codec_context
            if cc is None or cc.format is None:
                raise VideoDecodeError(f"{path}: the video stream has no codec parameters (truncated or corrupt?)")
            return StreamFacts(
                codec=cc.codec.canonical_name,
                pix_fmt=cc.format.name,
                height=cc.height,
                width=cc.width,
                frames=int(s.frames or 0),
                reorders=bool(cc.has_b_frames),
            )
    except FileNotFoundError:
        raise VideoDecodeError(f"{path}: video file not found") from None
    except (av.FFmpegError, OSError) as e:
        raise VideoDecodeError(f"{path}: cannot open video ({e})") from None
