"""Options of the streaming datasets, validated when the dataset is built."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ..checks import check_number
from ..storage.fetch import FetchPolicy
from ..video.decoder_cache import CacheRule

__all__ = ["StreamOptions", "UNSET", "stream_options"]


@dataclass(frozen=True)
class StreamOptions:
    """How a streaming consumer works (none of these change which items come out, except
    `episode_pool_size`, which is part of the order).

    episode_pool_size: episodes a consumer holds at once; frames are drawn at random across them.
    chunk_size: items built per batch when the dataset is iterated directly (`loader()` uses its batch size).
    prefetch_episodes: episodes whose rows and video bytes are read ahead of the pool.
    prefetch_threads: background fetch threads per consumer (remote sources), [1, 256].
    tabular_block: episodes whose rows are read in one go.
    mirror_max_bytes: bytes of unreferenced files a consumer keeps in its private mirror of a remote source
        (the map-style datasets' `cache_max_bytes` bounds their shared whole-file cache instead).
    decoder_cache_size: open video decoders per process (None: `video.decoder_cache.default_cache_size` of the files a
        consumer reads from at once: each camera's pooled and prefetched episodes).
    fetch: how remote reads are retried (`storage.fetch.FetchPolicy`).
    """

    episode_pool_size: int = 64
    chunk_size: int = 32
    prefetch_episodes: int = 8
    prefetch_threads: int = 16
    tabular_block: int = 16
    mirror_max_bytes: int = 4 << 30
    decoder_cache_size: int | None = None
    fetch: FetchPolicy = field(default_factory=FetchPolicy)

    def __post_init__(self):
        check_number("episode_pool_size", self.episode_pool_size, 1, integer=True)
        check_number("chunk_size", self.chunk_size, 1, integer=True)
        check_number("prefetch_episodes", self.prefetch_episodes, 0, integer=True)
        check_number("prefetch_threads", self.prefetch_threads, 1, 256, integer=True)
        check_number("tabular_block", self.tabular_block, 1, integer=True)
        check_number("mirror_max_bytes", self.mirror_max_bytes, 0, integer=True)
        if self.decoder_cache_size is not None:
            check_number("decoder_cache_size", self.decoder_cache_size, 1, integer=True)
        if not isinstance(self.fetch, FetchPolicy):
            raise TypeError(f"fetch must be a storage.FetchPolicy, got {type(self.fetch).__name__}")

    def decoders_for(self, cameras: Sequence[tuple[int, int]]) -> int | CacheRule:
        """Open decoders per process: the option, else one per pooled and prefetched episode of each camera
        (`cameras`: (height, width) of each), within the decoder memory budget of the process that decodes
        (`video.decoder_cache.CacheRule`)."""
        if self.decoder_cache_size is not None:
            return self.decoder_cache_size
        reach = self.episode_pool_size + self.prefetch_episodes
        return CacheRule(tuple((h, w, reach) for h, w in cameras))


class _Unset:
    def __repr__(self) -> str:
        return "<default>"


# a streaming constructor's tuning argument that was not given; typed Any: it is the default of arguments of every type
UNSET: Any = _Unset()


def stream_options(options: StreamOptions | None, cache_max_bytes=UNSET, **given) -> StreamOptions:
    """The options of a streaming dataset: `options` as given, or a `StreamOptions` of the tuning arguments that
    were given (`UNSET` ones take its defaults), not both. `cache_max_bytes`: the earlier name of
    `mirror_max_bytes`."""
    if cache_max_bytes is not UNSET:
        warnings.warn(
            "cache_max_bytes of a streaming dataset is renamed mirror_max_bytes (cache_max_bytes is the "
            "map-style datasets' whole-file cache)",
            DeprecationWarning,
            stacklevel=3,
        )
        if given.get("mirror_max_bytes", UNSET) is UNSET:
            given["mirror_max_bytes"] = cache_max_bytes
    given = {k: v for k, v in given.items() if v is not UNSET}
    unknown = set(given) - {f.name for f in fields(StreamOptions)}
    if unknown:
        raise TypeError(f"unknown streaming options {sorted(unknown)}")
    if options is None:
        return StreamOptions(**given)
    if not isinstance(options, StreamOptions):
        raise TypeError(f"options must be a StreamOptions, got {type(options).__name__}")
    if given:
        raise ValueError(f"give options=StreamOptions(...) or its fields {sorted(given)}, not both")
    return options
