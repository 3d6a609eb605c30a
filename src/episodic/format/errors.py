"""Errors raised by episodic. Every message names the file and, where known, the episode and field."""

from __future__ import annotations


class EpisodicError(Exception):
    """Base class of episodic's own errors."""


class DatasetFormatError(EpisodicError, ValueError):
    """A dataset file is missing, unreadable or does not follow the LeRobot format contract."""


class MissingFileError(DatasetFormatError):
    """A dataset file does not exist (a local path, or a URL answered with "not found")."""


class EpisodeIndexError(EpisodicError, IndexError):
    """An episode or frame index outside the dataset."""


class VideoDecodeError(EpisodicError, RuntimeError):
    """A video file could not be opened or decoded."""


class FrameTimestampError(VideoDecodeError):
    """A requested frame time has no decoded frame within the tolerance."""


class FetchError(EpisodicError, OSError):
    """Remote bytes could not be fetched: retries of a transient failure ran out, or the server refused for
    good (e.g. 403). The message names the URL, the attempts made and the last failure (also `__cause__`);
    `url` and `attempts` hold the first two."""

    def __init__(self, message: str, url: str | None = None, attempts: int | None = None):
        super().__init__(message)
        self.url, self.attempts = url, attempts
