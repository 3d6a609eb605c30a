"""A local file cache for remote bytes: atomic writes (temp name, then rename), safe across processes."""

from __future__ import annotations

import hashlib
import os
import posixpath
import time
from pathlib import Path

from .. import config
from ..format.errors import DatasetFormatError
from .atomic import atomic_write_bytes  # noqa: F401 -- also imported from here by datasets/streaming.py


def default_cache_dir() -> Path:
    """Root of episodic's cache (see `episodic.config.cache_dir`)."""
    return config.cache_dir()


class FileCache:
    """Whole-file cache keyed by URL. Concurrent fetches of one file by several processes are harmless: each
    writes its own temporary file and the renames are atomic."""

    def __init__(self, directory: str | os.PathLike | None = None, retries: int = 5, backoff_s: float = 0.1):
        self.directory = Path(directory) if directory else default_cache_dir() / "files"
        self.retries = retries
        self.backoff_s = backoff_s
        self.bytes_fetched = 0
        self.fetch_seconds = 0.0
        self.retry_count = 0

    def key_path(self, url: str) -> Path:
        digest = hashlib.sha1(url.encode()).hexdigest()[:16]
        return self.directory / digest[:2] / f"{digest}-{posixpath.basename(url)}"

    def fetch(self, fs, path: str) -> str:
        url = fs.unstrip_protocol(path)
        local = self.key_path(url)
        if local.exists():
            return str(local)
        t0 = time.perf_counter()
        data = self._read_with_retries(fs, path, url)
        atomic_write_bytes(local, data)
        self.bytes_fetched += len(data)
        self.fetch_seconds += time.perf_counter() - t0
        return str(local)

    def _read_with_retries(self, fs, path: str, url: str) -> bytes:
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                with fs.open(path, "rb") as f:
                    data = f.read()
                size = fs.size(path) if hasattr(fs, "size") else None
                if size is not None and len(data) != size:
                    raise OSError(f"truncated read: {len(data)} of {size} bytes")
                return data
            except FileNotFoundError:
                raise DatasetFormatError(f"{url}: file not found") from None
            except Exception as e:  # transient network errors: retry with capped exponential backoff
                if attempt == self.retries:
                    raise DatasetFormatError(f"{url}: cannot fetch after {attempt + 1} attempts ({e})") from None
                self.retry_count += 1
                time.sleep(delay * (0.5 + os.urandom(1)[0] / 255))
                delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")
