"""Local copies of remote datasets (fsspec URLs) in episodic's cache: the metadata and the data and video files
asked for, each fetched once, then read from disk with no request at all.

A copy (`DatasetCopy`) lives in `cache.copy_dir(url)` and has the dataset's own layout (``meta/``, ``data/``,
``videos/``), so it opens as a local dataset (`open_source(copy.directory)`), plus a hidden ``.episodic-copy/``:

- ``state.json``: the URL, the fingerprint of the metadata the copy holds (`metadata_fingerprint`) and its
  metadata files with their sizes; written last when the metadata is fetched (atomic).
- ``files.jsonl``: one line per data or video file fetched (path, size, the server's version of it), appended
  after the file is in place. A torn last line (a killed process) is ignored.

A file is present when its line is there and the file on disk has that size: `missing` decides from the disk
alone, never asking the server, not even for a size or a version. The metadata is trusted while its fingerprint
equals the one of the metadata the caller read (a mixture's preflight, from the server): when the dataset was
re-published with other metadata, `fetch_meta` fetches the metadata again and starts the file list afresh
(the older files are fetched again as they are asked for; writes are atomic, so a process still reading an
old file is not disturbed). A file re-published with the same metadata is not noticed (no request is made to
find out): pin Hub datasets to a commit, or delete the copy.

Fetches follow the source's fetch policy (`fetch.fetch_to_file`: streamed to a temporary file, renamed when
complete, retried, Retry-After honoured); concurrent fetches of one file, by threads or processes, each write
their own temporary file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..format.errors import DatasetFormatError, MissingFileError
from ..format.metadata import V21_EPISODE_STATS, DatasetMetadata, load_metadata
from ..format.paths import inside
from .atomic import atomic_write_bytes
from .cache import copy_dir
from .fetch import fetch_to_file, file_info
from .source import Source
from .versions import version_token

__all__ = ["DatasetCopy", "metadata_fingerprint"]

logger = logging.getLogger(__name__)

_STATE = ".episodic-copy/state.json"
_FILES = ".episodic-copy/files.jsonl"


def metadata_fingerprint(meta: DatasetMetadata) -> str:
    """A digest of everything in `meta` that decides what a dataset's items are and which files hold them: info,
    tasks, the episodes table (lengths, indices, tasks, data files, each camera's files and times) and the
    statistics. Equal for the same metadata read from a server or from a local copy."""
    h = hashlib.sha256()

    def add(value: Any) -> None:
        if isinstance(value, np.ndarray) and value.dtype != object:
            h.update(f"{value.dtype.str}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        else:
            h.update(json.dumps(value, sort_keys=True, default=str).encode())
        h.update(b"\0")

    ep = meta.episodes
    for value in (
        meta.info.to_dict(),
        list(meta.tasks),
        ep.length,
        ep.dataset_from_index,
        ep.dataset_to_index,
        [list(t or []) for t in ep.tasks],
        list(ep.data_files),
        ep.data_file_id,
    ):
        add(value)
    for key in sorted(ep.cameras):
        cam = ep.cameras[key]
        for part in (key, list(cam.files), cam.file_id, cam.from_ts, cam.to_ts):
            add(part)
    for feature in sorted(meta.stats or {}):
        for stat in sorted(meta.stats[feature]):
            add(f"{feature}/{stat}")
            add(np.asarray(meta.stats[feature][stat]))
    return h.hexdigest()


class DatasetCopy:
    """The local copy of the remote dataset read by `source` (in `directory`, default `cache.copy_dir` of its
    URL). Thread-safe: `fetch_file` may run on many threads at once."""

    def __init__(self, source: Source, directory: str | os.PathLike | None = None):
        if source.is_local:
            raise ValueError(f"{source.root}: a local dataset needs no copy")
        self.source = source
        self.url = (source.location or source.url("")).rstrip("/")
        self.directory = Path(directory) if directory is not None else copy_dir(self.url)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"DatasetCopy({self.url!r} -> {str(self.directory)!r})"

    def path(self, rel: str) -> Path:
        """Where `rel` (a dataset path) is in the copy; UnsafePathError when it would leave it."""
        return Path(inside(self.directory, rel, f"local copy of {self.url}"))

    # ------------------------------------------------------------------ what is there (disk only)
    def _state(self) -> dict | None:
        try:
            state = json.loads((self.directory / _STATE).read_text())
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) and state.get("url") == self.url else None

    def meta_current(self, fingerprint: str) -> bool:
        """The copy holds the metadata whose fingerprint is `fingerprint`, every file of it at its size."""
        state = self._state()
        if state is None or state.get("fingerprint") != fingerprint:
            return False
        return all(_size(self.path(rel)) == size for rel, size in (state.get("meta") or {}).items())

    def _recorded(self) -> dict[str, int]:
        """rel -> size of the files fetched since the metadata was (last line of a path wins)."""
        out: dict[str, int] = {}
        try:
            lines = (self.directory / _FILES).read_text().splitlines()
        except OSError:
            return out
        for line in lines:
            try:
                row = json.loads(line)
                out[str(row["path"])] = int(row["size"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn line (a process killed while appending)
        return out

    def missing(self, rels: list[str]) -> list[str]:
        """The files of `rels` that are not present (recorded, and on disk at the recorded size). No request."""
        recorded = self._recorded()
        return [rel for rel in dict.fromkeys(rels) if rel not in recorded or _size(self.path(rel)) != recorded[rel]]

    # ------------------------------------------------------------------ fetching
    def fetch_meta(
        self, fingerprint: str | None = None, files: dict[str, bytes | BaseException] | None = None
    ) -> DatasetMetadata:
        """Fetch the dataset's metadata files into the copy (and forget the files fetched before: they belong to
        older metadata). With `fingerprint`, the metadata fetched must have it (else DatasetFormatError: the
        dataset changed since it was read). `files`: metadata files read already (path -> bytes, or the error
        reading it raised), written as they are instead of being asked for again. Returns the metadata fetched."""
        sizes: dict[str, int] = {}

        def read(rel: str) -> bytes:  # MissingFileError for optional files: load_metadata decides
            held = files.get(rel) if files is not None else None
            if isinstance(held, BaseException):
                raise held
            data = held if held is not None else self.source.read_bytes(rel)
            atomic_write_bytes(self.path(rel), data)
            sizes[rel] = len(data)
            return data

        self.path(_FILES).parent.mkdir(parents=True, exist_ok=True)
        for name in (_STATE, _FILES):
            try:
                os.unlink(self.path(name))
            except FileNotFoundError:
                pass
        meta = load_metadata(self.source.fs, self.source.root, read=read)
        if meta.info.is_v21 and V21_EPISODE_STATS not in sizes:  # read on demand by DatasetMetadata.episode_stats
            try:
                read(V21_EPISODE_STATS)
            except MissingFileError:
                pass
        got = metadata_fingerprint(meta)
        if fingerprint is not None and got != fingerprint:
            raise DatasetFormatError(
                f"{self.url}: the dataset's metadata changed since it was checked (preflight); check the mixture again"
            )
        state = {"url": self.url, "fingerprint": got, "meta": sizes}
        atomic_write_bytes(self.path(_STATE), json.dumps(state, indent=1).encode())
        return meta

    def fetch_file(self, rel: str) -> int:
        """Fetch the data or video file `rel` into the copy (its size and version asked first, then its bytes,
        streamed and checked), record it, and return its size."""
        src = self.source
        remote, url = src.path(rel), src.url(rel)
        counters = src.cache.stats if src.cache is not None else None
        info = file_info(src.fs, remote, url, src.policy, counters)
        size = info.get("size")
        n = fetch_to_file(
            src.fs, remote, url, self.path(rel), src.policy, counters, size=int(size) if size is not None else None
        )
        line = json.dumps({"path": rel, "size": n, "version": version_token(info)}) + "\n"
        with self._lock, open(self.directory / _FILES, "a") as f:  # one write: O_APPEND keeps lines whole
            f.write(line)
        if counters is not None:
            counters.add(bytes_fetched=n, files_fetched=1)
        return n


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
