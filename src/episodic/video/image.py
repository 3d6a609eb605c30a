"""Decoding images stored inside parquet files ('image' features: PNG/JPEG bytes)."""

from __future__ import annotations

import io

import av
import numpy as np

from ..format.errors import VideoDecodeError
from .output import FrameOutput, write_frame


def _first_frame(data: bytes, where: str):
    if data is None:
        raise VideoDecodeError(f"{where}: missing image bytes")
    try:
        with av.open(io.BytesIO(data), mode="r", format="image2pipe") as c:
            return next(c.decode(video=0))
    except (av.FFmpegError, StopIteration, OSError) as e:
        raise VideoDecodeError(f"{where}: cannot decode image bytes ({e})") from None


def decode_image(data: bytes, where: str = "image") -> np.ndarray:
    """HWC uint8 RGB array from encoded image bytes."""
    return _first_frame(data, where).to_ndarray(format="rgb24")


def decode_image_into(data: bytes, dest: np.ndarray, output: FrameOutput, where: str = "image") -> tuple[int, int]:
    """Decode encoded image bytes into `dest` (one frame of `output`); returns the image's own (H, W). An image
    of another size than `dest` (with no resize) is left unwritten: the caller reports it."""
    frame = _first_frame(data, where)
    hw = (frame.height, frame.width)
    if output.frame_hw(hw) == (dest.shape[-2:] if output.channels_first else dest.shape[:2]):
        write_frame(frame, dest, output)
    return hw
