"""A local cache of whole remote files: keyed by URL and version, bounded, safe across processes.

- Versions: a file's key is its URL plus what identifies its version on the server (size, ETag,
  Last-Modified, ...: `versions.version_token`), asked once per file and `FileCache` (a dataset's cache) in
  each process. A re-published file gets a new key, so a dataset read again after its files changed never
  pairs new rows with old cached frames; the old copy ages out.
- Names: `<2 hex>/<32 hex><.ext>`, a digest of URL and version plus the file's extension when it is short
  and plain; nothing else of the URL reaches the file system.
- Writes are atomic (`storage.atomic`): concurrent fetches of one file by several processes each write
  their own temporary file, and the renames are atomic.
- Bound: after each fetch, while the files hold more than `max_bytes`, the least recently used are
  deleted (use = the file's mtime, touched every time a process asks for it), except files used in the
  last `grace_s` seconds (a process may be about to open them: the bound is soft while they exceed it).
  One process evicts at a time (an advisory lock); a deleted file that a process still has open stays
  readable there, and a process that finds its copy gone fetches it again. Temporary files left behind by
  killed processes are deleted after an hour.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import re
import time
from pathlib import Path

try:
    import fcntl

    _FLOCK = True
except ImportError:  # pragma: no cover - not POSIX: evictions are not serialised (unlinks stay idempotent)
    _FLOCK = False

from .. import config
from ..counters import Counters
from ..format.paths import cache_name, inside
from .atomic import atomic_write_bytes
from .fetch import FetchPolicy, fetch_bytes, file_info
from .versions import version_token

__all__ = ["FileCache", "copy_dir", "default_cache_dir"]

logger = logging.getLogger(__name__)

STALE_TEMP_S = 3600.0  # a temporary file this old belongs to a process that died
_PLAIN_EXT = re.compile(r"\.[A-Za-z0-9]{1,8}")


def default_cache_dir() -> Path:
    """Root of episodic's cache (see `episodic.config.cache_dir`)."""
    return config.cache_dir()


def copy_dir(location: str, base: str | os.PathLike | None = None) -> Path:
    """Where the local copy of the remote dataset at `location` (an fsspec URL; `storage.copies`) is kept:
    `<base>/<name>-<digest of the URL>`, `base` by default `<episodic cache>/copies`. Copies hold whole files a
    mixture's start-up fetched and are not evicted by the bound of the file cache (delete a copy to reclaim it)."""
    url = location.rstrip("/")
    digest = hashlib.sha256(url.encode()).hexdigest()[:24]
    name = cache_name(posixpath.basename(url) or "dataset", 40)
    base = Path(base) if base is not None else default_cache_dir() / "copies"
    return Path(inside(base, f"{name}-{digest}", f"local copy of {url}"))


class FileCache:
    """Whole-file cache of remote files under `directory` (default `<episodic cache>/files`), at most about
    `max_bytes` (default `episodic.config.file_cache_max_bytes()`, 32 GiB) of them. Fetches follow `policy`
    (default `FetchPolicy()`) and are counted in `stats`."""

    def __init__(
        self,
        directory: str | os.PathLike | None = None,
        policy: FetchPolicy | None = None,
        stats: Counters | None = None,
        max_bytes: int | None = None,
        grace_s: float = 60.0,
    ):
        self.directory = Path(directory) if directory else default_cache_dir() / "files"
        self.policy = policy
        self.stats = stats if stats is not None else Counters()
        self.max_bytes = config.file_cache_max_bytes() if max_bytes is None else int(max_bytes)
        if self.max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes!r}")
        self.grace_s = float(grace_s)
        self._known: dict[str, str] = {}  # url -> local path whose version this process has checked

    @property
    def bytes_fetched(self) -> int:
        return self.stats.bytes_fetched

    @property
    def fetch_seconds(self) -> float:
        return self.stats.fetch_seconds

    @property
    def retry_count(self) -> int:
        return self.stats.retries

    def key_path(self, url: str, version: str) -> Path:
        """Where the file at `url` in version `version` (`versions.version_token`) is kept: a digest of both, plus
        the URL's extension when it is plain (no other URL text reaches the file system), inside the cache."""
        digest = hashlib.sha256(f"{url}\n{version}".encode()).hexdigest()[:32]
        ext = posixpath.splitext(posixpath.basename(url))[1]
        name = digest + (ext if _PLAIN_EXT.fullmatch(ext) else "")
        return Path(inside(self.directory, f"{digest[:2]}/{name}", f"cache file of {url}"))

    def fetch(self, fs, path: str, policy: FetchPolicy | None = None) -> str:
        """A local copy of the current version of `path` on `fs` (its version asked once per process,
        fetched once, under `policy`, else the cache's own)."""
        url = fs.unstrip_protocol(path)
        local = self._known.get(url)
        if local is not None and _touch(local):
            return local
        policy = policy or self.policy
        info = file_info(fs, path, url, policy, self.stats)
        local = str(self.key_path(url, version_token(info)))
        if not _touch(local):
            t0 = time.perf_counter()
            size = info.get("size")
            data = fetch_bytes(fs, path, url, policy, self.stats, size=int(size) if size is not None else None)
            atomic_write_bytes(local, data)
            self.stats.add(bytes_fetched=len(data), fetch_seconds=time.perf_counter() - t0, files_fetched=1)
            self.evict(keep=local)
        self._known[url] = local
        return local

    def evict(self, keep: str | None = None) -> int:
        """Delete least recently used files while the cache holds more than `max_bytes` (never `keep`, nor
        files used in the last `grace_s` seconds), and temporary files of dead processes. Returns the
        number of files deleted. Skipped when another process is evicting."""
        if not self.directory.is_dir():
            return 0
        if not _FLOCK:
            return self._evict_locked(keep)
        with open(self.directory / ".evict.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0
            try:
                return self._evict_locked(keep)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _evict_locked(self, keep: str | None) -> int:
        now = time.time()
        files: list[tuple[float, int, str]] = []  # (last use, bytes, path)
        deleted = 0
        for sub in os.scandir(self.directory):
            if not sub.is_dir(follow_symlinks=False):
                continue
            for entry in os.scandir(sub.path):
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if entry.name.startswith("."):
                    if entry.name.endswith(".tmp") and now - st.st_mtime > STALE_TEMP_S:
                        deleted += _unlink(entry.path)
                    continue
                files.append((st.st_mtime, st.st_blocks * 512 if st.st_blocks else st.st_size, entry.path))
        total = sum(n for _, n, _ in files)
        for used, n, path in sorted(files):
            if total <= self.max_bytes:
                break
            if path == keep or now - used < self.grace_s:
                continue
            if _unlink(path):
                total -= n
                deleted += 1
                self.stats.add(cache_evictions=1)
        if total > self.max_bytes:
            logger.info(
                "%s: %d bytes in use, above the cache size of %d bytes (files used in the last %g s are kept)",
                self.directory,
                total,
                self.max_bytes,
                self.grace_s,
            )
        return deleted


def _touch(path: str) -> bool:
    """Mark `path` used now; False when it does not exist."""
    try:
        os.utime(path)
        return True
    except FileNotFoundError:
        return False


def _unlink(path: str) -> int:
    try:
        os.unlink(path)
        return 1
    except FileNotFoundError:
        return 0
