"""A streaming mixture consumer's pooled episodes, brought into the mixture's layout once, and its batches
gathered from them.

When a slot (one episode of one entry) is first drawn from, its rows are put into the mixture's layout once
(`PooledEpisode`): bookkeeping columns, state and action with the entry's index selection (float32, zero-padded
to the mixture's dimension), task text, and for each mapped video camera the frame of each row in its file
(located with the entry's tolerance). A batch is then a few gathers over the drawn slots' rows put side by side
(`gather`): one per key for the whole batch whatever the entries, each row's window offsets its own entry's
(its fps grid); frames are decoded straight into the batch, one forward pass per file (`engine.run_jobs`).

The values are `harmonise.build`'s over the entries' `FrameEngine.part`s (what the map-style mixture returns for
the same frames; the tests compare them): missing cameras zeros with ``_is_pad`` True, state/action masks,
padding masks of windows, ``dataset_index``, ``dataset_name``. A camera whose rows are not all within tolerance
of a frame is located per batch instead, so the error names the rows asked for, when they are asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..counters import Counters
from ..format.errors import DatasetFormatError, FrameTimestampError
from ..format.metadata import DatasetMetadata
from ..mixture.layout import ACTION, STATE, EntryLayout, MixtureLayout
from ..storage.source import Source
from ..tabular import Columns, window_rows
from ..video import DecoderCache
from .engine import FrameEngine, FrameJob, ItemSpec, flat_frames, run_jobs
from .harmonise import camera_targets, empty_batch, task_texts, vector

__all__ = ["PooledEpisode", "gather", "positions_by_value"]

_BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index")


@dataclass
class _Camera:
    """One mapped video camera of a pooled episode: its file, and each row's frame in it (None: some row has no
    frame within tolerance; then `times`, each row's time in the file, are located per batch)."""

    rel: str
    frames: np.ndarray | None
    times: np.ndarray


class PooledEpisode:
    """One episode of entry `entry` (its rows `columns`, read by the entry's `ConsumerPipeline`) in the
    mixture's layout."""

    def __init__(self, layout: MixtureLayout, entry: EntryLayout, spec: ItemSpec, meta: DatasetMetadata,
                 source: Source, columns: Columns, decoders: DecoderCache, counters: Counters):
        self.entry = entry
        self.engine = FrameEngine(spec, meta, source, columns, decoders=decoders, counters=counters)
        self.n = n = len(columns)
        arrays = columns.arrays
        self.tab = {key: arrays[key] for key in _BOOKKEEPING}
        self.masks: dict[str, np.ndarray] = {}
        for key, src, indices, dim in ((STATE, entry.state_key, entry.state_indices, layout.state_dim),
                                       (ACTION, entry.action_key, entry.action_indices, layout.action_dim)):
            if not dim:
                continue
            values = np.zeros((n, dim), np.float32)
            mask = np.zeros(dim, bool)
            if src is not None:
                v = vector(arrays[src], indices, windowed=False)
                values[:, :v.shape[1]] = v
                mask[:v.shape[1]] = True
            self.tab[key] = values
            self.masks[key] = mask
        self.task = np.asarray(task_texts(entry, {"task": spec.tasks_at(arrays["task_index"])}
                                          if entry.task_key in ("task", None) else arrays), dtype=object)
        # each windowed role's offsets (frames on the entry's fps grid), for the roles the entry has
        sources = {"state": entry.state_key, "action": entry.action_key, **entry.cameras}
        self.offsets = {role: spec.offsets[sources[role]] for role in layout.windows
                        if sources.get(role) is not None and sources[role] in spec.offsets}
        self.targets, self.copies = camera_targets(entry, layout)
        self.cameras: dict[str, _Camera] = {}
        ep = int(columns.episodes[0])
        eps = columns.episodes[:1]
        ts = arrays["timestamp"].astype(np.float64) if spec.video_keys else None
        for src in self.targets:
            if layout.image_size is not None:  # frames of another size than the batch's: name the entry
                try:
                    self.engine.check_frame_shape(src, (3, *layout.image_size))
                except DatasetFormatError as e:
                    raise DatasetFormatError(f"entry {entry.name!r}: {e}") from None
            if src not in spec.video_keys:
                continue
            rel = meta.video_file_of(ep, src)
            times = meta.episodes.cameras[src].from_ts[ep] + ts
            reader = FrameJob(self.engine, src, rel, eps, times, None, None, None).reader()  # size checked, errors named
            try:
                frames = reader.locate(times, spec.tolerance_s)
            except FrameTimestampError:
                frames = None
            self.cameras[src] = _Camera(rel, frames, times)


def gather(layout: MixtureLayout, slots: list[PooledEpisode], g: np.ndarray, local: np.ndarray, dtype: str) -> dict:
    """The batch of items whose row i is row `local[i]` of pooled episode `slots[g[i]]`, placed as
    `harmonise.empty_batch` places it, cameras of `dtype`."""
    B = len(g)
    out = empty_batch(layout, B, dtype, zero_frames=False)
    view = {k: v.numpy() for k, v in out.items() if not isinstance(v, list)}
    lengths = np.fromiter((s.n for s in slots), np.int64, len(slots))
    starts = np.zeros(len(slots) + 1, np.int64)
    np.cumsum(lengths, out=starts[1:])
    start, end = starts[g], starts[g + 1]
    rows = start + local
    windows = {}
    for role, t in layout.windows.items():
        none = np.zeros(t, np.int64)
        off = np.stack([s.offsets.get(role, none) for s in slots])[g]
        windows[role] = window_rows(rows, start, end, off)
    for key in _BOOKKEEPING:
        view[key][:] = np.concatenate([s.tab[key] for s in slots])[rows]
    view["dataset_index"][:] = np.fromiter((s.entry.index for s in slots), np.int64, len(slots))[g]
    for role, key in (("state", STATE), ("action", ACTION)):
        if key not in view:
            continue
        win = windows.get(role)
        view[key][:] = np.concatenate([s.tab[key] for s in slots])[rows if win is None else win[0]]
        masks = np.stack([s.masks[key] for s in slots])[g]
        view[f"{key}_mask"][:] = masks
        if win is not None:  # all padding for a row whose entry has no such role (no real dimension)
            view[f"{key}_is_pad"][:] = win[1] | ~masks.any(axis=1, keepdims=True)
    out["task"] = np.concatenate([s.task for s in slots])[rows].tolist()
    out["dataset_name"] = [slots[i].entry.name for i in g.tolist()]
    _cameras(layout, slots, g, local, windows, starts, view)
    return out


def _cameras(layout: MixtureLayout, slots: list[PooledEpisode], g: np.ndarray, local: np.ndarray, windows: dict,
             starts: np.ndarray, view: dict) -> None:
    """Each camera role's frames and ``_is_pad``: decoded straight into the batch, one job per (file, item key)
    whatever the slots it holds; zeros and padding for the rows of entries without the role; copies for a
    camera that fills several roles."""
    groups = positions_by_value(g)
    role_of = dict(zip(layout.camera_keys, layout.cameras))
    flat = {key: flat_frames(view[key]) for key in layout.camera_keys}
    jobs: dict[tuple, list] = {}
    for u, r in groups:
        s = slots[u]
        for role, key in zip(layout.cameras, layout.camera_keys):
            if role not in s.entry.cameras:
                view[key][r] = 0  # _is_pad stays True (empty_batch's)
        for src, key in s.targets.items():
            win = windows.get(role_of[key])
            if win is None:
                q, target = local[r], r
                view[f"{key}_is_pad"][r] = False
            else:
                t = win[0].shape[1]
                q, target = win[0][r] - starts[u], r[:, None] * t + np.arange(t)
                view[f"{key}_is_pad"][r] = win[1][r]
            cam = s.cameras.get(src)
            if cam is None:  # an image feature: PNG/JPEG bytes in the data file
                tmp = np.empty((*q.shape, *flat[key].shape[1:]), flat[key].dtype)
                s.engine._images(src, q, tmp, s.engine._output(tmp.dtype))
                view[key][r] = tmp
                continue
            # one job per file, or per slot where frames are located per batch (its error names its episode)
            job = (s.engine.source.root, cam.rel, key, None if cam.frames is not None else u)
            jobs.setdefault(job, []).append((s, src, cam, q.reshape(-1), target.reshape(-1)))
    run_jobs([_job(parts, flat[key]) for (_, _, key, _), parts in jobs.items()])
    for u, r in groups:
        for src_key, key in slots[u].copies:
            view[key][r] = view[src_key][r]
            view[f"{key}_is_pad"][r] = view[f"{src_key}_is_pad"][r]


def positions_by_value(values: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(value, ascending positions of it in `values`) for each distinct value, in ascending value order."""
    order = np.argsort(values, kind="stable")
    bounds = np.flatnonzero(np.diff(values[order])) + 1
    return [(int(values[r[0]]), r) for r in np.split(order, bounds)] if len(values) else []


def _job(parts: list, dest: np.ndarray) -> FrameJob:
    """One file's frames, into rows of `dest`, for the slots in `parts` ((slot, camera key, `_Camera`, rows in
    the slot, rows of `dest`))."""
    s, src, cam = parts[0][:3]
    one = len(parts) == 1
    eps = s.engine.episodes if one else np.concatenate([p[0].engine.episodes for p in parts])
    targets = parts[0][4] if one else np.concatenate([p[4] for p in parts])
    output = s.engine._output(dest.dtype)
    if cam.frames is None:  # located when run (one slot): an error names its episode and these rows' times
        return FrameJob(s.engine, src, cam.rel, eps, cam.times[parts[0][3]], dest, targets, output)
    frames = cam.frames[parts[0][3]] if one else np.concatenate([p[2].frames[p[3]] for p in parts])
    return FrameJob(s.engine, src, cam.rel, eps, None, dest, targets, output, frames)
