"""One mixture entry's batch brought into the mixture's shared layout (`mixture.layout`).

`empty_batch(layout, n, dtype)` makes a batch of n items of the shared layout in the memory this process hands
batches out from (`memory.place`: one shared-memory block in a DataLoader worker, recycled frame buffers in the
main process), every value padding: frames zeros with their ``_is_pad`` True, state/action zeros with all-False
masks. `fill(out, rows, part, entry, layout)` writes an entry's part (its `FrameEngine` batch for those rows,
built with `scratch`: ordinary memory, cameras of the same dtype) into rows `rows`: camera roles from the
entry's mapping, state and action with the entry's index selection into the first dimensions (float32) and
their masks, windows' pad masks, task text, the entry's index and name, and the frame's own bookkeeping values.
"""

from __future__ import annotations

import numpy as np
import torch

from ..format.errors import DatasetFormatError
from ..mixture.layout import ACTION, STATE, EntryLayout, MixtureLayout
from .memory import Empty, place

__all__ = ["empty_batch", "fill", "scratch"]


def scratch(arrays: dict) -> dict:
    """Tensors for an entry's part of a batch in ordinary memory (`FrameEngine.batch`'s `place`): the part is
    copied into the mixture's batch, which is what gets shared."""
    return {k: torch.from_numpy(np.empty(v.shape, v.dtype) if isinstance(v, Empty) else np.asarray(v))
            for k, v in arrays.items()}


def _shapes(layout: MixtureLayout, n: int, dtype: str) -> dict:
    shapes: dict = {}
    for role, key in zip(layout.cameras, layout.camera_keys):
        t = layout.windows.get(role)
        h, w = layout.image_size
        shapes[key] = ((n, 3, h, w) if t is None else (n, t, 3, h, w), dtype)
        shapes[f"{key}_is_pad"] = ((n,) if t is None else (n, t), bool)
    for role, key, dim in (("state", STATE, layout.state_dim), ("action", ACTION, layout.action_dim)):
        if dim:
            t = layout.windows.get(role)
            shapes[key] = ((n, dim) if t is None else (n, t, dim), np.float32)
            shapes[f"{key}_mask"] = ((n, dim), bool)
            if t is not None:
                shapes[f"{key}_is_pad"] = ((n, t), bool)
    shapes["timestamp"] = ((n,), np.float32)
    for key in ("frame_index", "episode_index", "index", "dataset_index"):
        shapes[key] = ((n,), np.int64)
    return shapes


def empty_batch(layout: MixtureLayout, n: int, dtype: str = "uint8") -> dict:
    """A batch of `n` items of `layout` (cameras of `dtype`), placed, every value padding; 'task' and
    'dataset_name' are lists of strings."""
    out = place({k: Empty(shape, np.dtype(dt)) for k, (shape, dt) in _shapes(layout, n, dtype).items()})
    for key, t in out.items():  # placed buffers are not initialised (recycled)
        t.fill_(True if key.endswith("_is_pad") else 0)
    out["task"] = [""] * n
    out["dataset_name"] = [""] * n
    return out


def _np(x) -> np.ndarray:
    return x.numpy() if torch.is_tensor(x) else np.asarray(x)


def _vector(values, indices, windowed: bool) -> np.ndarray:
    v = _np(values)
    if v.ndim == (2 if windowed else 1):  # a 1-dimensional feature comes without its axis
        v = v[..., None]
    if indices is not None:
        v = v[..., np.asarray(indices, dtype=np.int64)]
    return v.astype(np.float32, copy=False)


def fill(out: dict, rows: np.ndarray, part: dict, entry: EntryLayout, layout: MixtureLayout) -> None:
    """Write `part` (entry `entry`'s engine batch for len(rows) items, cameras of `out`'s dtype) into `out`'s
    `rows` (an int array)."""
    view = {k: v.numpy() for k, v in out.items() if torch.is_tensor(v)}
    for role, key in zip(layout.cameras, layout.camera_keys):
        src = entry.cameras.get(role)
        if src is None:
            continue
        frames = _np(part[src])
        if tuple(frames.shape[-2:]) != tuple(layout.image_size):
            raise DatasetFormatError(f"entry {entry.name!r}: camera {src!r} (role {role!r}) gives {frames.shape[-2]}x"
                                     f"{frames.shape[-1]} frames, the mixture's image_size is {layout.image_size[0]}x"
                                     f"{layout.image_size[1]}")
        view[key][rows] = frames
        pad = part.get(f"{src}_is_pad")
        view[f"{key}_is_pad"][rows] = _np(pad) if pad is not None and role in layout.windows else False
    for role, key, src, indices, dim in (("state", STATE, entry.state_key, entry.state_indices, entry.state_dim),
                                         ("action", ACTION, entry.action_key, entry.action_indices, entry.action_dim)):
        if src is None or key not in view:
            continue
        windowed = role in layout.windows
        view[key][rows, ..., :dim] = _vector(part[src], indices, windowed)
        view[f"{key}_mask"][rows, :dim] = True
        if windowed:
            view[f"{key}_is_pad"][rows] = _np(part[f"{src}_is_pad"])
    view["timestamp"][rows] = _np(part["timestamp"])
    for key in ("frame_index", "episode_index", "index"):
        view[key][rows] = _np(part[key])
    view["dataset_index"][rows] = entry.index
    tasks = part["task"] if entry.task_key == "task" else _np(part[entry.task_key]).tolist()
    for r, text in zip(np.asarray(rows).tolist(), tasks):
        out["task"][r] = str(text)
        out["dataset_name"][r] = entry.name
