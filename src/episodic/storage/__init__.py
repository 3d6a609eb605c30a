"""Storage layer: where bytes come from (local paths, fsspec URLs, the Hugging Face Hub) and the local cache."""

from .atomic import AtomicFile, atomic_path, atomic_write_bytes
from .cache import FileCache, default_cache_dir
from .fetch import FetchPolicy, with_retries
from .resolve import reopen, resolve_source
from .source import Source, open_source

__all__ = [
    "AtomicFile",
    "FetchPolicy",
    "FileCache",
    "Source",
    "atomic_path",
    "atomic_write_bytes",
    "default_cache_dir",
    "open_source",
    "reopen",
    "resolve_source",
    "with_retries",
]
