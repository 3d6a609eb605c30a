"""Which version of a file is there, without reading it: a remote file's `version_token` (its size and ETag,
Last-Modified, ... from `fetch.file_info`), either kind's `file_identity`. The storage cache keys its copies by
version; the statistics cache and fleet provenance tell a file's versions apart with `file_identity`."""

from __future__ import annotations

import os

from .fetch import FetchPolicy, file_info, is_local

__all__ = ["file_identity", "version_token"]


# what identifies a remote file's version in fsspec's `info` (HTTP headers, S3, GCS, Azure, the Hub)
_VERSION_KEYS = (
    "ETag",
    "etag",
    "Last-Modified",
    "LastModified",
    "last_modified",
    "mtime",
    "generation",
    "md5Hash",
    "crc32c",
    "content_md5",
    "blob_id",
    "sha256",
    "lfs",
    "last_commit",
    "VersionId",
)


def version_token(info: dict) -> str:
    """A string that changes when the remote file described by `info` (`file_info`) changes: its size and
    whatever identifies its version (ETag, Last-Modified, ...). With the size alone (a server that sends
    neither ETag nor Last-Modified) a new file of the same size cannot be told from the old one."""
    parts = [f"size={info.get('size')}"]
    parts += [f"{k}={info[k]}" for k in _VERSION_KEYS if info.get(k) not in (None, "")]
    return "\n".join(parts)


def file_identity(fs, path: str, policy: FetchPolicy | None = None) -> list:
    """What tells a file's versions apart, without reading it: a local file's size and modification time (ns),
    a remote one's `version_token` (one metadata request). A local file that does not exist raises
    FileNotFoundError."""
    if is_local(fs):
        st = os.stat(path)
        return [int(st.st_size), int(st.st_mtime_ns)]
    return [version_token(file_info(fs, path, fs.unstrip_protocol(path), policy))]
