"""Video layer: PyAV decoding by timestamp with a per-file frame index and a per-process decoder cache."""

from .decoder import DecoderCache, FrameIndex, VideoReader

__all__ = ["DecoderCache", "FrameIndex", "VideoReader"]
