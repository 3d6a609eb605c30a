"""Streaming: an IterableDataset that reads a LeRobot-format dataset episode by episode (docs/streaming.md).

Who does what: the order (which episodes each consumer gets, the order it emits their frames in, what a
resume skips) is pure arithmetic in `order/` (`stream_plan`, `pool_order`); the position of the trainer
is a `StreamState` value; one consumer's reads and item building are `stream_pipeline.ConsumerPipeline`;
items are built by the same `FrameEngine` as map-style, so an item equals `LeRobotDataset(...)[i]` for the
same frame. This module ties them together: the dataset (construction, sizes, state, counters) and its
`StreamingLoader` (a DataLoader that counts the batches it hands out).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Iterator, Mapping, Sequence

import torch

from .. import config, runtime
from ..counters import Counters
from ..format.metadata import DatasetMetadata
from ..order.pool_order import PoolOrder
from ..order.shard import resolve_topology
from ..order.stream_keys import consumer_rng
from ..order.stream_plan import consumer_plan, segment_batches, split_problems
from ..order.stream_state import StreamState
from ..storage.fetch import FetchPolicy
from ..storage.resolve import reopen, resolve_source
from ..storage.source import Source
from ..video import DecoderCache
from .collate import TensorSharing, deliver, make_batch, unbatch
from .facts import DatasetFacts
from .engine import ItemSpec, select_episodes
from .stream_options import StreamOptions
from .stream_pipeline import ConsumerPipeline, iterate_consumer

__all__ = ["StreamingLeRobotDataset", "StreamingLoader"]


@dataclass(frozen=True)
class _Iteration:
    """What one iteration of the dataset runs from (a snapshot the DataLoader's workers receive)."""

    state: StreamState  # with the open segment of this iteration's topology
    chunk_size: int
    whole_batches: bool = False  # hand out numpy batches as they are (loader()), not items
    sharing: TensorSharing = field(default_factory=TensorSharing)
    even_batches: bool = False


class StreamingLeRobotDataset(DatasetFacts, torch.utils.data.IterableDataset):
    """Frames of a LeRobot-format dataset, streamed episode by episode, with exact windows and exact resume.

    Every item equals `LeRobotDataset(repo_id, root=root, ...)[i]` for the frame it holds. Each consumer
    (rank x DataLoader worker) gets whole episodes, keeps up to `episode_pool_size` of them in RAM and
    emits their frames in a random order that is a pure function of (seed, epoch, topology); every frame
    of the selected episodes is emitted exactly once per epoch across all consumers.

    Use `dataset.loader(batch_size, num_workers)` (a counting DataLoader wrapper) to get `state_dict()`,
    `load_state_dict()` and automatic epoch advance; `set_epoch(e)` starts epoch `e` from its beginning.
    Remote sources (any fsspec URL) are read by byte ranges, only what the consumer's episodes need (see
    `stream_pipeline`), into a private per-consumer mirror under `<cache_dir>/streaming` (`cache_dir`: the
    episodic cache, default ~/.cache/episodic); local sources are read in place. The tuning arguments are
    those of `StreamOptions` (validated; the error states the allowed range). Remote reads follow
    `fetch_policy` (`storage.fetch.FetchPolicy`: timeouts, retry window) when given, else a FetchPolicy of
    `fetch_retries`, `fetch_backoff_s` and `fetch_max_backoff_s`. `on_unknown_task` as in `EpisodicDataset`
    (rows are read as episodes are streamed, so the one warning comes from the consumer that first reads such
    a row, naming what it read; each DataLoader worker process warns at most once).
    """

    def __init__(self, repo_id: str | None, root: str | os.PathLike | None = None, episodes: Sequence[int] | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, tolerance_s: float = 1e-4,
                 episode_pool_size: int = 64, shuffle: bool = True, seed: int = 0, return_uint8: bool = False,
                 video_keys: Sequence[str] | None = None, cache_dir: str | os.PathLike | None = None,
                 cache_max_bytes: int = 4 << 30, decoder_cache_size: int | None = None,
                 rank: int | None = None, world_size: int | None = None, image_transforms: Callable | None = None,
                 revision: str | None = None, storage_options: dict | None = None, chunk_size: int = 32,
                 prefetch_episodes: int = 8, prefetch_threads: int = 16, tabular_block: int = 16,
                 fetch_retries: int | None = None, fetch_backoff_s: float = 0.05, fetch_max_backoff_s: float = 2.0,
                 video_decoder_cache_size: int | None = None, fetch_policy: FetchPolicy | None = None,
                 image_size: Sequence[int] | None = None, resize_mode: str = "stretch",
                 on_unknown_task: str = "warn"):
        if video_decoder_cache_size is not None:
            warnings.warn("video_decoder_cache_size is renamed decoder_cache_size (as in LeRobotDataset/EpisodicDataset)",
                          DeprecationWarning, stacklevel=2)
            decoder_cache_size = decoder_cache_size or video_decoder_cache_size
        self.options = StreamOptions(episode_pool_size=episode_pool_size, chunk_size=chunk_size,
                                     prefetch_episodes=prefetch_episodes, prefetch_threads=prefetch_threads,
                                     tabular_block=tabular_block, cache_max_bytes=cache_max_bytes,
                                     decoder_cache_size=decoder_cache_size,
                                     fetch=fetch_policy or FetchPolicy(retries=fetch_retries, backoff_s=fetch_backoff_s,
                                                                       max_backoff_s=fetch_max_backoff_s))
        self.repo_id, self.root, self.episodes = repo_id, root, episodes
        self.source: Source = resolve_source(repo_id, root, revision, episodes, video_keys, storage_options, None,
                                             policy=self.options.fetch)
        self.meta: DatasetMetadata = self.source.load_metadata()
        self.delta_timestamps = dict(delta_timestamps) if delta_timestamps else None
        self.tolerance_s = tolerance_s
        self.shuffle = bool(shuffle)
        self.return_uint8 = return_uint8
        self.image_transforms = image_transforms
        self.rank, self.world_size = rank, world_size
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else str(config.cache_dir())
        self.spec = ItemSpec.build(self.meta, delta_timestamps, tolerance_s, video_keys, image_size, resize_mode,
                                   on_unknown_task=on_unknown_task)
        self.selected = select_episodes(self.meta, episodes)
        self.camera_keys = self.spec.camera_keys
        self.delta_indices = self.spec.delta_indices if delta_timestamps is not None else None
        self.counters = Counters()
        self.decoders = DecoderCache(max_open=self.options.decoders_for(len(self.spec.video_keys)), counters=self.counters)
        # the trainer's position (what state_dict() returns); per-iteration data travels in `_Iteration`
        self.state = StreamState(seed=int(seed), episode_pool_size=self.episode_pool_size, shuffle=self.shuffle)

    def __getstate__(self) -> dict:  # for spawn/forkserver workers: no open decoders
        return {**self.__dict__, "decoders": None}

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self.decoders = DecoderCache(max_open=self.options.decoders_for(len(self.spec.video_keys)), counters=self.counters)

    # ------------------------------------------------------------------ sizes
    @property
    def episode_pool_size(self) -> int:
        return self.options.episode_pool_size

    @property
    def num_frames(self) -> int:
        return int(self.meta.episodes.length[self.selected].sum())

    @property
    def num_episodes(self) -> int:
        return len(self.selected)


    # ------------------------------------------------------------------ state
    @property
    def seed(self) -> int:
        return self.state.seed

    @property
    def epoch(self) -> int:
        return self.state.epoch

    def set_epoch(self, epoch: int) -> None:
        """Start epoch `epoch` from its beginning (the next iteration)."""
        self.state = self.state.at_epoch(epoch)

    def state_dict(self) -> dict:
        """{"epoch", "batches_consumed", "batch_size", "seed", ...} (`StreamState.to_dict`): batches this
        rank's loader handed out in the current epoch, plus the topology they were produced under (and
        earlier topologies of the same epoch in "history"). JSON-serialisable; identical on every rank."""
        return self.state.to_dict(world_size=resolve_topology(self.rank, self.world_size)[1])

    def load_state_dict(self, state: Mapping) -> None:
        """Continue from `state` (validated: a wrong field raises ValueError naming it)."""
        new = StreamState.from_dict(state)
        new.check_compatible(self.episode_pool_size, self.shuffle)
        self.state = new

    def _lengths(self, epoch: int) -> dict[int, int]:
        """What epoch `epoch` streams: {episode: frames} (the same every epoch here; a mixture's differ)."""
        return {int(e): int(self.meta.episodes.length[e]) for e in self.selected}

    def loader(self, batch_size: int = 32, num_workers: int = 0, even_batches: bool | None = None,
               sharing: str = "auto", **kwargs) -> "StreamingLoader":
        """A DataLoader over this dataset that counts the batches it hands out (for `state_dict`) and moves
        to the next epoch when one is exhausted. With `even_batches` (default: when world_size > 1) every
        rank hands out the same number of batches per epoch, the smallest any rank has: ranks split the
        epoch by whole episodes, so some would otherwise run out first and leave collective ops hanging;
        the few batches the other ranks had left are skipped in that epoch (a warning says how many).
        `sharing`: how workers share batch tensors (see `collate.TensorSharing`)."""
        return StreamingLoader(self, batch_size=batch_size, num_workers=num_workers, even_batches=even_batches,
                               sharing=sharing, **kwargs)

    # ------------------------------------------------------------------ observability
    def stats(self) -> dict:
        """Counters summed over this process and its DataLoader workers (`episodic.counters`): fetch,
        decode, cache and pipeline seconds, bytes, frames emitted, ...; 'processes' counts contributors."""
        return self.counters.snapshot()

    def timing_stats(self) -> dict:
        """Same as `stats()` (the name earlier versions used)."""
        return self.stats()

    def video_decoder_cache_stats(self) -> dict:
        """Decoder-cache hits/misses/evictions/open summed over this process and its workers."""
        s = self.stats()
        out = {"hits": s["decoder_hits"], "misses": s["decoder_misses"], "evictions": s["decoder_evictions"],
               "open": s["decoder_open"]}
        total = out["hits"] + out["misses"]
        out["hit_rate"] = out["hits"] / total if total else 0.0
        return out

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[dict]:
        """Items of this dataset iterated directly (or by a plain DataLoader): continues the open segment
        when the topology matches; counts nothing (use `loader()` for that)."""
        _, ws = resolve_topology(self.rank, self.world_size)
        history, segment, consumed = self.state.direct(ws, runtime.worker()[1] if runtime.in_worker() else 0)
        state = StreamState(seed=self.seed, epoch=self.epoch, batches_consumed=consumed, segment=segment,
                            history=history)
        return self.iterate(_Iteration(state, chunk_size=self.options.chunk_size))

    def _consumer(self, plan, epoch: int, mirror_base: str) -> ConsumerPipeline:
        """The pipeline that reads and builds the items of this process's consumer `plan` (of epoch `epoch`)."""
        return ConsumerPipeline(self.meta, self.spec, reopen(self.source), self.options, self.counters, self.decoders,
                                plan.episodes, plan.frames, mirror_base)

    def iterate(self, it: _Iteration) -> Iterator:
        """This process's consumer of the iteration `it`: items, or whole batches with `it.whole_batches`."""
        t_start = time.perf_counter()
        rank, ws = resolve_topology(self.rank, self.world_size)
        wid, nw = runtime.worker() or (0, 1)
        st = it.state
        seg_ws, seg_nw, seg_bs = st.segment
        if (seg_ws, max(seg_nw, 1)) != (ws, nw):
            raise RuntimeError(f"stream segment topology {(seg_ws, max(seg_nw, 1))} != this process's {(ws, nw)}")
        plan = consumer_plan(self._lengths(st.epoch), st.seed, st.epoch, st.history, ws, nw, seg_bs, st.batches_consumed,
                             self.episode_pool_size, self.shuffle, rank, wid)
        if wid == 0 and rank == 0:
            for problem in split_problems(plan, ws, nw, ranks=not it.even_batches):
                warnings.warn(problem, stacklevel=2)
        order = PoolOrder([len(f) for f in plan.frames], self.episode_pool_size,
                          consumer_rng(st.seed, st.epoch, plan.segment, plan.consumer), self.shuffle)
        order.take(plan.skip)  # fast-forward through the order only: nothing is read, decoded or fetched
        self.counters.add(fast_forward_seconds=time.perf_counter() - t_start)
        pipeline = self._consumer(plan, st.epoch, os.path.join(self.cache_dir, "streaming", f"r{rank}w{wid}"))
        make = partial(make_batch, camera_keys=self.camera_keys, return_uint8=self.return_uint8, sharing=it.sharing)
        chunks = iterate_consumer(pipeline, order, it.chunk_size, self.counters, t_start, make)
        while True:
            t0 = time.perf_counter()
            batch = next(chunks, None)
            if batch is None:
                break
            self.counters.add(item_seconds=time.perf_counter() - t0, items_built=batch.size)
            if it.whole_batches:  # ds.loader(): the DataLoader takes chunks as they are (its auto-batching is off)
                yield deliver(batch)
            else:  # items remember their batch: for a whole chunk, default_collate hands that batch back
                yield from unbatch(batch, self.image_transforms, self.camera_keys)


class _LoaderView(torch.utils.data.IterableDataset):
    """The dataset as a StreamingLoader hands it to its DataLoader: one iteration snapshot, no state."""

    def __init__(self, dataset: StreamingLeRobotDataset, iteration: _Iteration):
        self.dataset, self.iteration = dataset, iteration

    def __iter__(self):
        return self.dataset.iterate(self.iteration)


class StreamingLoader:
    """A DataLoader over a StreamingLeRobotDataset that counts the batches it hands out.

    Iterate it like a DataLoader; `state_dict()` / `load_state_dict()` are the dataset's. Workers are not
    persistent: each iteration hands a snapshot of the dataset's state (epoch, resume position) to fresh
    workers. When an iteration runs to its end, the dataset moves to the next epoch."""

    def __init__(self, dataset: StreamingLeRobotDataset, batch_size: int = 32, num_workers: int = 0,
                 even_batches: bool | None = None, sharing: str = "auto", **kwargs):
        if kwargs.get("persistent_workers"):
            raise ValueError("StreamingLoader workers cannot be persistent: each epoch's state goes to new workers")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.even_batches = even_batches
        self.sharing = TensorSharing(sharing)
        self.kwargs = kwargs

    def __iter__(self):
        ds = self.dataset
        rank, ws = resolve_topology(ds.rank, ds.world_size)
        ds.state = state = ds.state.open_segment(ws, self.num_workers, self.batch_size)
        even = self.even_batches if self.even_batches is not None else ws > 1
        limit = None
        if even:
            per_rank = segment_batches(ds._lengths(state.epoch), state.seed, state.epoch, state.history, ws, self.num_workers,
                                       self.batch_size, ds.episode_pool_size, ds.shuffle)
            limit = min(per_rank)
            if max(per_rank) > limit and rank == 0 and state.batches_consumed < limit:
                warnings.warn(f"streaming: ranks have {limit}..{max(per_rank)} batches in this epoch; all stop after "
                              f"{limit} (even_batches), skipping {sum(per_rank) - limit * ws} batches' frames of this "
                              f"epoch", stacklevel=2)
        kw = dict(self.kwargs)
        # the dataset hands out whole batches (no per-item dicts) unless items must be collated or transformed
        # one by one
        whole = not (kw.get("collate_fn") or kw.get("drop_last") or ds.image_transforms)
        view = _LoaderView(ds, _Iteration(state, chunk_size=self.batch_size, whole_batches=whole,
                                          sharing=self.sharing, even_batches=even))
        if whole:
            kw.pop("drop_last", None)
            dl = torch.utils.data.DataLoader(view, batch_size=None, num_workers=self.num_workers, **kw)
        else:
            dl = torch.utils.data.DataLoader(view, batch_size=self.batch_size, num_workers=self.num_workers, **kw)
        it = iter(dl)
        try:
            while limit is None or ds.state.batches_consumed < limit:
                try:
                    batch = next(it)
                except StopIteration:
                    break
                ds.state = ds.state.advanced(1)
                yield batch
        finally:  # also when the caller stops early (close()): stop the workers now, not at garbage collection
            runtime.shutdown_workers(it)
        ds.set_epoch(ds.epoch + 1)

    def state_dict(self) -> dict:
        return self.dataset.state_dict()

    def load_state_dict(self, state: Mapping) -> None:
        self.dataset.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)
