"""Streaming: an IterableDataset that reads a LeRobot-format dataset episode by episode (issue #4).

Items are built by the same `FrameEngine.batch` / `to_torch` / `unbatch` as the map-style datasets, on an
engine whose columns hold one episode's rows, so an item equals `LeRobotDataset(...)[i]` for the same
frame (keys, windows, pad masks, frames, task).

Order (pure functions of (seed, epoch, topology), see docs/streaming.md):
- `plan_episodes` splits the EPISODES over consumers = world_size x num_workers (longest-first greedy on
  frame counts, in a keyed random order), so no consumer idles when files < consumers.
- `PoolOrder`: each consumer keeps up to `episode_pool_size` whole episodes in RAM and emits frames
  uniformly at random across the pool's remaining frames; an exhausted episode is replaced by the next.
- Resume: the state counts the batches the trainer consumed; a DataLoader hands batches out round-robin
  over its workers, skipping exhausted ones (`worker_batches_consumed`), so each worker re-derives how
  many items it already produced and skips them in its order (no read, no decode). A resume on
  another topology closes the old "segment" (kept in `history`) and re-splits what is left.
"""

from __future__ import annotations

import copy
import glob
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import torch

from ..format.metadata import DatasetMetadata, load_metadata
from ..order.pool_order import PoolOrder
from ..order.round_robin import consumed_items as _consumed_items
from ..order.shard import resolve_topology
from ..order.stream_keys import consumer_rng as _consumer_rng
from ..order.stream_plan import remaining_after
from ..order.stream_plan import segment_plan as _segment_plan
from ..storage.cache import atomic_write_bytes, default_cache_dir
from ..storage.prefetch import FetchStats, Prefetcher, RangesIgnored
from ..storage.source import Source
from ..tabular import Columns, load_columns
from ..video import DecoderCache
from .collate import Batch, in_worker
from .engine import FrameEngine, select_episodes, to_torch, unbatch
from .map_style import resolve_source

__all__ = ["StreamingLeRobotDataset", "StreamingLoader"]


# ---------------------------------------------------------------------------------------------- stats
class _ProcessStats:
    """Counters of this process; published as JSON files in a directory shared with DataLoader workers."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.pid = os.getpid()
        self.token = f"{self.pid}-{os.urandom(4).hex()}"
        self.fetch = FetchStats()
        self.decode_seconds = 0.0
        self.tabular_seconds = 0.0
        self.wait_seconds = 0.0
        self.fast_forward_seconds = 0.0
        self.frames_emitted = 0
        self.episodes_admitted = 0
        self.first_item_seconds: float | None = None
        self.last_publish = 0.0

    def check_fork(self) -> None:
        if os.getpid() != self.pid:
            self.reset()

    def as_dict(self, decoders: DecoderCache | None) -> dict:
        d = {"decode_seconds": self.decode_seconds, "tabular_seconds": self.tabular_seconds,
             "wait_seconds": self.wait_seconds, "fast_forward_seconds": self.fast_forward_seconds,
             "frames_emitted": self.frames_emitted, "episodes_admitted": self.episodes_admitted,
             **self.fetch.as_dict()}
        d["decoder"] = decoders.stats() if decoders is not None and decoders._pid == os.getpid() else {}
        d["first_item_seconds"] = self.first_item_seconds
        return d


def _remove_dir_if_owner(path: str, pid: int) -> None:
    if os.getpid() == pid:  # a forked worker's copy of the dataset must not remove the parent's directory
        shutil.rmtree(path, ignore_errors=True)


_SUM_KEYS = ("decode_seconds", "tabular_seconds", "wait_seconds", "fast_forward_seconds", "frames_emitted",
             "episodes_admitted", "bytes_fetched", "fetch_seconds", "files_fetched", "ranges_fetched", "retries",
             "cache_evictions")


# ---------------------------------------------------------------------------------------------- dataset
class StreamingLeRobotDataset(torch.utils.data.IterableDataset):
    """Frames of a LeRobot-format dataset, streamed episode by episode, with exact windows and exact resume.

    Every item equals `LeRobotDataset(repo_id, root=root, ...)[i]` for the frame it holds. Each consumer
    (rank x DataLoader worker) gets whole episodes, keeps up to `episode_pool_size` of them in RAM and
    emits their frames in a random order that is a pure function of (seed, epoch, topology); every frame
    of the selected episodes is emitted exactly once per epoch across all consumers.

    Use `dataset.loader(batch_size, num_workers)` (a counting DataLoader wrapper) to get `state_dict()`,
    `load_state_dict()` and automatic epoch advance; `set_epoch(e)` starts epoch `e` from its beginning.
    Remote sources (any fsspec URL) are read by byte ranges, only what the consumer's episodes need: the
    data parquet files in place (footer and the needed row groups, retried range requests), and of each
    mp4 its header (once) plus, per episode, the samples of the episode's time span (from the key frame
    before it), written at their own offsets into a sparse file in a private per-consumer mirror under
    `cache_dir` (default ~/.cache/episodic/streaming); mp4s that do not allow ranges are fetched whole.
    Video ranges are prefetched in background threads when their episode is about to enter the pool; at
    most `cache_max_bytes` of unreferenced mirror files (bytes written) are kept per consumer. Local
    sources are read in place.
    """

    def __init__(self, repo_id: str | None, root: str | os.PathLike | None = None, episodes: Sequence[int] | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, tolerance_s: float = 1e-4,
                 episode_pool_size: int = 64, shuffle: bool = True, seed: int = 0, return_uint8: bool = False,
                 video_keys: Sequence[str] | None = None, cache_dir: str | os.PathLike | None = None,
                 cache_max_bytes: int = 4 << 30, video_decoder_cache_size: int | None = None,
                 rank: int | None = None, world_size: int | None = None, image_transforms: Callable | None = None,
                 revision: str | None = None, storage_options: dict | None = None, chunk_size: int = 32,
                 prefetch_episodes: int = 8, prefetch_threads: int = 16, tabular_block: int = 16,
                 fetch_retries: int = 8, fetch_backoff_s: float = 0.05, fetch_max_backoff_s: float = 2.0):
        if episode_pool_size < 1:
            raise ValueError(f"episode_pool_size must be >= 1, got {episode_pool_size}")
        self.repo_id = repo_id
        self.root = root
        self.source: Source = resolve_source(repo_id, root, revision, episodes, video_keys, storage_options, None)
        self._location = self.source.url("") if not self.source.is_local else self.source.root
        self._storage_options = dict(storage_options or {})
        self.meta: DatasetMetadata = load_metadata(self.source.fs, self.source.root)
        self.episodes = episodes
        self.delta_timestamps = dict(delta_timestamps) if delta_timestamps else None
        self.tolerance_s = tolerance_s
        self.episode_pool_size = int(episode_pool_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.return_uint8 = return_uint8
        self.image_transforms = image_transforms
        self.rank, self.world_size = rank, world_size
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else str(default_cache_dir() / "streaming")
        self.cache_max_bytes = int(cache_max_bytes)
        self.chunk_size = max(1, int(chunk_size))
        self.prefetch_episodes = max(0, int(prefetch_episodes))
        self.prefetch_threads = max(1, int(prefetch_threads))
        self.tabular_block = max(1, int(tabular_block))
        self.fetch_retries, self.fetch_backoff_s, self.fetch_max_backoff_s = fetch_retries, fetch_backoff_s, fetch_max_backoff_s
        # the item builder: a FrameEngine with no rows (validates keys and windows like map-style does);
        # per episode, a shallow copy of it gets that episode's columns
        self._template = FrameEngine(self.meta, self.source, [], delta_timestamps, tolerance_s, video_keys)
        self.selected = select_episodes(self.meta, episodes)
        self.camera_keys = self._template.video_keys + self._template.image_keys
        n_cams = len(self._template.video_keys)
        self.video_decoder_cache_size = (video_decoder_cache_size if video_decoder_cache_size is not None
                                         else min(256, max(16, n_cams * (self.episode_pool_size + self.prefetch_episodes))))
        self._decoders = DecoderCache(max_open=self.video_decoder_cache_size)
        self._template.decoders = self._decoders
        if delta_timestamps is not None:
            self.delta_indices = {k: v.tolist() for k, v in self._template.offsets.items()}
        else:
            self.delta_indices = None
        # trainer-side state
        self.epoch = 0
        self._consumed = 0
        self._history: list[list[int]] = []
        self._segment: tuple[int, int, int] | None = None  # (world_size, num_workers, batch_size) of the open segment
        self._iter_state: dict | None = None
        # observability
        self._stats = _ProcessStats()
        self._stats_dir = tempfile.mkdtemp(prefix="episodic-stream-stats-")
        weakref.finalize(self, _remove_dir_if_owner, self._stats_dir, os.getpid())

    def __getstate__(self) -> dict:  # for spawn/forkserver workers: no locks, no open decoders
        d = self.__dict__.copy()
        d["_stats"] = None
        d["_decoders"] = None
        d["_template"] = copy.copy(self._template)
        d["_template"].decoders = None
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self._stats = _ProcessStats()
        self._decoders = DecoderCache(max_open=self.video_decoder_cache_size)
        self._template.decoders = self._decoders

    # ------------------------------------------------------------------ sizes
    @property
    def num_frames(self) -> int:
        return int(self.meta.episodes.length[self.selected].sum())

    @property
    def num_episodes(self) -> int:
        return len(self.selected)

    @property
    def fps(self) -> int:
        return self.meta.fps

    @property
    def features(self) -> dict:
        return self.meta.features

    # ------------------------------------------------------------------ state
    def set_epoch(self, epoch: int) -> None:
        """Start epoch `epoch` from its beginning (the next iteration)."""
        self.epoch = int(epoch)
        self._consumed = 0
        self._history = []

    def state_dict(self) -> dict:
        """{"epoch", "batches_consumed", "batch_size", "seed", ...}: batches this rank's loader handed out
        in the current epoch, plus the topology they were produced under (and earlier topologies of the
        same epoch in "history"). JSON-serialisable; identical on every rank of a synchronous job."""
        ws, nw, bs = self._segment if self._segment is not None else (resolve_topology(self.rank, self.world_size)[1], 0, 0)
        return {"seed": self.seed, "epoch": self.epoch, "batches_consumed": self._consumed, "batch_size": bs,
                "world_size": ws, "num_workers": nw, "history": [list(h) for h in self._history],
                "episode_pool_size": self.episode_pool_size, "shuffle": self.shuffle}

    def load_state_dict(self, state: Mapping) -> None:
        for key in ("episode_pool_size", "shuffle"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(f"stream state was saved with {key}={state[key]!r}, this dataset has "
                                 f"{getattr(self, key)!r}: the order would differ")
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self._consumed = int(state.get("batches_consumed", 0))
        self._history = [list(map(int, h)) for h in state.get("history", [])]
        if self._consumed:
            self._segment = (int(state.get("world_size", 1)), int(state.get("num_workers", 0)), int(state["batch_size"]))
        else:
            self._segment = None

    def _remaining(self, seed: int, epoch: int, history: Sequence[Sequence[int]]) -> dict[int, Sequence[int]]:
        lengths = {int(e): int(self.meta.episodes.length[e]) for e in self.selected}
        return remaining_after(lengths, history, seed, epoch, self.episode_pool_size, self.shuffle)

    def _segment_batches(self, state: Mapping) -> list[int]:
        """Batches each rank hands out in the segment of `state` (from `_begin`), counted from its start."""
        ws, nw, bs = state["segment"]
        nw = max(nw, 1)
        remaining = self._remaining(state["seed"], state["epoch"], state["history"])
        _, _, frames = _segment_plan(remaining, ws, nw, state["seed"], state["epoch"], len(state["history"]), self.shuffle)
        return [sum(-(-frames[r * nw + w] // bs) for w in range(nw)) for r in range(ws)]

    def _begin(self, batch_size: int, num_workers: int) -> dict:
        """Open (or continue) the segment for this loader's topology; the snapshot workers iterate from."""
        _, ws = resolve_topology(self.rank, self.world_size)
        topo = (ws, int(num_workers), int(batch_size))
        if self._segment is not None and self._consumed > 0 and self._segment != topo:
            self._history.append([*self._segment, self._consumed])
            self._consumed = 0
        self._segment = topo
        state = {"seed": self.seed, "epoch": self.epoch, "history": [list(h) for h in self._history],
                 "segment": topo, "batches_consumed": self._consumed}
        self._iter_state = state
        return state

    def _end_epoch(self) -> None:
        self.set_epoch(self.epoch + 1)

    def loader(self, batch_size: int = 32, num_workers: int = 0, even_batches: bool | None = None,
               **kwargs) -> "StreamingLoader":
        """A DataLoader over this dataset that counts the batches it hands out (for `state_dict`) and moves
        to the next epoch when one is exhausted. With `even_batches` (default: when world_size > 1) every
        rank hands out the same number of batches per epoch, the smallest any rank has: ranks split the
        epoch by whole episodes, so some would otherwise run out first and leave collective ops hanging;
        the few batches the other ranks had left are skipped in that epoch (a warning says how many)."""
        return StreamingLoader(self, batch_size=batch_size, num_workers=num_workers, even_batches=even_batches, **kwargs)

    # ------------------------------------------------------------------ observability
    def _publish(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._stats.last_publish < 0.5:
            return
        self._stats.last_publish = now
        try:
            atomic_write_bytes(os.path.join(self._stats_dir, f"stats-{self._stats.token}.json"),
                               json.dumps(self._stats.as_dict(self._decoders)).encode())
        except OSError:
            pass

    def _collect(self) -> list[dict]:
        self._stats.check_fork()
        if self._stats.frames_emitted or self._stats.fetch.files_fetched:
            self._publish(force=True)
        out = []
        for path in glob.glob(os.path.join(self._stats_dir, "stats-*.json")):
            try:
                with open(path) as f:
                    out.append(json.load(f))
            except (OSError, ValueError):
                pass
        return out

    def timing_stats(self) -> dict:
        """Totals over this process and every DataLoader worker process it started (workers publish their
        counters to a temporary directory at most every 0.5 s and when they finish): fetch seconds,
        decode seconds, bytes fetched, frames emitted, retries, ... plus 'processes'."""
        per = self._collect()
        out = {k: sum(p.get(k, 0) for p in per) for k in _SUM_KEYS}
        firsts = [p["first_item_seconds"] for p in per if p.get("first_item_seconds") is not None]
        out["first_item_seconds"] = min(firsts) if firsts else None
        out["processes"] = len(per)
        return out

    def video_decoder_cache_stats(self) -> dict:
        """DecoderCache hits/misses/evictions summed over this process and its workers ('open' summed too)."""
        per = [p.get("decoder") or {} for p in self._collect()]
        out = {k: sum(d.get(k, 0) for d in per) for k in ("hits", "misses", "evictions", "open")}
        total = out["hits"] + out["misses"]
        out["hit_rate"] = out["hits"] / total if total else 0.0
        return out

    # ------------------------------------------------------------------ iteration
    def _consumer(self) -> tuple[int, int, int, int]:
        rank, ws = resolve_topology(self.rank, self.world_size)
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        return rank, ws, wid, nw

    def _fresh_source(self) -> Source:
        """The source for this process: a forked worker must not use its parent's async HTTP session."""
        if self.source.is_local:
            return self.source
        import fsspec

        fs, root = fsspec.core.url_to_fs(self._location, **self._storage_options)
        return Source(fs=fs, root=root.rstrip("/"))

    def _my_plan(self) -> tuple[np.ndarray, list[np.ndarray], int, int, int, int, int]:
        """This consumer's episodes, their frames to emit, seed, epoch, the segment index and the items to skip."""
        rank, ws, wid, nw = self._consumer()
        state = self._iter_state
        self._iter_state = None
        loader_workers = None
        if state is None:  # iterated directly (not through `loader()`): continue or close the open segment
            nwk = 0 if torch.utils.data.get_worker_info() is None else nw
            seg = self._segment
            history = [list(h) for h in self._history]
            consumed = self._consumed
            if seg is not None and consumed > 0 and (seg[0], seg[1]) != (ws, nwk):
                history.append([*seg, consumed])
                consumed = 0
            state = {"seed": self.seed, "epoch": self.epoch, "history": history,
                     "segment": seg if consumed else (ws, nwk, 1), "batches_consumed": consumed}
        seed, epoch, history = state["seed"], state["epoch"], state["history"]
        seg_ws, seg_nw, seg_bs = state["segment"]
        loader_workers = max(seg_nw, 1)
        if (seg_ws, loader_workers) != (ws, nw):
            raise RuntimeError(f"stream segment topology {(seg_ws, loader_workers)} != this process's {(ws, nw)}")
        remaining = self._remaining(seed, epoch, history)
        segment = len(history)
        cand, plans, frames = _segment_plan(remaining, ws, nw, seed, epoch, segment, self.shuffle)
        took, nxt = _consumed_items(frames[rank * nw:(rank + 1) * nw], max(seg_bs, 1), state["batches_consumed"])
        # a new DataLoader iterator starts its round-robin at worker 0: worker w plays the part of the
        # worker that was w places after the one due to hand out the next batch
        logical = (nxt + wid) % nw
        if wid == 0 and rank == 0:
            _warn_uneven(len(cand), frames, ws, nw, ranks=not state.get("even_batches"))
        eps = cand[plans[rank * nw + logical]]
        return eps, [remaining[int(e)] for e in eps], seed, epoch, segment, took[logical], rank * nw + logical

    def __iter__(self) -> Iterator[dict]:
        self._stats.check_fork()
        t_start = time.perf_counter()
        rank, ws, wid, nw = self._consumer()
        whole = bool((self._iter_state or {}).get("whole_batches"))
        eps, frames, seed, epoch, segment, skip, consumer = self._my_plan()
        rng = _consumer_rng(seed, epoch, segment, consumer)
        order = PoolOrder([len(f) for f in frames], self.episode_pool_size, rng, self.shuffle)
        order.take(skip)  # fast-forward through the order only: nothing is read, decoded or fetched
        self._stats.fast_forward_seconds += time.perf_counter() - t_start
        run = _Run(self, eps, frames, rank, wid)
        run.release(order.finished)  # consumed before the resume point (or empty): never loaded
        order.finished.clear()
        try:
            while order.pos < order.total:
                kk, jj = order.take(self.chunk_size)
                batch = run.batch(kk, jj, order.admitted)
                run.release(order.finished)
                order.finished.clear()
                if self._stats.first_item_seconds is None and batch.size:
                    self._stats.first_item_seconds = time.perf_counter() - t_start
                self._stats.frames_emitted += batch.size
                self._publish()
                if whole:  # ds.loader(): the DataLoader takes chunks as they are (its auto-batching is off)
                    yield batch.for_transport() if in_worker() else batch.collated()
                else:  # items remember their batch: for a whole chunk, default_collate hands that batch back
                    yield from unbatch(batch, self.image_transforms, self.camera_keys)
        finally:
            run.close()
            if sys.is_finalizing():  # an iterator collected at interpreter exit: nobody will read the stats
                return
            self._publish(force=True)


def _warn_uneven(episodes: int, frames: Sequence[int], ws: int, nw: int, ranks: bool = True) -> None:
    """Warn when consumers get no episode, and (with `ranks`) when ranks get unequal frame counts."""
    if episodes < ws * nw:
        warnings.warn(f"streaming: {episodes} episodes for {ws * nw} consumers (world_size {ws} x {nw} workers): "
                      f"{ws * nw - episodes} consumers get no episode", stacklevel=3)
    per_rank = [sum(frames[r * nw:(r + 1) * nw]) for r in range(ws)]
    if ranks and ws > 1 and len(set(per_rank)) > 1:
        warnings.warn(f"streaming: world_size {ws} does not divide the epoch evenly: ranks get {min(per_rank)}..{max(per_rank)} "
                      f"frames, so some ranks run out of batches first (stop every rank at the shortest, e.g. "
                      f"loader(even_batches=True), or expect a hang in collective ops)", stacklevel=3)


class _Run:
    """One consumer's iteration: loads tabular blocks and prefetches videos ahead, builds items."""

    def __init__(self, ds: StreamingLeRobotDataset, eps: np.ndarray, frames: list[np.ndarray], rank: int, wid: int):
        self.ds, self.eps, self.frames = ds, eps, frames
        source = ds._fresh_source()
        self.local = source.is_local
        self.mirror = None
        if not self.local:
            base = os.path.join(ds.cache_dir, f"r{rank}w{wid}")
            os.makedirs(base, exist_ok=True)
            self.mirror = tempfile.mkdtemp(prefix="mirror-", dir=base)
        self.prefetcher = Prefetcher(source.fs, source.root, self.mirror, ds.cache_max_bytes, self.local,
                                     threads=ds.prefetch_threads, retries=ds.fetch_retries, backoff_s=ds.fetch_backoff_s,
                                     max_backoff_s=ds.fetch_max_backoff_s, stats=ds._stats.fetch)
        if self.local:
            self.meta = self.remote_meta = ds.meta
            engine_source = source
        else:
            from fsspec.implementations.local import LocalFileSystem

            self.meta = replace(ds.meta, fs=LocalFileSystem(), root=self.mirror)
            self.remote_meta = replace(ds.meta, fs=source.fs, root=source.root)  # data files: range reads
            engine_source = Source(fs=LocalFileSystem(), root=self.mirror)
        self.template = copy.copy(ds._template)
        self.template.source = engine_source
        self.template.meta = self.meta
        self.template.decoders = ds._decoders
        self.tab_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="episodic-tabular")
        self.blocks: dict[int, Future] = {}
        self.engines: dict[int, FrameEngine] = {}
        self.videos: dict[int, list[str]] = {}  # list position -> acquired video files
        self.video_futs: dict[int, list[Future]] = {}
        self.reader_gen: dict[str, int] = {}  # video file -> mirror generation its reader may have seen
        self.prefetched = 0  # list positions [0, prefetched) have been submitted
        self.released = np.zeros(len(eps), dtype=bool)
        self.data_keys = ds._template.data_keys
        self.video_keys = ds._template.video_keys

    # ---------------------------------------------------------------- loading
    def _submit_until(self, upto: int) -> None:
        upto = min(upto, len(self.eps))
        G = self.ds.tabular_block
        while self.prefetched < upto:
            k = self.prefetched
            self.prefetched += 1
            if self.released[k]:
                continue
            b = k // G
            if b not in self.blocks:
                lo, hi = b * G, min((b + 1) * G, len(self.eps))
                wanted = self.eps[lo:hi][~self.released[lo:hi]]
                self.blocks[b] = self.tab_pool.submit(self._load_block, wanted)
            if not self.local:
                ep = int(self.eps[k])
                rels = [self.meta.video_file_of(ep, key) for key in self.video_keys]
                cams = [self.meta.episodes.cameras[key] for key in self.video_keys]
                self.videos[k] = rels
                self.video_futs[k] = [self.prefetcher.acquire_span(r, float(c.from_ts[ep]), float(c.to_ts[ep]))
                                      for r, c in zip(rels, cams)]

    def _load_block(self, wanted: np.ndarray) -> dict[int, Columns]:
        t0 = time.perf_counter()
        block_eps = np.unique(wanted)
        cols = None
        if self.local:
            cols = load_columns(self.meta, block_eps, self.data_keys)
        elif self.prefetcher.ranges:  # read in place through retried range requests (footer + needed row groups)
            try:
                cols = load_columns(self.remote_meta, block_eps, self.data_keys, open_file=self.prefetcher.open_remote)
            except RangesIgnored:
                self.prefetcher.ranges = False
        if cols is None:  # a server without range requests: whole files into the mirror
            rels = sorted({self.meta.data_file_of(int(e)) for e in block_eps})
            futs = [self.prefetcher.acquire(r) for r in rels]
            try:
                for f in futs:
                    f.result()
                cols = load_columns(self.meta, block_eps, self.data_keys)
            finally:
                for r in rels:
                    self.prefetcher.release(r)
        out = {}
        for i, e in enumerate(block_eps.tolist()):
            s, t = int(cols.starts[i]), int(cols.starts[i + 1])
            out[e] = Columns(episodes=np.asarray([e], dtype=np.int64), starts=np.asarray([0, t - s], dtype=np.int64),
                             arrays={n: a[s:t] for n, a in cols.arrays.items()},
                             images={n: v[s:t] for n, v in cols.images.items()})
        self.ds._stats.tabular_seconds += time.perf_counter() - t0
        return out

    def _engine(self, k: int) -> FrameEngine:
        eng = self.engines.get(k)
        if eng is not None:
            return eng
        t0 = time.perf_counter()
        G = self.ds.tabular_block
        ep = int(self.eps[k])
        cols = self.blocks[k // G].result()[ep]
        for f in self.video_futs.get(k, ()):
            f.result()
        self._discard_stale_readers(self.videos.get(k, ()))
        self.ds._stats.wait_seconds += time.perf_counter() - t0
        eng = copy.copy(self.template)
        eng.columns = cols
        eng.episodes = np.asarray([ep], dtype=np.int64)
        self.engines[k] = eng
        self.ds._stats.episodes_admitted += 1
        return eng

    def _discard_stale_readers(self, rels: Sequence[str]) -> None:
        """Close the decoders of mirror files written to since they may have been opened: FFmpeg may have
        buffered zeros of a hole that now holds this episode's bytes (consumer thread only: the decoder
        cache is not thread-safe)."""
        for rel in rels:
            gen = self.prefetcher.generation(rel)
            if self.reader_gen.get(rel) != gen:
                self.template.decoders.discard(self.template.source.local_path(rel))
                self.reader_gen[rel] = gen

    # ---------------------------------------------------------------- items
    def batch(self, ks: np.ndarray, js: np.ndarray, admitted: int) -> Batch:
        """The batch of items for (list episode, frame) pairs; `admitted` list episodes have entered the pool
        so far."""
        self._submit_until(admitted + self.ds.prefetch_episodes)
        ds = self.ds
        # the pooled episodes this chunk draws from, side by side in one Columns: one vectorised engine call
        # (the engine decodes file by file, forward in time)
        groups = np.unique(ks)
        parts = [self._engine(int(k)).columns for k in groups]
        starts = np.concatenate([[0], np.cumsum([len(c) for c in parts])]).astype(np.int64)
        cols = Columns(episodes=self.eps[groups].astype(np.int64), starts=starts,
                       arrays={n: np.concatenate([c.arrays[n] for c in parts]) for n in parts[0].arrays},
                       images={n: [x for c in parts for x in c.images[n]] for n in parts[0].images})
        eng = copy.copy(self.template)
        eng.columns, eng.episodes = cols, cols.episodes
        g = np.searchsorted(groups, ks)
        rows = starts[g] + np.fromiter((self.frames[k][j] for k, j in zip(ks.tolist(), js.tolist())), np.int64, len(ks))
        t0 = time.perf_counter()
        merged = eng.batch(rows, channels_first=True)
        ds._stats.decode_seconds += time.perf_counter() - t0
        return to_torch(merged, ds.camera_keys, ds.return_uint8, shared=in_worker(), channels_first=True)

    def release(self, done: Sequence[int]) -> None:
        """Release finished list episodes: their rows, decoders' claim and video files."""
        for k in done:
            if self.released[k]:
                continue
            self.released[k] = True
            if k >= self.prefetched:  # never loaded
                continue
            self.engines.pop(k, None)
            for r in self.videos.pop(k, ()):
                self.prefetcher.release(r)
            self.video_futs.pop(k, None)
            G = self.ds.tabular_block
            b = k // G
            lo, hi = b * G, min((b + 1) * G, len(self.eps))
            if self.released[lo:hi].all():
                self.blocks.pop(b, None)

    def close(self) -> None:
        self.tab_pool.shutdown(wait=True, cancel_futures=True)
        self.prefetcher.close()
        self.engines.clear()
        self.blocks.clear()
        if self.mirror is not None:
            shutil.rmtree(self.mirror, ignore_errors=True)


class StreamingLoader:
    """A DataLoader over a StreamingLeRobotDataset that counts the batches it hands out.

    Iterate it like a DataLoader; `state_dict()` / `load_state_dict()` are the dataset's. Workers are not
    persistent: each iteration snapshots the dataset's state (epoch, resume position) into fresh workers.
    When an iteration runs to its end, the dataset moves to the next epoch."""

    def __init__(self, dataset: StreamingLeRobotDataset, batch_size: int = 32, num_workers: int = 0,
                 even_batches: bool | None = None, **kwargs):
        if kwargs.get("persistent_workers"):
            raise ValueError("StreamingLoader workers cannot be persistent: each epoch's state goes to new workers")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.even_batches = even_batches
        self.kwargs = kwargs

    def __iter__(self):
        ds = self.dataset
        state = ds._begin(self.batch_size, self.num_workers)
        ds.chunk_size = self.batch_size  # chunks then coincide with the loader's batches
        rank, ws = resolve_topology(ds.rank, ds.world_size)
        limit = None
        if self.even_batches if self.even_batches is not None else ws > 1:
            state["even_batches"] = True
            per_rank = ds._segment_batches(state)
            limit = min(per_rank)
            if max(per_rank) > limit and rank == 0 and ds._consumed < limit:
                warnings.warn(f"streaming: ranks have {limit}..{max(per_rank)} batches in this epoch; all stop after "
                              f"{limit} (even_batches), skipping {sum(per_rank) - limit * ws} batches' frames of this "
                              f"epoch", stacklevel=2)
        kw = dict(self.kwargs)
        # the dataset hands out whole batches (no per-item dicts) unless items must be collated or transformed
        # one by one
        state["whole_batches"] = not (kw.get("collate_fn") or kw.get("drop_last") or ds.image_transforms)
        if state["whole_batches"]:
            kw.pop("drop_last", None)
            dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=self.num_workers, **kw)
        else:
            dl = torch.utils.data.DataLoader(ds, batch_size=self.batch_size, num_workers=self.num_workers, **kw)
        it = iter(dl)
        if self.num_workers > 0:
            ds._iter_state = None  # the forked workers hold their snapshot now (num_workers=0 takes it in __iter__)
        try:
            while limit is None or ds._consumed < limit:
                try:
                    batch = next(it)
                except StopIteration:
                    break
                ds._consumed += 1
                yield batch
        finally:  # also when the caller stops early (close()): stop the workers now, not at garbage collection
            stop = getattr(it, "_shutdown_workers", None)
            if stop is not None:
                stop()
        ds._end_epoch()

    def state_dict(self) -> dict:
        return self.dataset.state_dict()

    def load_state_dict(self, state: Mapping) -> None:
        self.dataset.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)
