"""A mixture's batch in its shared layout (`mixture.layout`), built from its entries' parts (the map-style
mixture; a streaming one gathers its batches from pooled episodes already in the layout, `mixture_pool`, with
the same values and this module's helpers).

`build(layout, n, dtype, parts)` makes the batch of n items from `Part`s (rows of the batch that are positions of
one entry's `FrameEngine`): the batch is placed once (`empty_batch`: in the memory this process hands batches out
from, `memory.place`: one shared-memory block in a DataLoader worker, recycled frame buffers in the main process);
each entry's camera frames are decoded straight into their rows of it (`FrameEngine.part` and `engine.run_jobs`,
the jobs of every part run together: nothing is copied), and the tabular values of all parts are written key by
key: camera roles from each entry's mapping (zeros with ``_is_pad`` True for a role the entry has none of),
state and action with the entry's index selection into the first dimensions (float32) and their masks, windows'
pad masks, task text, the entry's index and name, and the frame's own bookkeeping values: one assignment per key
for the whole batch (per key and dimension for state and action), not one per key and entry.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import torch

from ..format.errors import DatasetFormatError
from ..mixture.layout import ACTION, STATE, EntryLayout, MixtureLayout
from .engine import FrameEngine, run_jobs
from .memory import Empty, place

__all__ = ["Part", "build", "camera_targets", "empty_batch", "task_texts", "vector"]


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


def empty_batch(layout: MixtureLayout, n: int, dtype: str = "uint8", zero_frames: bool = True) -> dict:
    """A batch of `n` items of `layout` (cameras of `dtype`), placed, every value padding (with
    ``zero_frames=False`` the camera frames are left as they are: the caller writes every row of them);
    'task' and 'dataset_name' are lists of strings."""
    out = place({k: Empty(shape, np.dtype(dt)) for k, (shape, dt) in _shapes(layout, n, dtype).items()})
    cameras = set(layout.camera_keys)
    for key, t in out.items():  # placed buffers are not initialised (recycled)
        if zero_frames or key not in cameras:
            t.fill_(True if key.endswith("_is_pad") else 0)
    out["task"] = [""] * n
    out["dataset_name"] = [""] * n
    return out


def vector(values: np.ndarray, indices, windowed: bool) -> np.ndarray:
    """State or action values (B, [T,] d) with the entry's index selection, float32."""
    v = np.asarray(values)
    if v.ndim == (2 if windowed else 1):  # a 1-dimensional feature comes without its axis
        v = v[..., None]
    if indices is not None:
        v = v[..., np.asarray(indices, dtype=np.int64)]
    return v.astype(np.float32, copy=False)


# ---------------------------------------------------------------------------------------------- whole batches
class Part(NamedTuple):
    """One entry's items of a batch: rows `rows` of the batch are positions `positions` of `engine` (the
    entry's `FrameEngine`)."""

    entry: EntryLayout
    rows: np.ndarray
    engine: FrameEngine
    positions: np.ndarray


def build(layout: MixtureLayout, n: int, dtype: str, parts: Sequence[Part]) -> dict:
    """The batch of `n` items made of `parts` (every row in exactly one part), placed as `empty_batch` places
    it, cameras of `dtype`: each part's tabular values from its engine (`FrameEngine.part`), written key by key
    for all parts at once; camera frames decoded straight into the batch by the jobs of every part
    (`engine.run_jobs`: no frame is copied), zeros where an entry has no camera in a role. The values are
    `fill`'s of each part's `FrameEngine.batch`."""
    out = empty_batch(layout, n, dtype, zero_frames=False)
    views = {k: v.numpy() for k, v in out.items() if torch.is_tensor(v)}
    done, jobs = [], []
    for p in parts:
        targets, copies = camera_targets(p.entry, layout)
        try:
            values, js = p.engine.part(p.positions, {src: views[key] for src, key in targets.items()}, p.rows)
        except DatasetFormatError as e:  # e.g. frames of a size other than the mixture's: name the entry
            raise DatasetFormatError(f"entry {p.entry.name!r}: {e}") from None
        done.append((p, values, copies))
        jobs += js
    run_jobs(jobs)
    _place(out, views, done, layout)
    return out


def camera_targets(entry: EntryLayout, layout: MixtureLayout) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Where an entry's cameras go: dataset key -> item key (its first role), and (item key, item key) copies
    for a camera that fills several roles (computed once per entry and layout)."""
    known = layout.__dict__.setdefault("_camera_targets", {})
    got = known.get(entry.index)
    if got is None:
        got = known[entry.index] = _camera_targets(entry, layout)
    return got


def _camera_targets(entry: EntryLayout, layout: MixtureLayout) -> tuple[dict[str, str], list[tuple[str, str]]]:
    targets: dict[str, str] = {}
    copies: list[tuple[str, str]] = []
    for role, key in zip(layout.cameras, layout.camera_keys):
        src = entry.cameras.get(role)
        if src is None:
            continue
        if src in targets:
            copies.append((targets[src], key))
        else:
            targets[src] = key
    return targets, copies


def _cat(arrays: list) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _place(out: dict, view: dict, done: list, layout: MixtureLayout) -> None:
    """Write the parts' tabular values into the batch, one assignment per key for all parts (per group of equal
    dimension for state and action)."""
    if not done:
        return
    rows = [p.rows for p, _, _ in done]
    every = _cat(rows)
    for key in ("timestamp", "frame_index", "episode_index", "index"):
        view[key][every] = _cat([v[key] for _, v, _ in done])
    view["dataset_index"][every] = np.repeat([p.entry.index for p, _, _ in done], [len(r) for r in rows])
    for role, key in zip(layout.cameras, layout.camera_keys):
        windowed = role in layout.windows
        have, pads, missing = [], [], []
        for p, values, _ in done:
            src = p.entry.cameras.get(role)
            if src is None:
                missing.append(p.rows)  # zeros, padding (empty_batch's mask)
            else:
                have.append(p.rows)
                if windowed:
                    pad = values.get(f"{src}_is_pad")
                    pads.append(pad if pad is not None else np.zeros((len(p.rows), layout.windows[role]), bool))
        if missing:
            view[key][_cat(missing)] = 0
        if have:
            view[f"{key}_is_pad"][_cat(have)] = _cat(pads) if windowed else False
    for p, _, copies in done:
        for src_key, key in copies:
            view[key][p.rows] = view[src_key][p.rows]
            view[f"{key}_is_pad"][p.rows] = view[f"{src_key}_is_pad"][p.rows]
    for role, key in (("state", STATE), ("action", ACTION)):
        if key not in view:
            continue
        windowed = role in layout.windows
        groups: dict[int, tuple[list, list, list]] = {}
        for p, values, _ in done:
            e = p.entry
            src, indices, dim = (e.state_key, e.state_indices, e.state_dim) if role == "state" else \
                (e.action_key, e.action_indices, e.action_dim)
            if src is None:
                continue
            g = groups.setdefault(dim, ([], [], []))
            g[0].append(p.rows)
            g[1].append(vector(values[src], indices, windowed))
            if windowed:
                g[2].append(values[f"{src}_is_pad"])
        for dim, (rs, vs, pads) in groups.items():
            r = _cat(rs)
            view[key][r, ..., :dim] = _cat(vs)
            view[f"{key}_mask"][r, :dim] = True
            if windowed:
                view[f"{key}_is_pad"][r] = _cat(pads)
    for p, values, _ in done:
        e = p.entry
        for r, text in zip(p.rows.tolist(), task_texts(e, values)):
            out["task"][r] = text
            out["dataset_name"][r] = e.name


def task_texts(entry: EntryLayout, values: dict) -> list[str]:
    """An entry's items' task text from their values (`FrameEngine.part`'s): the episode's task, the entry's
    text feature (`task_key`), or "" for every item when the entry removes its task role (`task_key` None)."""
    if entry.task_key is None:
        return [""] * len(values["task"])
    tasks = values["task"] if entry.task_key == "task" else np.asarray(values[entry.task_key]).tolist()
    return [str(t) for t in tasks]
