"""The shared core of every dataset mode: batches of items for row positions of a selection of episodes.

Map-style, streaming and mixture datasets all build items here, so window arithmetic, the frame <-> time
mapping and the item layout exist once.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping, Sequence

import numpy as np
import torch

from ..format.errors import EpisodeIndexError, FrameTimestampError, VideoDecodeError
from ..format.metadata import DatasetMetadata
from ..storage.source import Source
from ..tabular import Columns, delta_offsets, load_columns, window_rows
from ..video import DecoderCache
from ..video.image import decode_image
from .collate import Batch, ItemBatch, worker_sharing


def select_episodes(meta: DatasetMetadata, episodes: Sequence[int] | None) -> np.ndarray:
    """Selected episodes in ascending order (LeRobot's order, whatever order the list was given in)."""
    n = len(meta.episodes)
    if episodes is None:
        return np.arange(n, dtype=np.int64)
    sel = np.asarray(list(episodes), dtype=np.int64).reshape(-1)
    bad = sel[(sel < 0) | (sel >= n)]
    if len(bad):
        raise EpisodeIndexError(f"{meta.root}: episode(s) {bad.tolist()[:10]} out of range: the dataset has {n} episodes (0..{n - 1})")
    return np.unique(sel)


def decode_threads() -> int:
    """Decode threads for this process: its share of the CPU cores it may run on (a DataLoader worker gets
    cores / num_workers, at least 1). EPISODIC_DECODE_THREADS overrides."""
    env = os.environ.get("EPISODIC_DECODE_THREADS")
    if env:
        return max(1, int(env))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    info = torch.utils.data.get_worker_info()
    return max(1, min(8, cores // (info.num_workers if info is not None else 1)))


_POOLS: dict = {}


def _pool(n: int) -> ThreadPoolExecutor:
    """This process's decode thread pool (a forked child makes its own: the parent's threads are not there)."""
    key = (os.getpid(), n)
    pool = _POOLS.get(key)
    if pool is None:
        _POOLS.clear()  # a parent's pools (after fork) or another size: left to the garbage collector
        pool = _POOLS[key] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="episodic-decode")
    return pool


class FrameEngine:
    """Columns + windows + decoder of one dataset; turns row positions into batched numpy items."""

    def __init__(self, meta: DatasetMetadata, source: Source, episodes: Sequence[int] | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, tolerance_s: float = 1e-4,
                 video_keys: Sequence[str] | None = None, decoder_cache: DecoderCache | None = None,
                 mmap_dir: str | None = None, progress: bool = False, decode_threads: int | None = None):
        self.meta, self.source, self.tolerance_s = meta, source, tolerance_s
        self.decode_threads = decode_threads  # None: decode_threads() of the process that decodes
        info = meta.info
        if video_keys is None:
            self.video_keys = info.video_keys
        else:
            unknown = [k for k in video_keys if k not in info.video_keys]
            if unknown:
                raise ValueError(f"{meta.root}: video_keys {unknown} are not cameras of this dataset (cameras: {info.video_keys})")
            self.video_keys = [k for k in info.video_keys if k in video_keys]
        self.image_keys = info.image_keys
        self.data_keys = [k for k in info.tabular_keys]  # info order, like LeRobot's hf_dataset columns
        offsets = delta_offsets(delta_timestamps, info.fps, tolerance_s, known_keys=list(info.features))
        # windows of cameras left out by `video_keys` are dropped with the cameras
        self.offsets = {k: v for k, v in offsets.items() if k in self.data_keys or k in self.video_keys}
        self.episodes = select_episodes(meta, episodes)
        self.columns: Columns = load_columns(meta, self.episodes, self.data_keys, mmap_dir=mmap_dir, progress=progress)
        self.decoders = decoder_cache or DecoderCache()
        self.tasks = np.asarray(meta.tasks + [""], dtype=object)

    def __len__(self) -> int:
        return len(self.columns)

    # ------------------------------------------------------------------ items
    def batch(self, positions: Sequence[int] | np.ndarray, channels_first: bool = False) -> dict:
        """Items for row positions, batched: numpy arrays with a leading batch axis, cameras uint8
        (B, [T,] H, W, C) (with channels_first (B, [T,] C, H, W)), pad masks (B, T) bool, and 'task' a list
        of strings."""
        rows = np.asarray(positions, dtype=np.int64).reshape(-1)
        n = len(self)
        if len(rows) and (rows.min() < -n or rows.max() >= n):
            raise IndexError(f"index {int(rows[(rows < -n) | (rows >= n)][0])} out of range for {n} frames")
        rows = np.where(rows < 0, rows + n, rows)
        cols = self.columns
        ep_pos = cols.episode_of_rows(rows)
        start, end = cols.starts[ep_pos], cols.starts[ep_pos + 1]
        windows = {k: window_rows(rows, start, end, off) for k, off in self.offsets.items()}
        out: dict = {}
        ts = cols.arrays["timestamp"]
        if self.video_keys:
            times = {k: ts[windows[k][0] if k in windows else rows[:, None]].astype(np.float64) for k in self.video_keys}
            frames = self._decode(ep_pos, times, channels_first)
            for key in self.video_keys:
                out[key] = frames[key] if key in windows else frames[key][:, 0]
        for key in self.data_keys:
            q = windows[key][0] if key in windows else rows
            if key in self.image_keys:
                out[key] = self._images(key, q)
                if channels_first:
                    out[key] = np.ascontiguousarray(np.moveaxis(out[key], -1, -3))
            else:
                out[key] = cols.arrays[key][q]
        for key, (_, pad) in windows.items():
            out[f"{key}_is_pad"] = pad
        out["task"] = self.tasks[cols.arrays["task_index"][rows]].tolist()
        return out

    def _decode(self, ep_pos: np.ndarray, times: Mapping[str, np.ndarray], channels_first: bool = False) -> dict[str, np.ndarray]:
        """Frames (B, T, H, W, C) (or (B, T, C, H, W)) uint8 per camera for times (B, T) inside each row's
        episode. One job per (camera, file), each one forward pass that writes its rows of the output; jobs
        run on `decode_threads` threads (PyAV decodes and numpy copies without the GIL), so a process with
        cores to spare decodes its cameras side by side."""
        out: dict[str, np.ndarray] = {}
        eps = self.episodes[ep_pos]
        jobs = []  # (camera, file, batch rows, flat query times)
        for key, t in times.items():
            cam = self.meta.episodes.cameras[key]
            query = cam.from_ts[eps][:, None] + t  # seconds inside each episode's file
            fids = cam.file_id[eps]
            for fid in np.unique(fids):
                sel = np.flatnonzero(fids == fid)
                jobs.append((key, cam.files[fid], sel, query[sel].reshape(-1)))

        def named(job, fn):  # errors name the episode(s) and camera as well as the file
            try:
                return fn()
            except (FrameTimestampError, VideoDecodeError) as e:
                bad = sorted(set(eps[job[2]].tolist()))
                raise type(e)(f"episode {bad[0] if len(bad) == 1 else bad}, camera {job[0]!r}: {e}") from None

        def reader_for(job):
            return named(job, lambda: self.decoders.get(self.source.local_path(job[1])))

        def run(job, reader=None):
            key, _, sel, q = job
            got = named(job, lambda: (reader or reader_for(job)).frames_at(q, self.tolerance_s))
            got = got.reshape(len(sel), times[key].shape[1], *got.shape[1:])
            dest = out.get(key)
            if dest is None:  # setdefault: another thread may have made it meanwhile
                shape = (*times[key].shape, got.shape[-1], *got.shape[2:4]) if channels_first else (*times[key].shape, *got.shape[2:])
                dest = out.setdefault(key, np.empty(shape, dtype=np.uint8))
            dest[sel] = np.moveaxis(got, -1, -3) if channels_first else got

        threads = self.decode_threads or decode_threads()
        paths = {rel for _, rel, _, _ in jobs}
        # in parallel when there are threads to spare, every file is its own job (a reader is used by one
        # thread at a time), and all readers stay open through the batch
        if threads > 1 and len(jobs) > 1 and len(paths) == len(jobs) and len(paths) <= self.decoders.max_open:
            # readers are taken here, in one thread (the cache is not thread-safe)
            readers = [reader_for(j) for j in jobs]
            list(_pool(threads).map(run, jobs, readers))
        else:
            for j in jobs:
                run(j)
        return out

    def _images(self, key: str, q: np.ndarray) -> np.ndarray:
        store = self.columns.images[key]
        flat = [decode_image(store[int(r)], f"{self.meta.root}: row {int(r)} feature {key!r}") for r in q.reshape(-1)]
        return np.stack(flat).reshape(*q.shape, *flat[0].shape)


def to_torch(batch: dict, camera_keys: Sequence[str], return_uint8: bool = False, shared: bool = False,
             channels_first: bool = False) -> Batch:
    """numpy batch -> torch Batch: cameras HWC -> CHW (unless the batch is `channels_first` already), kept
    uint8 (float32 in [0, 1] when looked at, unless return_uint8). With `shared` (in a DataLoader worker) all
    tensors are views of one shared-memory block."""
    arrays: dict = {}
    for key, value in batch.items():
        if key == "task":
            arrays[key] = value
        elif key in camera_keys and not channels_first:
            arrays[key] = np.ascontiguousarray(np.moveaxis(value, -1, -3))
        else:
            arrays[key] = np.ascontiguousarray(value)
    numeric = {k: v for k, v in arrays.items() if k != "task"}
    tensors = _shared_block(numeric) if shared else {k: torch.from_numpy(v) for k, v in numeric.items()}
    tensors = {k: (arrays[k] if k == "task" else tensors[k]) for k in arrays}  # item key order
    return Batch(tensors, to_float=set() if return_uint8 else {k for k in camera_keys if k in tensors})


def _shared_block(arrays: dict[str, np.ndarray], align: int = 64) -> dict[str, torch.Tensor]:
    """Copies of `arrays` as tensors that are views of one shared-memory block."""
    worker_sharing()
    offsets, total = {}, 0
    for key, a in arrays.items():
        offsets[key] = total
        total += -(-a.nbytes // align) * align
    storage = torch.empty(max(total, 1), dtype=torch.uint8).share_memory_().untyped_storage()
    out = {}
    for key, a in arrays.items():
        t = torch.empty(0, dtype=torch.from_numpy(a[:0]).dtype).set_(storage, offsets[key] // a.itemsize, a.shape)
        t.numpy()[...] = a
        out[key] = t
    return out


def unbatch(batch: Batch, transforms: Callable | None = None, camera_keys: Sequence[str] = ()) -> Sequence[dict]:
    """The items of a batch: made on demand (default_collate then returns the batch whole), or, with
    transforms, transformed one by one."""
    if transforms is None:
        return ItemBatch(batch)
    items = [dict(batch.item(b)) for b in range(batch.size)]
    for item in items:
        for k in camera_keys:
            if k in item:
                item[k] = transforms(item[k])
    return items
