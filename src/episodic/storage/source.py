"""Resolve a dataset location (local path, fsspec URL, Hub repo id) to an fsspec filesystem and a root."""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ..format.errors import DatasetFormatError
from .cache import FileCache


@dataclass
class Source:
    """An fsspec filesystem and the dataset root on it, plus a cache that makes remote files local."""

    fs: Any
    root: str
    cache: FileCache | None = None

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def path(self, rel: str) -> str:
        return posixpath.join(self.root, rel)

    def local_path(self, rel: str) -> str:
        """A local file with the bytes of `rel`: the file itself when local, else a cached copy."""
        if self.is_local:
            return self.path(rel)
        if self.cache is None:
            self.cache = FileCache()
        return self.cache.fetch(self.fs, self.path(rel))

    def url(self, rel: str) -> str:
        return self.fs.unstrip_protocol(self.path(rel)) if not self.is_local else self.path(rel)


def is_url(location: str) -> bool:
    return "://" in location or location.startswith("hf:")


def open_source(location: str | os.PathLike, storage_options: dict | None = None, cache: FileCache | None = None) -> Source:
    """`location` is a local directory or any fsspec URL (http(s)://, s3://, hf://, memory://, ...)."""
    location = os.fspath(location)
    if is_url(location):
        try:
            fs, root = fsspec.core.url_to_fs(location, **(storage_options or {}))
        except (ImportError, ValueError) as e:
            raise DatasetFormatError(f"{location}: cannot open this URL ({e})") from None
        return Source(fs=fs, root=root.rstrip("/"), cache=cache)
    root = os.path.abspath(os.path.expanduser(location))
    if not os.path.isdir(root):
        raise DatasetFormatError(f"{root}: dataset directory not found")
    return Source(fs=LocalFileSystem(), root=root, cache=cache)
