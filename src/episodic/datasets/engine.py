"""The shared core of every dataset mode: batches of items for row positions of a selection of episodes.

Map-style, streaming and mixture datasets all build items here, so window arithmetic, the frame <-> time
mapping and the item layout exist once.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import torch

from ..format.errors import EpisodeIndexError, FrameTimestampError, VideoDecodeError
from ..format.metadata import DatasetMetadata
from ..storage.source import Source
from ..tabular import Columns, delta_offsets, load_columns, window_rows
from ..video import DecoderCache
from ..video.image import decode_image
from .collate import Batch, ItemBatch


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


class FrameEngine:
    """Columns + windows + decoder of one dataset; turns row positions into batched numpy items."""

    def __init__(self, meta: DatasetMetadata, source: Source, episodes: Sequence[int] | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, tolerance_s: float = 1e-4,
                 video_keys: Sequence[str] | None = None, decoder_cache: DecoderCache | None = None,
                 mmap_dir: str | None = None, progress: bool = False):
        self.meta, self.source, self.tolerance_s = meta, source, tolerance_s
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
    def batch(self, positions: Sequence[int] | np.ndarray) -> dict:
        """Items for row positions, batched: numpy arrays with a leading batch axis, cameras uint8
        (B, [T,] H, W, C), pad masks (B, T) bool, and 'task' a list of strings."""
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
        for key in self.video_keys:
            q = windows[key][0] if key in windows else rows[:, None]
            out[key] = self._decode(key, ep_pos, ts[q].astype(np.float64), squeeze=key not in windows)
        for key in self.data_keys:
            q = windows[key][0] if key in windows else rows
            if key in self.image_keys:
                out[key] = self._images(key, q)
            else:
                out[key] = cols.arrays[key][q]
        for key, (_, pad) in windows.items():
            out[f"{key}_is_pad"] = pad
        out["task"] = self.tasks[cols.arrays["task_index"][rows]].tolist()
        return out

    def _decode(self, key: str, ep_pos: np.ndarray, times: np.ndarray, squeeze: bool) -> np.ndarray:
        cam = self.meta.episodes.cameras[key]
        eps = self.episodes[ep_pos]
        query = cam.from_ts[eps][:, None] + times  # (B, T) seconds inside each episode's file
        fids = cam.file_id[eps]
        frames = None
        for fid in np.unique(fids):
            sel = np.flatnonzero(fids == fid)
            rel = cam.files[fid]
            try:
                reader = self.decoders.get(self.source.local_path(rel))
                got = reader.frames_at(query[sel].reshape(-1), self.tolerance_s)
            except (FrameTimestampError, VideoDecodeError) as e:
                bad_eps = sorted(set(eps[sel].tolist()))
                raise type(e)(f"episode {bad_eps[0] if len(bad_eps) == 1 else bad_eps}, camera {key!r}: {e}") from None
            if frames is None:
                frames = np.empty((len(eps), query.shape[1], *got.shape[1:]), dtype=np.uint8)
            frames[sel] = got.reshape(len(sel), query.shape[1], *got.shape[1:])
        return frames[:, 0] if squeeze else frames

    def _images(self, key: str, q: np.ndarray) -> np.ndarray:
        store = self.columns.images[key]
        flat = [decode_image(store[int(r)], f"{self.meta.root}: row {int(r)} feature {key!r}") for r in q.reshape(-1)]
        return np.stack(flat).reshape(*q.shape, *flat[0].shape)


def to_torch(batch: dict, camera_keys: Sequence[str], return_uint8: bool = False, shared: bool = False) -> Batch:
    """numpy batch -> torch Batch: cameras HWC -> CHW, kept uint8 (float32 in [0, 1] when looked at, unless
    return_uint8). With `shared` (in a DataLoader worker) all tensors are views of one shared-memory block."""
    arrays: dict = {}
    for key, value in batch.items():
        if key == "task":
            arrays[key] = value
        elif key in camera_keys:
            arrays[key] = np.ascontiguousarray(np.moveaxis(value, -1, -3))
        else:
            arrays[key] = np.ascontiguousarray(value)
    numeric = {k: v for k, v in arrays.items() if k != "task"}
    tensors = _shared_block(numeric) if shared else {k: torch.from_numpy(v) for k, v in numeric.items()}
    tensors = {k: (arrays[k] if k == "task" else tensors[k]) for k in arrays}  # item key order
    return Batch(tensors, to_float=set() if return_uint8 else {k for k in camera_keys if k in tensors})


def _shared_block(arrays: dict[str, np.ndarray], align: int = 64) -> dict[str, torch.Tensor]:
    """Copies of `arrays` as tensors that are views of one shared-memory block."""
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
