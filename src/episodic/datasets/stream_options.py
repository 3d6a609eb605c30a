"""Options of the streaming dataset, validated when the dataset is built."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..checks import check_number
from ..storage.fetch import FetchPolicy


@dataclass(frozen=True)
class StreamOptions:
    """How a streaming consumer works (none of these change which items come out, except
    `episode_pool_size`, which is part of the order).

    episode_pool_size: episodes a consumer holds at once; frames are drawn at random across them.
    chunk_size: items built per engine call when the dataset is iterated directly (`loader()` uses its
        batch size).
    prefetch_episodes: episodes whose rows and video bytes are read ahead of the pool.
    prefetch_threads: background fetch threads per consumer (remote sources), [1, 256].
    tabular_block: episodes whose rows are read in one go.
    cache_max_bytes: bytes of unreferenced mirror files a consumer keeps (remote sources).
    decoder_cache_size: open video decoders per process (None: cameras x (pool + prefetch), 16..256).
    fetch: how remote reads are retried (`storage.fetch.FetchPolicy`).
    """

    episode_pool_size: int = 64
    chunk_size: int = 32
    prefetch_episodes: int = 8
    prefetch_threads: int = 16
    tabular_block: int = 16
    cache_max_bytes: int = 4 << 30
    decoder_cache_size: int | None = None
    fetch: FetchPolicy = field(default_factory=FetchPolicy)

    def __post_init__(self):
        check_number("episode_pool_size", self.episode_pool_size, 1, integer=True)
        check_number("chunk_size", self.chunk_size, 1, integer=True)
        check_number("prefetch_episodes", self.prefetch_episodes, 0, integer=True)
        check_number("prefetch_threads", self.prefetch_threads, 1, 256, integer=True)
        check_number("tabular_block", self.tabular_block, 1, integer=True)
        check_number("cache_max_bytes", self.cache_max_bytes, 0, integer=True)
        if self.decoder_cache_size is not None:
            check_number("decoder_cache_size", self.decoder_cache_size, 1, integer=True)

    def decoders_for(self, cameras: int) -> int:
        """Open decoders per process: the option, else enough for every pooled and prefetched episode."""
        if self.decoder_cache_size is not None:
            return self.decoder_cache_size
        return min(256, max(16, cameras * (self.episode_pool_size + self.prefetch_episodes)))
