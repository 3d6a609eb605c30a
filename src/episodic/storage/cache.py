"""A local file cache for remote bytes: atomic writes (temp name, then rename), safe across processes."""

from __future__ import annotations

import hashlib
import os
import posixpath
import time
from pathlib import Path

from .. import config
from .atomic import atomic_write_bytes
from ..counters import Counters
from ..format.paths import cache_name, inside
from .fetch import FetchPolicy, fetch_bytes


def default_cache_dir() -> Path:
    """Root of episodic's cache (see `episodic.config.cache_dir`)."""
    return config.cache_dir()


class FileCache:
    """Whole-file cache keyed by URL. Concurrent fetches of one file by several processes are harmless: each
    writes its own temporary file and the renames are atomic. Fetches follow `policy` (default
    `FetchPolicy()`) and are counted in `stats`."""

    def __init__(self, directory: str | os.PathLike | None = None, policy: FetchPolicy | None = None,
                 stats: Counters | None = None):
        self.directory = Path(directory) if directory else default_cache_dir() / "files"
        self.policy = policy
        self.stats = stats if stats is not None else Counters()

    @property
    def bytes_fetched(self) -> int:
        return self.stats.bytes_fetched

    @property
    def fetch_seconds(self) -> float:
        return self.stats.fetch_seconds

    @property
    def retry_count(self) -> int:
        return self.stats.retries

    def key_path(self, url: str) -> Path:
        """The cache file of `url`: a digest of the URL, then its base name made safe (format.paths.cache_name:
        the URL is untrusted text), inside the cache directory."""
        digest = hashlib.sha1(url.encode()).hexdigest()[:16]
        name = f"{digest}-{cache_name(posixpath.basename(url))}"
        return Path(inside(self.directory, f"{digest[:2]}/{name}", f"cache file of {url}"))

    def fetch(self, fs, path: str, policy: FetchPolicy | None = None) -> str:
        """A local copy of `path` on `fs` (fetched once, under `policy`, else the cache's own)."""
        url = fs.unstrip_protocol(path)
        local = self.key_path(url)
        if local.exists():
            return str(local)
        t0 = time.perf_counter()
        data = fetch_bytes(fs, path, url, policy or self.policy, self.stats)
        atomic_write_bytes(local, data)
        self.stats.add(bytes_fetched=len(data), fetch_seconds=time.perf_counter() - t0, files_fetched=1)
        return str(local)
