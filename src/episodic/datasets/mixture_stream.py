"""Streaming over a weighted mixture: whole episodes of every entry, with the single-dataset streaming machinery.

`StreamingMixtureDataset` is a `StreamingLeRobotDataset` whose epoch is the mixture's (`order.epoch_episodes`:
each entry's frame budget from the quota sequence, spent on whole episodes in the entry's keyed order) and whose
consumers read many entries (`mixture_consumer.MixtureConsumer`: one `ConsumerPipeline` per entry while it has
episodes in the pool or read-ahead window). Everything else is the single dataset's: the plan (episodes split
over consumers, pools, exact and elastic resume: `order.stream_plan` on the epoch's ``{slot: length}``), the
`StreamState`, `loader()` (`StreamingLoader`: counting, even batches across ranks), items gathered in the
mixture's layout from the rows each entry's pipeline reads (`mixture_pool`).

The state is the stream state plus ``"mixture"`` (`order.mixture_state.MixtureState`). Resuming under a mixture
that changed since (an entry re-weighted, added, retired, ...): the interrupted epoch's remaining slots were
computed from the old mixture, so the new mixture applies from the start of the next epoch (from the saved
epoch itself when nothing of it was consumed), by the continuation rule of `order.mixture_state` (kept entries
continue their passes); a warning says so. ``on_change="refuse"`` raises `SpecChangeError` instead.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Mapping, Sequence

import numpy as np

from .. import config
from ..counters import Counters, Tally
from ..mixture.layout import MixtureLayout
from ..mixture.sampling import build_sampler
from ..order.mixture_sampler import ON_CHANGE
from ..order.mixture_state import MixtureState
from ..order.mixture_stream import EpochEpisodes, epoch_episodes
from ..order.stream_state import StreamState
from ..storage.fetch import FetchPolicy
from ..video import DecoderCache
from .facts import MixtureFacts
from .mixture import load_report
from .mixture_consumer import MixtureConsumer
from .mixture_entry import EntryEngines
from .stream_options import StreamOptions
from .streaming import StreamingLeRobotDataset

__all__ = ["StreamingMixtureDataset"]

logger = logging.getLogger(__name__)


class StreamingMixtureDataset(MixtureFacts, StreamingLeRobotDataset):
    """Items of a weighted mixture, streamed episode by episode from all entries (see the module docstring).

    `spec`: a `MixtureSpec`, a spec dict or file, or a `PreflightReport`. `image_size`/`resize_mode`,
    `return_uint8`, `image_transforms` as in `MixtureDataset`; the streaming arguments as in
    `StreamingLeRobotDataset` (`StreamOptions`). `on_change`: what `load_state_dict` does with a state saved
    under another mixture ("continue" or "refuse").
    """

    def __init__(self, spec, *, seed: int = 0, shuffle: bool = True, episode_pool_size: int = 64,
                 image_size: Sequence[int] | None = None, resize_mode: str = "stretch", return_uint8: bool = False,
                 image_transforms: Callable | None = None, rank: int | None = None, world_size: int | None = None,
                 cache_dir: str | os.PathLike | None = None, chunk_size: int = 32, prefetch_episodes: int = 8,
                 prefetch_threads: int = 16, tabular_block: int = 16, cache_max_bytes: int = 4 << 30,
                 decoder_cache_size: int | None = None, fetch_policy: FetchPolicy | None = None,
                 on_error: str | None = None, concurrency: int = 16, on_change: str = "continue"):
        if on_change not in ON_CHANGE:
            raise ValueError(f"on_change must be one of {ON_CHANGE}, got {on_change!r}")
        self.report = load_report(spec, on_error, concurrency)
        self.layout = MixtureLayout.from_report(self.report, image_size, resize_mode)
        self.sampler, used = build_sampler(self.report, seed=seed, shuffle=shuffle)
        assert used == [e.index for e in self.layout.entries], (used, self.layout.entries)
        self.options = StreamOptions(episode_pool_size=episode_pool_size, chunk_size=chunk_size,
                                     prefetch_episodes=prefetch_episodes, prefetch_threads=prefetch_threads,
                                     tabular_block=tabular_block, cache_max_bytes=cache_max_bytes,
                                     decoder_cache_size=decoder_cache_size, fetch=fetch_policy or FetchPolicy())
        self.shuffle = bool(shuffle)
        self.return_uint8 = return_uint8
        self.image_transforms = image_transforms
        self.rank, self.world_size = rank, world_size
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else str(config.cache_dir())
        self.camera_keys = self.layout.camera_keys
        self.delta_indices = None
        self.on_change = on_change
        self.changes: list[str] = []
        self.counters = Counters()
        self.decoders = self._decoder_cache()
        self.engines = EntryEngines(self.report, self.layout, self.counters, self.decoders, cache_dir)  # specs only
        self.items_per_entry = Tally(len(self.layout.entries))
        self.target_shares = np.asarray([self.report.entries[e.index].share for e in self.layout.entries])
        self.state = StreamState(seed=int(seed), episode_pool_size=self.episode_pool_size, shuffle=self.shuffle)
        self._epoch_cache: tuple | None = None

    def _decoder_cache(self) -> DecoderCache:
        return DecoderCache(max_open=self.options.decoders_for(max(len(self.layout.cameras), 1)), counters=self.counters)

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self.decoders = self._decoder_cache()
        self.engines.decoders = self.decoders

    # ------------------------------------------------------------------ sizes and facts
    @property
    def fps(self) -> None:
        """A mixture has no single fps (each entry keeps its own)."""
        return None

    # ------------------------------------------------------------------ the epoch
    def epoch_slots(self, epoch: int) -> EpochEpisodes:
        """The whole episodes streaming epoch `epoch` takes, entry by entry (`order.epoch_episodes`)."""
        key = (int(epoch), self.state.seed, self.sampler.state)
        if self._epoch_cache is None or self._epoch_cache[0] != key:
            self._epoch_cache = (key, epoch_episodes(self.sampler, int(epoch), self.state.seed))
        return self._epoch_cache[1]

    def _lengths(self, epoch: int) -> dict[int, int]:
        return self.epoch_slots(epoch).lengths()

    def _consumer(self, plan, epoch: int, mirror_base: str) -> MixtureConsumer:
        slots = self.epoch_slots(epoch)
        chosen = np.asarray(plan.episodes, dtype=np.int64)
        return MixtureConsumer(self, slots.entry[chosen], slots.episode[chosen], plan.frames, mirror_base)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """The stream state (`StreamState.to_dict`) plus ``"mixture"``: the mixture's state."""
        return {**super().state_dict(), "mixture": self.sampler.mixture_state()}

    def load_state_dict(self, state: Mapping) -> None:
        """Continue from `state`; a state saved under another mixture continues by the rule of the module
        docstring (or raises `SpecChangeError` with ``on_change="refuse"``)."""
        new = StreamState.from_dict(state)
        new.check_compatible(self.episode_pool_size, self.shuffle)
        saved = state.get("mixture")
        changed = saved is not None and not MixtureState.from_dict(saved).same_spec(self.sampler.fresh)
        if changed and (new.batches_consumed or new.history):
            if self.on_change == "continue":
                logger.warning("mixture changed since the stream state was saved: the rest of epoch %d is skipped, "
                               "the new mixture streams from epoch %d", new.epoch, new.epoch + 1)
                new = new.at_epoch(new.epoch + 1)
        self.changes = self.sampler.resume(saved, new.epoch, 0, new.seed, self.on_change)
        self.state = new

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.num_entries} entries, {self.num_frames} frames, pool "
                f"{self.episode_pool_size}, cameras={list(self.layout.cameras)})")
