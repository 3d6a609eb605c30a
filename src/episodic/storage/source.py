"""Resolve a dataset location (local path, fsspec URL) to an fsspec filesystem and a root, and read from it.

A `Source` reads local files directly and remote ones through the fetch policy (`storage.fetch`): its
metadata (`load_metadata`, `read_bytes`), parquet files in place (`open_for_read`) and whole files into the
local cache (`local_path`). It remembers where it came from (`location`, `storage_options`): a remote
source opens its filesystem afresh in a forked or spawned process (DataLoader workers) the first time it
is used there, since fsspec's asynchronous filesystems are not fork-safe (one session per process).
Filesystems opened from a URL get the connect and read timeouts of the source's policy
(`storage.fetch.timeout_options`).
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from .. import runtime
from ..format.errors import DatasetFormatError, ProblemList
from ..format.meta_files import max_bytes
from ..format.metadata import DatasetMetadata, load_metadata, read_bytes
from ..format.paths import dataset_path
from .cache import FileCache
from .fetch import FetchPolicy, fetch_bytes, is_local, timeout_options
from .ranges import RangeFile, open_for_read


class Source:
    """An fsspec filesystem and the dataset root on it, plus a cache that makes remote files local.

    `location` and `storage_options` are what it was opened from (a URL or a local directory); `policy`
    governs its remote reads (local files are read directly). `fs` is this process's filesystem: a remote
    source reopens it from `location` in a forked child or after unpickling."""

    def __init__(
        self,
        fs: Any,
        root: str,
        cache: FileCache | None = None,
        location: str | None = None,
        storage_options: dict | None = None,
        policy: FetchPolicy | None = None,
    ):
        self._fs = fs
        self.root = root
        self.cache = cache
        self.location = location
        self.storage_options = dict(storage_options or {})
        self.policy = policy if policy is not None else FetchPolicy()
        self._local = is_local(fs)
        self._checked: dict[str, str] = {}  # rel -> checked path
        if self._reopens:
            runtime.after_fork(self)

    @property
    def _reopens(self) -> bool:
        """A remote source opened from a location gets its own filesystem in each process."""
        return not self._local and self.location is not None

    @property
    def fs(self) -> Any:
        if self._fs is None:  # a forked child or an unpickled copy: this process's own filesystem
            assert self.location is not None, "a source whose filesystem is dropped is reopened from its location"
            self._fs = _filesystem(self.location, self.storage_options, self.policy)[0]
        return self._fs

    def _after_fork(self) -> None:
        self._fs = None  # the parent's session and event loop do not work here

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if self._reopens:
            state["_fs"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self._reopens:
            runtime.after_fork(self)

    def __repr__(self) -> str:
        return f"Source(location={self.location!r}, root={self.root!r})"

    @property
    def is_local(self) -> bool:
        return self._local

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
            return self._checked.get(rel) or self.path(rel)
        if self.cache is None:
            self.cache = FileCache()
        return self.cache.fetch(self.fs, self.path(rel), self.policy)

    def read_bytes(self, rel: str) -> bytes:
        """The bytes of `rel`. Raises MissingFileError ("<path or URL>: file not found") when it does not
        exist; remote reads are retried (FetchError when they give up). A metadata JSON file larger than its
        bound (`format.meta_files.max_bytes`) is a DatasetFormatError; of a remote one, no more than the bound
        and a byte is asked for."""
        if self.is_local:
            return read_bytes(self.fs, self.root, rel)
        counters = self.cache.stats if self.cache is not None else None
        return fetch_bytes(self.fs, self.path(rel), self.url(rel), self.policy, counters, max_bytes=max_bytes(rel))

    def load_metadata(self, problems: ProblemList | None = None) -> DatasetMetadata:
        """The dataset's metadata, its files read with `read_bytes` (`problems`: see `load_metadata`)."""
        return load_metadata(self.fs, self.root, read=self.read_bytes, problems=problems)

    def open_for_read(self, path: str) -> BinaryIO | RangeFile:
        """A seekable binary file of `path` (a path on `fs`, as `path(rel)` gives; `load_columns` passes
        these): the file itself when local, else retried range reads (`storage.ranges.open_for_read`)."""
        counters = self.cache.stats if self.cache is not None else None
        return open_for_read(self.fs, path, self.policy, counters)


def is_url(location: str) -> bool:
    return "://" in location or location.startswith("hf:")


def _filesystem(location: str, options: dict, policy: FetchPolicy) -> tuple[Any, str]:
    """(filesystem, root) of the URL `location`, with the policy's timeouts added to `options`."""
    try:
        protocol = fsspec.core.split_protocol(location)[0] or "file"
        return fsspec.core.url_to_fs(location, **timeout_options(protocol, options, policy))
    except (ImportError, ValueError) as e:
        raise DatasetFormatError(f"{location}: cannot open this URL ({e})") from None


def open_source(
    location: str | os.PathLike,
    storage_options: dict | None = None,
    cache: FileCache | None = None,
    policy: FetchPolicy | None = None,
) -> Source:
    """`location` is a local directory or any fsspec URL (http(s)://, s3://, hf://, memory://, ...)."""
    location = os.fspath(location)
    options = dict(storage_options or {})
    policy = policy or FetchPolicy()
    if is_url(location):
        fs, root = _filesystem(location, options, policy)
        return Source(
            fs=fs, root=root.rstrip("/"), cache=cache, location=location, storage_options=options, policy=policy
        )
    root = os.path.abspath(os.path.expanduser(location))
    if not os.path.isdir(root):
        raise DatasetFormatError(f"{root}: dataset directory not found")
    return Source(fs=LocalFileSystem(), root=root, cache=cache, location=root, storage_options=options, policy=policy)
