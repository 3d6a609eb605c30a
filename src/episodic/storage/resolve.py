"""Which `Source` a dataset argument means (a local directory, an fsspec URL or a Hub repo id), and the same
source opened afresh in another process."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from ..format.errors import DatasetFormatError
from ..format.paths import check_repo_id
from .cache import FileCache
from .fetch import FetchPolicy
from .hub import download, hub_root
from .source import Source, is_url, open_source

__all__ = ["reopen", "resolve_source"]

log = logging.getLogger(__name__)


def resolve_source(
    repo_id: str | None,
    root: str | os.PathLike | None,
    revision: str | None = None,
    episodes: Sequence[int] | None = None,
    video_keys: Sequence[str] | None = None,
    storage_options: dict | None = None,
    cache_dir: str | None = None,
    policy: FetchPolicy | None = None,
    cache_max_bytes: int | None = None,
) -> Source:
    """A local path or fsspec URL is used as it is; otherwise `repo_id` is fetched from the Hub (into `root`
    when given, else into the cache). Remote reads of the source, Hub downloads included, follow `policy`
    (default FetchPolicy()); whole remote files are cached under `<cache_dir>/files` (default: the episodic
    cache), at most `cache_max_bytes` of them (default `episodic.config.file_cache_max_bytes()`)."""
    cache = FileCache(Path(cache_dir) / "files" if cache_dir else None, policy=policy, max_bytes=cache_max_bytes)
    if root is not None and (is_url(os.fspath(root)) or (Path(root) / "meta" / "info.json").exists()):
        return open_source(root, storage_options=storage_options, cache=cache, policy=policy)
    if repo_id is None:
        if root is None:
            raise TypeError("a dataset needs a repo_id or a root (a directory or URL): both are None")
        return open_source(root, storage_options=storage_options, cache=cache, policy=policy)  # raises: not found
    check_repo_id(repo_id)
    if root is not None:
        local = Path(root)
        if local.is_dir() and any(local.iterdir()):  # a directory of something else: never a Hub download into it
            raise DatasetFormatError(
                f"{local}: not a dataset (no meta/info.json); Hub repo {repo_id!r} is downloaded "
                f"only into a new or empty root (check the path, or pass root=None)"
            )
        log.warning("%s: no dataset there yet: downloading Hub repo %r into it", local, repo_id)
    else:
        local = hub_root(repo_id, revision)
    # asked every time, also when a copy is on disk: huggingface_hub compares the files there with the Hub's
    # current commit and fetches only what changed (offline, it keeps the copy), so the metadata and the
    # files of a re-published dataset never come from two versions
    download(repo_id, local, revision=revision, episodes=episodes, video_keys=video_keys, policy=policy)
    return open_source(local, cache=cache, policy=policy)


def reopen(source: Source) -> Source:
    """`source` for the calling process: a remote source gets the filesystem of this process for its
    location and storage options (a forked DataLoader worker must not use its parent's async HTTP session:
    fsspec keeps one filesystem instance per process); cache and policy are kept. A local source is
    returned as it is."""
    if source.is_local:
        return source
    location = source.location or source.url("")
    return open_source(location, source.storage_options, cache=source.cache, policy=source.policy)
