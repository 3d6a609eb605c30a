"""One mixture entry's batch brought into the mixture's shared layout (`mixture.layout`), in numpy.

`empty_batch(layout, n)` makes the arrays of a batch of n items of the shared layout (frames zeros and marked
as padding, masks False); `fill(out, rows, batch, entry, layout)` writes an entry's `FrameEngine` batch
(channels first) into rows `rows` of it: camera roles from the entry's mapping, state and action with the
entry's index selection into the first dimensions (float32) with their masks, windows' pad masks, task text,
the entry's index and name, and the frame's own bookkeeping values. Roles the entry lacks stay zeros with
their ``_is_pad`` True (and an all-False mask for state/action).
"""

from __future__ import annotations

import numpy as np

from ..format.errors import DatasetFormatError
from ..mixture.layout import ACTION, STATE, EntryLayout, MixtureLayout

__all__ = ["empty_batch", "fill"]


def empty_batch(layout: MixtureLayout, n: int) -> dict:
    """A batch of `n` items of `layout`, every value padding."""
    out: dict = {}
    for role, key in zip(layout.cameras, layout.camera_keys):
        t = layout.windows.get(role)
        h, w = layout.image_size
        out[key] = np.zeros((n, 3, h, w) if t is None else (n, t, 3, h, w), dtype=np.uint8)
        out[f"{key}_is_pad"] = np.ones((n,) if t is None else (n, t), dtype=bool)
    for role, key, dim in (("state", STATE, layout.state_dim), ("action", ACTION, layout.action_dim)):
        if not dim:
            continue
        t = layout.windows.get(role)
        out[key] = np.zeros((n, dim) if t is None else (n, t, dim), dtype=np.float32)
        out[f"{key}_mask"] = np.zeros((n, dim), dtype=bool)
        if t is not None:
            out[f"{key}_is_pad"] = np.ones((n, t), dtype=bool)
    out["timestamp"] = np.zeros(n, dtype=np.float32)
    for key in ("frame_index", "episode_index", "index", "dataset_index"):
        out[key] = np.zeros(n, dtype=np.int64)
    out["task"] = [""] * n
    out["dataset_name"] = [""] * n
    return out


def _vector(values: np.ndarray, indices, windowed: bool) -> np.ndarray:
    v = np.asarray(values)
    if v.ndim == (2 if windowed else 1):  # a 1-dimensional feature comes without its axis
        v = v[..., None]
    if indices is not None:
        v = v[..., np.asarray(indices, dtype=np.int64)]
    return v.astype(np.float32, copy=False)


def fill(out: dict, rows: np.ndarray, batch: dict, entry: EntryLayout, layout: MixtureLayout) -> None:
    """Write `batch` (entry `entry`'s engine batch for len(rows) items, channels first) into `out`'s `rows`."""
    for role, key in zip(layout.cameras, layout.camera_keys):
        src = entry.cameras.get(role)
        if src is None:
            continue
        frames = batch[src]
        if tuple(frames.shape[-2:]) != tuple(layout.image_size):
            raise DatasetFormatError(f"entry {entry.name!r}: camera {src!r} (role {role!r}) gives {frames.shape[-2]}x"
                                     f"{frames.shape[-1]} frames, the mixture's image_size is {layout.image_size[0]}x"
                                     f"{layout.image_size[1]}")
        out[key][rows] = frames
        pad = batch.get(f"{src}_is_pad")
        out[f"{key}_is_pad"][rows] = pad if pad is not None and role in layout.windows else False
    for role, key, src, indices, dim in (("state", STATE, entry.state_key, entry.state_indices, entry.state_dim),
                                         ("action", ACTION, entry.action_key, entry.action_indices, entry.action_dim)):
        if src is None or key not in out:
            continue
        windowed = role in layout.windows
        out[key][rows, ..., :dim] = _vector(batch[src], indices, windowed)
        out[f"{key}_mask"][rows, :dim] = True
        if windowed:
            out[f"{key}_is_pad"][rows] = batch[f"{src}_is_pad"]
    out["timestamp"][rows] = batch["timestamp"]
    for key in ("frame_index", "episode_index", "index"):
        out[key][rows] = batch[key]
    out["dataset_index"][rows] = entry.index
    tasks = batch["task"] if entry.task_key == "task" else batch[entry.task_key]
    for r, text in zip(rows.tolist(), tasks):
        out["task"][r] = str(text)
        out["dataset_name"][r] = entry.name
