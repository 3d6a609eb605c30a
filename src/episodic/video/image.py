"""Decoding images stored inside parquet files ('image' features: PNG/JPEG bytes)."""

from __future__ import annotations

import io

import av
import numpy as np

from ..format.errors import VideoDecodeError


def decode_image(data: bytes, where: str = "image") -> np.ndarray:
    """HWC uint8 RGB array from encoded image bytes."""
    if data is None:
        raise VideoDecodeError(f"{where}: missing image bytes")
    try:
        with av.open(io.BytesIO(data), mode="r", format="image2pipe") as c:
            frame = next(c.decode(video=0))
            return frame.to_ndarray(format="rgb24")
    except (av.FFmpegError, StopIteration, OSError) as e:
        raise VideoDecodeError(f"{where}: cannot decode image bytes ({e})") from None
