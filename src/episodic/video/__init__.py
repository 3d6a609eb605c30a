"""Video layer: PyAV decoding by timestamp with a per-file frame index and a per-process decoder cache."""

from .decoder import FrameIndex, VideoReader
from .decoder_cache import DecoderCache

__all__ = ["DecoderCache", "FrameIndex", "VideoReader"]
