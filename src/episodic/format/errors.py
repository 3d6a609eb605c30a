"""Errors raised by episodic. Every message names the file and, where known, the episode and field."""

from __future__ import annotations


class EpisodicError(Exception):
    """Base class of episodic's own errors."""


class DatasetFormatError(EpisodicError, ValueError):
    """A dataset file is missing, unreadable or does not follow the LeRobot format contract."""


class EpisodeIndexError(EpisodicError, IndexError):
    """An episode or frame index outside the dataset."""


class VideoDecodeError(EpisodicError, RuntimeError):
    """A video file could not be opened or decoded."""


class FrameTimestampError(VideoDecodeError):
    """A requested frame time has no decoded frame within the tolerance."""
