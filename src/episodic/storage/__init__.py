"""Storage layer: where bytes come from (local paths, fsspec URLs, the Hugging Face Hub) and the local cache."""

from .cache import FileCache, default_cache_dir
from .source import Source, open_source

__all__ = ["FileCache", "Source", "default_cache_dir", "open_source"]
