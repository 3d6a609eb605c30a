"""Errors raised by episodic. Every message names the file and, where known, the episode and field."""

from __future__ import annotations


class EpisodicError(Exception):
    """Base class of episodic's own errors."""


class DatasetFormatError(EpisodicError, ValueError):
    """A dataset file is missing, unreadable or does not follow the LeRobot format contract. `problems`
    lists every problem the check found (one file may have several; the message joins them)."""

    def __init__(self, message: str = "", problems: list[str] | None = None):
        super().__init__(message)
        self.problems = list(problems) if problems else [message]


class MissingFileError(DatasetFormatError):
    """A dataset file does not exist (a local path, or a URL answered with "not found")."""


class UnsafePathError(DatasetFormatError):
    """A path built from dataset content (a path template of info.json and its values, a camera key, a
    repo id) would leave the dataset root, its URL prefix or the cache directory. Raised before any I/O."""


class ProblemList:
    """Problems found while checking a dataset. Strict (the loader): the first one raises at once, as
    `error(message)`. Lenient (`episodic validate`): they are collected in `items` and checking goes on."""

    def __init__(self, strict: bool = True):
        self.strict = strict
        self.items: list[str] = []

    def add(self, message: str, error: type[Exception] = DatasetFormatError) -> None:
        if self.strict:
            raise error(message)
        self.items.append(message)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)


class UnknownTaskWarning(UserWarning):
    """A dataset's rows name task indices its tasks table lacks (metadata drift): their items' task is "" (warned
    once per dataset object; ``on_unknown_task="raise"`` refuses such a dataset instead)."""


class EpisodeIndexError(EpisodicError, IndexError):
    """An episode or frame index outside the dataset."""


class VideoDecodeError(EpisodicError, RuntimeError):
    """A video file could not be opened or decoded."""


class GpuDecodeError(VideoDecodeError):
    """A camera cannot be decoded on the GPU asked for (no CUDA, no NVDEC decoder for its codec, no decode
    library); the message names the camera, its codec, the GPU and the fix."""


class FrameTimestampError(VideoDecodeError):
    """A requested frame time has no decoded frame within the tolerance."""


class FetchError(EpisodicError, OSError):
    """Remote bytes could not be fetched: retries of a transient failure ran out, or the server refused for
    good (e.g. 403). The message names the URL, the attempts made and the last failure (also `__cause__`);
    `url` and `attempts` hold the first two."""

    def __init__(self, message: str, url: str | None = None, attempts: int | None = None):
        super().__init__(message)
        self.url, self.attempts = url, attempts


class MixtureSpecError(EpisodicError, ValueError):
    """A mixture spec (file or objects) is malformed. The message lists every problem found, each naming the
    file, the entry and the field; `problems` holds them one per item."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = list(problems or [])


class MixturePreflightError(EpisodicError, ValueError):
    """Preflight found problems in a mixture's entries. The message lists every problem of every entry;
    `report` is the whole preflight report."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


class MixtureLayoutError(EpisodicError, ValueError):
    """A preflighted mixture's entries cannot share one item layout (windows of different lengths for one role,
    cameras of several sizes and no `image_size`, ...). The message lists every problem, each naming the entry
    and the role; `problems` holds them one per item."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = list(problems or [])


class MixtureStartupError(EpisodicError, RuntimeError):
    """A mixture's distributed start-up failed: a download on some rank (the message names the rank and host,
    the entry, the URL or file, and the original error's type and message; the same error is raised on every
    rank), or a rank that died or did not arrive in time. `entry`, `url`, `rank` and `error_type` hold what is
    known (None otherwise)."""

    def __init__(
        self,
        message: str,
        entry: str | None = None,
        url: str | None = None,
        rank: int | None = None,
        error_type: str | None = None,
    ):
        super().__init__(message)
        self.entry, self.url, self.rank, self.error_type = entry, url, rank, error_type


class WriterError(EpisodicError):
    """A dataset could not be written as asked (the writer's own errors; I/O errors such as a full disk are
    raised as they are)."""


class WriterInputError(WriterError, ValueError):
    """An episode, a feature description or a task string given to the writer is invalid. Raised before
    anything is written; the message names the episode and the field."""


class EncoderError(WriterError):
    """The video encoder failed on an episode's frames at every attempt (the writer encodes them again from
    the frames in memory before giving up). The episode was not added, nothing of it is on disk, and the
    writer goes on: add the episode again (its frames are still the caller's). `__cause__` is the last
    encoder error."""


class WriterLockedError(WriterError):
    """Another live writer (or repair) holds the dataset directory."""


class ExistingDirectoryError(WriterError, FileExistsError):
    """The writer's target directory holds something it must not replace: a dataset (without
    `overwrite=True`), files that are not a dataset (never deleted), or an interrupted writing session
    (resume it, repair it, or pass `overwrite=True`)."""


class WriterSessionError(WriterError):
    """An interrupted writing session cannot be resumed as asked: its settings differ from the writer's, or
    its files are inconsistent (the message names the file)."""


class RelayoutError(WriterError):
    """`episodic convert` / `repack` cannot write the new dataset as asked: its directory holds something else,
    overlaps the source, or the new dataset failed the check that ends the run (the message says which)."""
