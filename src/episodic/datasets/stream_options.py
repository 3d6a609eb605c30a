"""Options of the streaming dataset, validated when the dataset is built."""

from __future__ import annotations

from dataclasses import dataclass


def _check(name: str, value, low, high=None, kind=int) -> None:
    ok = (not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else int)
          and value >= low and (high is None or value <= high))
    if not ok:
        rng = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {'a number' if kind is float else 'an int'} {rng}, got {value!r}")


@dataclass(frozen=True)
class StreamOptions:
    """How a streaming consumer works (none of these change which items come out, except
    `episode_pool_size`, which is part of the order).

    episode_pool_size: episodes a consumer holds at once; frames are drawn at random across them.
    chunk_size: items built per engine call when the dataset is iterated directly (`loader()` uses its
        batch size).
    prefetch_episodes: episodes whose rows and video bytes are read ahead of the pool.
    prefetch_threads: background fetch threads per consumer (remote sources).
    tabular_block: episodes whose rows are read in one go.
    cache_max_bytes: bytes of unreferenced mirror files a consumer keeps (remote sources).
    decoder_cache_size: open video decoders per process (None: cameras x (pool + prefetch), 16..256).
    fetch_retries, fetch_backoff_s, fetch_max_backoff_s: retries of a failed remote read, with capped
        exponential backoff.
    """

    episode_pool_size: int = 64
    chunk_size: int = 32
    prefetch_episodes: int = 8
    prefetch_threads: int = 16
    tabular_block: int = 16
    cache_max_bytes: int = 4 << 30
    decoder_cache_size: int | None = None
    fetch_retries: int = 8
    fetch_backoff_s: float = 0.05
    fetch_max_backoff_s: float = 2.0

    def __post_init__(self):
        _check("episode_pool_size", self.episode_pool_size, 1)
        _check("chunk_size", self.chunk_size, 1)
        _check("prefetch_episodes", self.prefetch_episodes, 0)
        _check("prefetch_threads", self.prefetch_threads, 1, 256)
        _check("tabular_block", self.tabular_block, 1)
        _check("cache_max_bytes", self.cache_max_bytes, 0)
        if self.decoder_cache_size is not None:
            _check("decoder_cache_size", self.decoder_cache_size, 1)
        _check("fetch_retries", self.fetch_retries, 0, 100)
        _check("fetch_backoff_s", self.fetch_backoff_s, 0, 60, float)
        _check("fetch_max_backoff_s", self.fetch_max_backoff_s, 0, 600, float)

    def decoders_for(self, cameras: int) -> int:
        """Open decoders per process: the option, else enough for every pooled and prefetched episode."""
        if self.decoder_cache_size is not None:
            return self.decoder_cache_size
        return min(256, max(16, cameras * (self.episode_pool_size + self.prefetch_episodes)))
