"""Streaming: IterableDatasets that read one dataset, or a weighted mixture, episode by episode
(docs/streaming.md, docs/mixtures.md).

`StreamingDataset` streams the slots of an epoch source (`epochs`: `DatasetEpochs` for one dataset,
`MixtureEpochs` for a mixture). Who does what: which slots each consumer gets, the order it emits their frames
in and what a resume skips are pure arithmetic in `order/` (`stream_plan`, `pool_order`); the position of the
trainer is a `StreamState` value (plus what the epoch source adds, a mixture's state); one consumer's reads and
batches are `consumer.Consumer`, whose items come from `gather` with the dataset's item layout, so an item
equals the map-style dataset's item for the same frame. `StreamingLeRobotDataset` and `StreamingMixtureDataset`
build one from their arguments (the mixture's in `streaming_mixture.py`); `loader()` is a
`loader.StreamingLoader`.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial

import numpy as np
import torch

from .. import config, runtime
from ..counters import Counters, Tally
from ..format.metadata import DatasetMetadata
from ..order.eval_split import EvalSplit
from ..order.pool_order import PoolOrder
from ..order.shard import ConsumerId, resolve_topology
from ..order.stream_keys import consumer_rng
from ..order.stream_plan import consumer_plan, split_problems
from ..order.stream_state import StreamState
from ..storage.fetch import FetchPolicy
from ..storage.resolve import resolve_source
from ..storage.source import Source
from ..tabular.resample import Resampling
from ..video import DecoderCache
from .access import finish_batch, transformed_keys
from .collate import Batch, deliver, make_batch, unbatch
from .consumer import Consumer, iterate_consumer
from .entry_reader import StreamEntry
from .epochs import DatasetEpochs, MixtureEpochs
from .facts import DatasetFacts
from .gpu_frames import gpu_setup
from .item_layout import ItemLayout, single_layout
from .item_spec import ItemSpec, select_episodes
from .loader import Iteration, StreamingLoader
from .sides import SplitSides, checked_split
from .stream_options import UNSET, StreamOptions, stream_options

__all__ = ["StreamingDataset", "StreamingLeRobotDataset", "local_for_gpu"]


class StreamingDataset(torch.utils.data.IterableDataset):
    """Items of `layout` streamed from the slots of `epochs`, entry e read as `entry(e)` says (see the module
    docstring). Each consumer (rank x DataLoader worker) gets whole episodes, keeps up to `episode_pool_size` of
    them in RAM and emits their frames in a random order that is a pure function of (seed, epoch, topology);
    every frame of the epoch's slots is emitted exactly once per epoch across all consumers.

    `options` (`StreamOptions`), `seed`, `shuffle`, `return_uint8`, `image_transforms`, `rank`/`world_size`
    (default: torch.distributed's), `cache_dir` (remote entries are mirrored under ``<cache_dir>/streaming``),
    `cameras` ((height, width) of each camera a consumer decodes, for the decoder cache's default size), `tally`
    (items per entry, counted),
    `counters` (the dataset's, default new ones)."""

    def __init__(
        self,
        epochs: DatasetEpochs | MixtureEpochs,
        layout: ItemLayout,
        entry: Callable[[int], StreamEntry],
        options: StreamOptions,
        *,
        seed: int = 0,
        shuffle: bool = True,
        return_uint8: bool = False,
        image_transforms: Callable | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        cache_dir: str | os.PathLike | None = None,
        cameras: Sequence[tuple[int, int]] = (),
        tally: Tally | None = None,
        counters: Counters | None = None,
    ):
        self.epochs, self.item_layout, self.entry, self.options = epochs, layout, entry, options
        self.shuffle = bool(shuffle)
        self.return_uint8 = return_uint8
        self.image_transforms = image_transforms
        self.rank, self.world_size = rank, world_size
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else str(config.cache_dir())
        self.camera_keys = layout.camera_keys
        self.depth_keys = layout.depth_keys
        self.cameras = list(cameras)
        self.tally = tally
        self.counters = counters if counters is not None else Counters()
        self.decoders = DecoderCache(max_open=options.decoders_for(cameras), counters=self.counters)
        self.gpu = None  # a `gpu_frames.GpuFrames` when frames are decoded on the GPU (set by the subclasses)
        # the trainer's position (what state_dict() returns); per-iteration data travels in `Iteration`
        self.state = StreamState(seed=int(seed), episode_pool_size=self.episode_pool_size, shuffle=self.shuffle)

    def __getstate__(self) -> dict:  # for spawn/forkserver workers: no open decoders
        return {**self.__dict__, "decoders": None}

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self.decoders = DecoderCache(max_open=self.options.decoders_for(self.cameras), counters=self.counters)

    @property
    def episode_pool_size(self) -> int:
        return self.options.episode_pool_size

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
        earlier topologies of the same epoch in "history"), plus what the epoch source adds (a mixture's
        ``"mixture"``). JSON-serialisable; identical on every rank."""
        return {**self.state.to_dict(world_size=resolve_topology(self.rank, self.world_size)[1]), **self.epochs.state()}

    def load_state_dict(self, state: Mapping) -> None:
        """Continue from `state` (validated: a wrong field raises ValueError naming it; a mixture's state saved
        under another mixture continues by `MixtureEpochs.restore`'s rule)."""
        new = StreamState.from_dict(state)
        new.check_compatible(self.episode_pool_size, self.shuffle)
        self.state = self.epochs.restore(state, new)

    def loader(
        self,
        batch_size: int = 32,
        num_workers: int = 0,
        even_batches: bool | None = None,
        sharing: str = "auto",
        **kwargs,
    ) -> StreamingLoader:
        """A DataLoader over this dataset that counts the batches it hands out (for `state_dict`) and moves
        to the next epoch when one is exhausted. With `even_batches` (default: when world_size > 1) every
        rank hands out the same number of batches per epoch, the smallest any rank has: ranks split the
        epoch by whole episodes, so some would otherwise run out first and leave collective ops hanging;
        the few batches the other ranks had left are skipped in that epoch (a warning says how many).
        `sharing`: how workers share batch tensors (see `collate.TensorSharing`)."""
        return StreamingLoader(
            self, batch_size=batch_size, num_workers=num_workers, even_batches=even_batches, sharing=sharing, **kwargs
        )

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
        s = self.counters.snapshot()
        out = {
            "hits": s["decoder_hits"],
            "misses": s["decoder_misses"],
            "evictions": s["decoder_evictions"],
            "open": s["decoder_open"],
        }
        total = out["hits"] + out["misses"]
        out["hit_rate"] = out["hits"] / total if total else 0.0
        return out

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[dict]:
        """Items of this dataset iterated directly (or by a plain DataLoader): continues the open segment
        when the topology matches; counts nothing (use `loader()` for that)."""
        _, ws = resolve_topology(self.rank, self.world_size)
        worker = runtime.worker()
        history, segment, consumed = self.state.direct(ws, worker[1] if worker is not None else 0)
        state = StreamState(
            seed=self.seed, epoch=self.epoch, batches_consumed=consumed, segment=segment, history=history
        )
        return self.iterate(Iteration(state, chunk_size=self.options.chunk_size))

    def iterate(self, it: Iteration) -> Iterator:
        """This process's consumer of the iteration `it`: items, or whole batches with `it.whole_batches`."""
        t_start = time.perf_counter()
        rank, ws = resolve_topology(self.rank, self.world_size)
        wid, nw = runtime.worker() or (0, 1)
        st = it.state
        assert st.segment is not None, "an iteration's state has an open segment"
        seg_ws, seg_nw, _ = st.segment
        if (seg_ws, max(seg_nw, 1)) != (ws, nw):
            raise RuntimeError(f"stream segment topology {(seg_ws, max(seg_nw, 1))} != this process's {(ws, nw)}")
        plan = consumer_plan(
            self.epochs.lengths(st.epoch, st.seed),
            st,
            ConsumerId(rank, ws, wid, nw),
            self.episode_pool_size,
            self.shuffle,
        )
        if wid == 0 and rank == 0:
            for problem in split_problems(plan, ws, nw, ranks=not it.even_batches):
                warnings.warn(problem, stacklevel=2)
        order = PoolOrder(
            [len(f) for f in plan.frames],
            self.episode_pool_size,
            consumer_rng(st.seed, st.epoch, plan.segment, plan.consumer),
            self.shuffle,
        )
        order.take(plan.skip)  # fast-forward through the order only: nothing is read, decoded or fetched
        self.counters.add(fast_forward_seconds=time.perf_counter() - t_start)
        entries, episodes = self.epochs.slots(np.asarray(plan.episodes, dtype=np.int64), st.epoch, st.seed)
        consumer = Consumer(
            self.item_layout,
            self.entry,
            entries,
            episodes,
            plan.frames,
            self.options,
            self.counters,
            self.decoders,
            os.path.join(self.cache_dir, "streaming", f"r{rank}w{wid}"),
            self.tally,
        )
        make = partial(make_batch, return_uint8=self.return_uint8 or self.gpu is not None, sharing=it.sharing)
        batches = iterate_consumer(consumer, order, it.chunk_size, self.counters, t_start, make)
        while True:
            t0 = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                break
            self.counters.add(item_seconds=time.perf_counter() - t0, items_built=batch.size)
            if it.whole_batches:  # ds.loader(): the DataLoader takes chunks as they are (its auto-batching is off)
                yield deliver(batch)
            elif self.gpu is not None:  # GPU frames decoded here, in the main process (a worker refuses)
                yield from unbatch(
                    Batch(finish_batch(self, batch.collated(), transforms=False)),
                    self.image_transforms,
                    transformed_keys(self),
                )
            else:  # items remember their batch: for a whole chunk, default_collate hands that batch back
                yield from unbatch(batch, self.image_transforms, transformed_keys(self))


def local_for_gpu(gpu, sources) -> None:
    """Streaming with decode_device='cuda' reads local datasets: a remote one is read into a consumer's mirror,
    whose files may go before the main process decodes them."""
    if gpu is not None and not all(s.is_local for s in sources):
        raise ValueError(
            "decode_device='cuda' streams local datasets only; download a remote one first, or use the "
            "map-style dataset (its files are fetched whole into the cache)"
        )


class StreamingLeRobotDataset(DatasetFacts, SplitSides, StreamingDataset):
    """Frames of a LeRobot-format dataset, streamed episode by episode, with exact windows and exact resume.

    Every item equals `LeRobotDataset(repo_id, root=root, ...)[i]` for the frame it holds. Use
    `dataset.loader(batch_size, num_workers)` (a counting DataLoader wrapper) to get `state_dict()`,
    `load_state_dict()` and automatic epoch advance; `set_epoch(e)` starts epoch `e` from its beginning.
    Remote sources (any fsspec URL) are read by byte ranges, only what the consumer's episodes need (see
    `consumer`), into a private per-consumer mirror under `<cache_dir>/streaming` (`cache_dir`: the
    episodic cache, default ~/.cache/episodic); local sources are read in place. The tuning arguments are
    those of `StreamOptions` (validated; the error states the allowed range). Remote reads follow
    `fetch_policy` (`storage.fetch.FetchPolicy`: timeouts, retry window) when given, else a FetchPolicy of
    `fetch_retries`, `fetch_backoff_s` and `fetch_max_backoff_s`. `options`: a `StreamOptions` instead of its
    fields (not both). `mirror_max_bytes` was called `cache_max_bytes` (still accepted, with a
    DeprecationWarning). `on_unknown_task` as in `EpisodicDataset`
    (rows are read as episodes are streamed, so the one warning comes from the consumer that first reads such
    a row, naming what it read; each DataLoader worker process warns at most once). `eval_split`, `split` and
    `eval_dataset()` as in `EpisodicDataset` (the same episodes on each side); `target_fps` and `resample` too
    (episodes stream resampled: the plan, the pool and the resume count resampled frames); `depth_output_unit`
    too (depth cameras' distances, and their statistics, in "mm" or "m").
    """

    def __init__(
        self,
        repo_id: str | None,
        root: str | os.PathLike | None = None,
        episodes: Sequence[int] | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        tolerance_s: float = 1e-4,
        episode_pool_size: int = UNSET,
        shuffle: bool = True,
        seed: int = 0,
        return_uint8: bool = False,
        video_keys: Sequence[str] | None = None,
        cache_dir: str | os.PathLike | None = None,
        mirror_max_bytes: int = UNSET,
        decoder_cache_size: int | None = UNSET,
        rank: int | None = None,
        world_size: int | None = None,
        image_transforms: Callable | None = None,
        revision: str | None = None,
        storage_options: dict | None = None,
        chunk_size: int = UNSET,
        prefetch_episodes: int = UNSET,
        prefetch_threads: int = UNSET,
        tabular_block: int = UNSET,
        fetch_retries: int | None = None,
        fetch_backoff_s: float = 0.05,
        fetch_max_backoff_s: float = 2.0,
        video_decoder_cache_size: int | None = None,
        fetch_policy: FetchPolicy | None = None,
        image_size: Sequence[int] | None = None,
        resize_mode: str = "stretch",
        on_unknown_task: str = "warn",
        options: StreamOptions | None = None,
        cache_max_bytes: int = UNSET,
        decode_device: str = "cpu",
        cpu_fallback=False,
        gpu_decoders: int | None = None,
        eval_split: EvalSplit | float | dict | None = None,
        split: str = "train",
        target_fps: int | None = None,
        resample: Mapping[str, str] | None = None,
        depth_output_unit: str = "mm",
    ):
        self.remember(locals())
        self.eval_split, self.split = checked_split(eval_split, split), split
        if video_decoder_cache_size is not None:
            warnings.warn(
                "video_decoder_cache_size is renamed decoder_cache_size (as in LeRobotDataset/EpisodicDataset)",
                DeprecationWarning,
                stacklevel=2,
            )
            decoder_cache_size = video_decoder_cache_size if decoder_cache_size in (None, UNSET) else decoder_cache_size
        fetch = fetch_policy
        if fetch is None and (
            options is None or (fetch_retries, fetch_backoff_s, fetch_max_backoff_s) != (None, 0.05, 2.0)
        ):
            fetch = FetchPolicy(retries=fetch_retries, backoff_s=fetch_backoff_s, max_backoff_s=fetch_max_backoff_s)
        options = stream_options(
            options,
            cache_max_bytes,
            episode_pool_size=episode_pool_size,
            chunk_size=chunk_size,
            prefetch_episodes=prefetch_episodes,
            prefetch_threads=prefetch_threads,
            tabular_block=tabular_block,
            mirror_max_bytes=mirror_max_bytes,
            decoder_cache_size=decoder_cache_size,
            fetch=UNSET if fetch is None else fetch,
        )
        self.repo_id, self.root, self.episodes = repo_id, root, episodes
        self.source: Source = resolve_source(
            repo_id, root, revision, episodes, video_keys, storage_options, None, policy=options.fetch
        )
        self.meta: DatasetMetadata = self.source.load_metadata()
        self.delta_timestamps = dict(delta_timestamps) if delta_timestamps else None
        self.tolerance_s = tolerance_s
        self.spec = ItemSpec.build(
            self.meta,
            delta_timestamps,
            tolerance_s,
            video_keys,
            image_size,
            resize_mode,
            on_unknown_task=on_unknown_task,
            resampling=Resampling.of(target_fps, resample),
            depth_output_unit=depth_output_unit,
        )
        self.meta.rescale_depth_stats(depth_output_unit)
        self.selected = select_episodes(self.meta, episodes, self.eval_split, split)
        self.delta_indices = self.spec.delta_indices if delta_timestamps is not None else None
        layout, counters = single_layout(self.spec, self.meta.info.features), Counters()
        gpu_keys, gpu = gpu_setup(
            layout,
            [(self.meta, self.spec, self.source, self.selected)],
            decode_device,
            cpu_fallback,
            gpu_decoders,
            self.spec.frames,
            counters,
        )
        local_for_gpu(gpu, [self.source])
        self.spec = replace(self.spec, gpu_keys=gpu_keys)
        super().__init__(
            DatasetEpochs(self.selected, self.spec.episode_lengths(self.meta)),
            layout,
            [StreamEntry(self.meta, self.spec, self.source)].__getitem__,
            options,
            seed=seed,
            shuffle=shuffle,
            return_uint8=return_uint8,
            image_transforms=image_transforms,
            rank=rank,
            world_size=world_size,
            cache_dir=cache_dir,
            cameras=[self.meta.info.camera_hw(k)[:2] for k in self.spec.video_keys],
            counters=counters,
        )
        self.gpu = gpu

    @property
    def num_frames(self) -> int:
        return int(self.spec.episode_lengths(self.meta)[self.selected].sum())

    @property
    def num_episodes(self) -> int:
        return len(self.selected)
