"""Format layer: LeRobot dataset metadata, paths, schemas and stats. Depends on numpy, pyarrow; never on torch."""

from .errors import (
    DatasetFormatError,
    EncoderError,
    EpisodeIndexError,
    EpisodicError,
    ExistingDirectoryError,
    FetchError,
    FrameTimestampError,
    MissingFileError,
    UnknownTaskWarning,
    VideoDecodeError,
    WriterError,
    WriterInputError,
    WriterLockedError,
    WriterSessionError,
)
from .features import Feature
from .info import DatasetInfo
from .metadata import DatasetMetadata, EpisodeTable, load_metadata

__all__ = [
    "DatasetFormatError",
    "DatasetInfo",
    "DatasetMetadata",
    "EncoderError",
    "EpisodeIndexError",
    "EpisodeTable",
    "EpisodicError",
    "ExistingDirectoryError",
    "Feature",
    "FetchError",
    "FrameTimestampError",
    "MissingFileError",
    "UnknownTaskWarning",
    "VideoDecodeError",
    "WriterError",
    "WriterInputError",
    "WriterLockedError",
    "WriterSessionError",
    "load_metadata",
]
