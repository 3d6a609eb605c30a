"""Resolve a dataset location (local path, fsspec URL) to an fsspec filesystem and a root, and read from it.

A `Source` reads local files directly and remote ones through the fetch policy (`storage.fetch`): its
metadata (`load_metadata`, `read_bytes`), parquet files in place (`open_for_read`) and whole files into the
local cache (`local_path`). It remembers where it came from (`location`, `storage_options`) so that a new
process can open its own filesystem (`storage.resolve.reopen`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ..format.errors import DatasetFormatError
from ..format.errors import ProblemList
from ..format.metadata import DatasetMetadata, load_metadata, read_bytes
from ..format.paths import dataset_path
from .cache import FileCache
from .fetch import FetchPolicy, fetch_bytes, is_local
from .ranges import open_for_read


@dataclass
class Source:
    """An fsspec filesystem and the dataset root on it, plus a cache that makes remote files local.

    `location` and `storage_options` are what it was opened from (a URL or a local directory); `policy`
    governs its remote reads (local files are read directly)."""

    fs: Any
    root: str
    cache: FileCache | None = None
    location: str | None = None
    storage_options: dict = field(default_factory=dict)
    policy: FetchPolicy = field(default_factory=FetchPolicy)
    _checked: dict = field(default_factory=dict, repr=False, compare=False)  # rel -> checked path

    @property
    def is_local(self) -> bool:
        return is_local(self.fs)

    def path(self, rel: str) -> str:
        """`root/rel`, checked to stay inside the root (resolved, symlinks included, when local; under the
        root URL's prefix when remote): UnsafePathError before any I/O (format.paths.dataset_path)."""
        path = self._checked.get(rel)
        if path is None:
            path = self._checked[rel] = dataset_path(self.fs, self.root, rel)
        return path

    def url(self, rel: str) -> str:
        return self.fs.unstrip_protocol(self.path(rel)) if not self.is_local else self.path(rel)

    def local_path(self, rel: str) -> str:
        """A local file with the bytes of `rel`: the file itself when local, else a cached copy."""
        if self.is_local:
            return self.path(rel)
        if self.cache is None:
            self.cache = FileCache()
        return self.cache.fetch(self.fs, self.path(rel), self.policy)

    def read_bytes(self, rel: str) -> bytes:
        """The bytes of `rel`. Raises MissingFileError ("<path or URL>: file not found") when it does not
        exist; remote reads are retried (FetchError when they give up)."""
        if self.is_local:
            return read_bytes(self.fs, self.root, rel)
        counters = self.cache.stats if self.cache is not None else None
        return fetch_bytes(self.fs, self.path(rel), self.url(rel), self.policy, counters)

    def load_metadata(self, problems: ProblemList | None = None) -> DatasetMetadata:
        """The dataset's metadata, its files read with `read_bytes` (`problems`: see `load_metadata`)."""
        return load_metadata(self.fs, self.root, read=self.read_bytes, problems=problems)

    def open_for_read(self, path: str) -> BinaryIO:
        """A seekable binary file of `path` (a path on `fs`, as `path(rel)` gives; `load_columns` passes
        these): the file itself when local, else retried range reads (`storage.ranges.open_for_read`)."""
        counters = self.cache.stats if self.cache is not None else None
        return open_for_read(self.fs, path, self.policy, counters)


def is_url(location: str) -> bool:
    return "://" in location or location.startswith("hf:")


def open_source(location: str | os.PathLike, storage_options: dict | None = None, cache: FileCache | None = None,
                policy: FetchPolicy | None = None) -> Source:
    """`location` is a local directory or any fsspec URL (http(s)://, s3://, hf://, memory://, ...)."""
    location = os.fspath(location)
    options = dict(storage_options or {})
    policy = policy or FetchPolicy()
    if is_url(location):
        try:
            fs, root = fsspec.core.url_to_fs(location, **options)
        except (ImportError, ValueError) as e:
            raise DatasetFormatError(f"{location}: cannot open this URL ({e})") from None
        return Source(fs=fs, root=root.rstrip("/"), cache=cache, location=location, storage_options=options,
                      policy=policy)
    root = os.path.abspath(os.path.expanduser(location))
    if not os.path.isdir(root):
        raise DatasetFormatError(f"{root}: dataset directory not found")
    return Source(fs=LocalFileSystem(), root=root, cache=cache, location=root, storage_options=options, policy=policy)
