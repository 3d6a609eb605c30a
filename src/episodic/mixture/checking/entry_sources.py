"""Open every entry's source and read its metadata, many at a time: never a data file.

An entry's source is an fsspec URL (``s3://``, ``http(s)://``, ``hf://``, ...), an existing local directory, or
else a Hub repo id (``owner/name``). URLs and directories are opened with `storage.open_source` and read with
`Source.load_metadata` (info.json, episodes, tasks, stats; remote reads under the fetch policy). A Hub dataset
is read from its local copy (the entry's ``root``, else `storage.hub.hub_root`) when that has
``meta/info.json``, else only its ``meta/`` files are downloaded there (`storage.hub.download` with no
episode: no data file, no video) -- ``refresh_hub=True`` downloads them again (huggingface_hub re-checks files
already there).

`fetch_all` runs `concurrency` entries at a time in threads and returns, per entry, the source and metadata
or the exception that stopped it: one entry's failure never stops the others. With `cancel` (a
`threading.Event`) set, entries not started yet are not read (their error: `InterruptedError`). With
`keep_files`, each URL entry's metadata files are kept as they were read (`Fetched.files`: path -> bytes, or the
`MissingFileError` of an optional file that is not there), so a local copy can be written without asking again.
"""

from __future__ import annotations

import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ...format.errors import DatasetFormatError, EpisodicError, MissingFileError
from ...format.metadata import DatasetMetadata, load_metadata
from ...progress import bar
from ...storage.source import Source, is_url, open_source
from .spec import MixtureEntry

__all__ = ["Fetched", "fetch_all", "fetch_entry", "hub_dir", "source_kind"]

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
DEFAULT_CONCURRENCY = 16


def source_kind(source: str) -> str:
    """``url``, ``local`` (an existing directory, or anything path-like) or ``hub`` (an ``owner/name`` id)."""
    if is_url(source):
        return "url"
    if os.path.isdir(os.path.expanduser(source)) or source.startswith(("/", ".", "~")) or not _REPO_ID.match(source):
        return "local"
    return "hub"


def hub_dir(entry: MixtureEntry) -> Path:
    """Where a Hub entry's dataset is read from: the entry's ``root``, else `storage.hub.hub_root`."""
    from ...storage.hub import hub_root

    return Path(entry.root).expanduser() if entry.root else hub_root(entry.source, entry.revision)


@dataclass
class Fetched:
    source: Source | None = None
    meta: DatasetMetadata | None = None
    error: BaseException | None = None
    kind: str = ""
    files: dict[str, bytes | MissingFileError] | None = None  # with keep_files, for URL entries


def _kept(source: Source, files: dict[str, bytes | MissingFileError]) -> DatasetMetadata:
    """`source.load_metadata()`, each file read kept in `files`."""

    def read(rel: str) -> bytes:
        try:
            files[rel] = data = source.read_bytes(rel)
        except MissingFileError as e:  # an optional file: asking again would get the same answer
            files[rel] = e
            raise
        return data

    return load_metadata(source.fs, source.root, read=read)


def fetch_entry(entry: MixtureEntry, refresh_hub: bool = False, keep_files: bool = False) -> Fetched:
    """The entry's source and metadata, or the error (an exception is returned, never raised); `keep_files`: see
    the module docstring."""
    kind = source_kind(entry.source)
    try:
        if kind == "hub":
            from ...storage.hub import download

            local = hub_dir(entry)
            if refresh_hub or not (local / "meta" / "info.json").exists():
                download(entry.source, local, revision=entry.revision, episodes=[], progress=False)
            source = open_source(local)
        else:
            if entry.root:
                raise DatasetFormatError(
                    f"{entry.source}: 'root' (a local copy of a Hub dataset) applies to Hub "
                    f"repo ids only, this source is a {kind} one"
                )
            source = open_source(entry.source, storage_options=dict(entry.storage_options or {}))
        if keep_files and not source.is_local:
            files: dict[str, bytes | MissingFileError] = {}
            return Fetched(source=source, meta=_kept(source, files), kind=kind, files=files)
        return Fetched(source=source, meta=source.load_metadata(), kind=kind)
    except Exception as e:  # noqa: BLE001  reported as this entry's problem, the others go on
        if isinstance(e, DatasetFormatError) and kind == "local" and not os.path.exists(entry.source):
            e = DatasetFormatError(
                f"{entry.source}: not found: not a directory, an fsspec URL or a Hub repo id (owner/name)"
            )
        elif kind == "hub" and isinstance(e, EpisodicError):
            e = DatasetFormatError(f"{entry.source}: no local directory of that name, and as a Hub repo id: {e}")
        return Fetched(error=e, kind=kind)


def fetch_all(
    entries: list[MixtureEntry],
    concurrency: int = DEFAULT_CONCURRENCY,
    progress: bool = False,
    refresh_hub: bool = False,
    cancel: threading.Event | None = None,
    keep_files: bool = False,
) -> list[Fetched]:
    """`fetch_entry` for every entry, `concurrency` at a time; results in entry order (see the module docstring
    for `cancel` and `keep_files`)."""
    if not entries:
        return []

    def one(entry: MixtureEntry) -> Fetched:
        if cancel is not None and cancel.is_set():
            return Fetched(error=InterruptedError("preflight cancelled"), kind=source_kind(entry.source))
        return fetch_entry(entry, refresh_hub, keep_files)

    workers = max(1, min(int(concurrency), len(entries)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="episodic-preflight") as pool:
        results = pool.map(one, entries)
        return list(bar(results, enabled=progress, total=len(entries), desc="reading metadata", unit="entry"))
