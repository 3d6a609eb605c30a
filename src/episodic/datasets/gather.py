"""The one item builder: a batch of items from rows of whole episodes, for every kind of dataset.

`Rows` are whole episodes of one entry side by side (a dataset's whole selection, map-style; one pooled
episode, streaming) with how to decode their frames (`frames.EntryFrames`). `gather(layout, parts, part,
row, dtype)` builds the batch whose item i is row `row[i]` of `parts[part[i]]`, every key of the
`item_layout.ItemLayout`: the batch is placed once (`memory.place`: one shared-memory block in a DataLoader
worker, recycled buffers in the main process) and each key is written into it by one gather per part (one
for a single dataset); windows are each entry's offsets on its own fps grid (`tabular.window_rows`); camera
frames are decoded straight into their rows, one forward pass per video file for the whole batch
(`frames.run_jobs`), or, for the keys decoded on the GPU (`ItemSpec.gpu_keys`), located only: the batch then
holds their frame references (`decode.FrameRefs`) and lists their files under `decode.FILES_KEY`, for
`gpu_frames.GpuFrames.complete` in the main process. Text values are lists of `str`. Before the gather, the
parts whose items are built alike are merged into one (`merge_entries`), so that each key is one gather per batch.

One module for the parts (`Rows`), their merging and the gather, ~570 lines: they are one concept (building a
batch from rows), and a streaming mixture batch would otherwise cross a sixth `datasets/` module on its way from
loader to decoder (issue 21 asks for at most 5).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice, repeat
from operator import getitem

import numpy as np

from ..format.errors import DatasetFormatError
from ..tabular import Columns, window_rows
from ..video.output import FrameOutput
from .decode import FILES_KEY, EntryFrames, FrameJob, FrameRefs, flat_frames, run_jobs
from .item_layout import FRAME_KINDS, TEXT_KINDS, Field, ItemLayout, item_dtype
from .memory import Empty, place

__all__ = ["Rows", "gather", "merge_entries", "positions_by_value"]


@dataclass
class Rows:
    """Whole episodes of layout entry `entry`, side by side (`columns`), decoded by `frames`. With `pooled` (one
    episode a streaming consumer holds), each camera's frame of every row is located once, on first use. A part
    `merge_entries` made holds each item's rows within its windows' reach, of several parts (`subs`) of entries
    built alike (pooled: the pool's episodes): of each row, its part (`sub_of_row`) and its row there
    (`row_in_sub`)."""

    entry: int
    columns: Columns
    frames: EntryFrames
    pooled: bool = False
    subs: tuple[Rows, ...] = ()
    sub_of_row: np.ndarray | None = None
    row_in_sub: np.ndarray | None = None
    _located: dict = field(default_factory=dict, repr=False)
    _key: tuple | str | None = field(default=None, repr=False)
    _episode_frames: dict = field(default_factory=dict, repr=False)
    _starts: list | None = field(default=None, repr=False)
    _episodes: list | None = field(default=None, repr=False)
    _shapes_ok: set = field(default_factory=set, repr=False)  # (camera, frame shape) found to be the entry's

    def located(self, key: str) -> tuple[str, np.ndarray, list[int] | None, int]:
        """Of a pooled part (one episode), camera `key`'s video file, each row's time in it and frame index there,
        and the episode: (file, times, frames, episode), located once. The frames are None when some row has no
        frame within tolerance: the episode's rows are then located when decoded, so that the error names them."""
        got = self._located.get(key)
        if got is None:
            ep = int(self.columns.episodes[0])
            rel, times, frames = self.frames.locate_episode(key, ep, self.columns.camera_times().astype(np.float64))
            got = self._located[key] = (rel, times, None if frames is None else frames.tolist(), ep)
        return got

    def starts(self) -> list[int]:
        """Each episode's first row, and one past the last row (the columns' starts as a list, made once)."""
        if self._starts is None:
            self._starts = self.columns.starts.tolist()
        return self._starts

    def episode_list(self) -> list[int]:
        """The columns' episodes as a list (made once)."""
        if self._episodes is None:
            self._episodes = self.columns.episodes.tolist()
        return self._episodes

    def frame_of(self, key: str, row: int) -> tuple[str, int, int] | None:
        """Of a part of one entry's whole episodes (a mixture entry's selection), camera `key`'s (file, frame
        index, episode) at row `row`, every row of its episode located at once on first use; None when some row of
        that episode has no frame within tolerance (then it is located when decoded, so the error names it)."""
        starts = self.starts()
        i = bisect_right(starts, row) - 1
        got = self._episode_frames.get((key, i))
        if got is None:
            a, b = starts[i], starts[i + 1]
            ep = int(self.columns.episodes[i])
            rel, _, frames = self.frames.locate_episode(key, ep, self.columns.camera_times()[a:b].astype(np.float64))
            got = self._episode_frames[(key, i)] = (rel, None if frames is None else frames.tolist(), a, ep)
        rel, frames, a, ep = got
        return None if frames is None else (rel, frames[row - a], ep)

    def merge_key(self, layout: ItemLayout) -> tuple | str:
        """Equal for parts whose items are built alike (`merge_entries`): pooled or not, the entry's
        `ItemLayout.merge_keys`, the windows, the cameras and the columns (names, dtypes, shapes). A part with
        image features is merged with none."""
        if self._key is None:
            spec, cols = self.frames.spec, self.columns
            if cols.images or self.subs:
                self._key = ("alone", id(self))
            else:  # as a string, whose hash is kept (a tuple's is computed again at every lookup)
                self._key = repr(
                    (
                        self.pooled,
                        layout.merge_keys[self.entry],
                        tuple((k, v.tobytes()) for k, v in sorted(spec.offsets.items())),
                        tuple(spec.video_keys),
                        tuple(spec.gpu_keys),
                        tuple((n, a.dtype.str, a.shape[1:]) for n, a in cols.arrays.items()),
                        cols.frame_times is None,
                    )
                )
        return self._key

    def entries(self) -> np.ndarray | None:
        """Of a merged part, each row's entry; None for a part of one entry."""
        if not self.subs:
            return None
        assert self.sub_of_row is not None
        return np.asarray([p.entry for p in self.subs], dtype=np.int64)[self.sub_of_row]


def merge_entries(
    layout: ItemLayout, parts: Sequence[Rows], part: np.ndarray, row: np.ndarray
) -> tuple[list[Rows], np.ndarray, np.ndarray]:
    """The parts of a batch whose items are built alike (`Rows.merge_key`: a streaming pool's episodes, and a
    mixture's entries with the same sources, selections, windows and cameras) merged into one part, so that each
    key is one gather for all of them rather than one per part: each item's rows within its windows' reach (its
    episode's rows from its earliest to its latest offset, views concatenated), decoded from each part's own
    files (a pooled episode's frames located once). (parts, the part and row of each item in them)."""
    buckets: dict[tuple | str, list[int]] = {}
    for i, p in enumerate(parts):
        buckets.setdefault(p.merge_key(layout), []).append(i)
    if len(buckets) == len(parts) or not len(row):
        return list(parts), part, row
    items = dict(positions_by_value(part))
    merged: list[Rows] = []
    new_part = np.empty(len(row), np.int64)
    new_row = np.empty(len(row), np.int64)
    for idx in buckets.values():
        idx = [i for i in idx if i in items]
        if len(idx) == 1:
            pos = items[idx[0]]
            new_part[pos], new_row[pos] = len(merged), row[pos]
            merged.append(parts[idx[0]])
        elif idx:
            of_parts = [items[i] for i in idx]
            rows, at = _reach([parts[i] for i in idx], of_parts, row)
            flat = np.concatenate(of_parts)
            new_part[flat], new_row[flat] = len(merged), at
            merged.append(rows)
    return merged, new_part, new_row


def _reach(subs: list[Rows], items: list[np.ndarray], row: np.ndarray) -> tuple[Rows, np.ndarray]:
    """Each item's rows within its windows' reach, of parts whose rows are whole episodes (`merge_entries`: a
    mixture entry's selection, or a pooled episode), side by side, each a piece of its own in the merged columns;
    the row in them of each item (of `items`, concatenated)."""
    offsets = list(subs[0].frames.spec.offsets.values())
    lo = min([0, *(int(o.min()) for o in offsets if len(o))])
    hi = max([0, *(int(o.max()) for o in offsets if len(o))])
    a, b, eps = [], [], []  # each item's span of rows, its episode
    at = row[np.concatenate(items)]
    counts = [len(pos) for pos in items]
    rows = iter(at.tolist())
    for p, n in zip(subs, counts):  # a few items per part: scalars, not numpy calls on arrays of one
        starts, episodes = p.starts(), p.episode_list()
        for x in islice(rows, n):
            i = bisect_right(starts, x) - 1
            a.append(max(starts[i], x + lo))
            b.append(min(starts[i + 1], x + hi + 1))
            eps.append(episodes[i])
    first, last = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    lengths = last - first
    bounds = np.zeros(len(first) + 1, np.int64)
    np.cumsum(lengths, out=bounds[1:])
    sub = np.repeat(np.arange(len(subs)), counts)
    of_item = [subs[k].columns for k in sub.tolist()]
    dicts = [c.arrays for c in of_item]
    spans = list(map(slice, a, b))
    cols0 = subs[0].columns

    def pieces(arrays) -> np.ndarray:  # (map and getitem: no Python call per item and column)
        return np.concatenate(list(map(getitem, arrays, spans)))

    columns = Columns(
        episodes=np.asarray(eps, dtype=cols0.episodes.dtype),
        starts=bounds,
        arrays={n: pieces(map(getitem, dicts, repeat(n))) for n in cols0.arrays},
        frame_times=None if cols0.frame_times is None else pieces([c.camera_times() for c in of_item]),
    )
    merged = Rows(
        subs[0].entry,
        columns,
        subs[0].frames,
        pooled=subs[0].pooled,
        subs=tuple(subs),
        sub_of_row=np.repeat(sub, lengths),
        row_in_sub=np.arange(bounds[-1]) - np.repeat(bounds[:-1], lengths) + np.repeat(first, lengths),
    )
    return merged, bounds[:-1] + at - first


@dataclass
class _Group:
    """The items of a batch that come from one part: their positions in the batch and their rows."""

    part: Rows
    index: int  # position of the part in `parts`
    pos: np.ndarray
    rows: np.ndarray
    start: np.ndarray  # each row's episode's first row, and one past its last
    end: np.ndarray
    windows: dict = field(default_factory=dict)  # source key -> (rows (B, T), pad (B, T))

    def window(self, src: str) -> tuple[np.ndarray, np.ndarray] | None:
        got = self.windows.get(src)
        if got is None:
            off = self.part.frames.spec.offsets.get(src)
            if off is None:
                return None
            got = self.windows[src] = window_rows(self.rows, self.start, self.end, off)
        return got


def positions_by_value(values: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(value, ascending positions of it in `values`) for each distinct value, in ascending value order."""
    if not len(values):
        return []
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    bounds = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), len(values)]
    firsts = ordered[bounds[:-1]].tolist()
    return [(v, order[a:b]) for v, a, b in zip(firsts, bounds[:-1], bounds[1:])]


def gather(layout: ItemLayout, parts: Sequence[Rows], part: np.ndarray, row: np.ndarray, dtype: str) -> dict:
    """The batch whose item i is row `row[i]` of `parts[part[i]]`: the layout's keys in order, tensors placed
    by `memory.place`, cameras of `dtype` ("uint8", or "float32" in [0, 1]), text as lists of `str`."""
    part, row = np.asarray(part, dtype=np.int64), np.asarray(row, dtype=np.int64)
    if len(parts) > 1:
        parts, part, row = merge_entries(layout, parts, part, row)
    n = len(row)
    groups = []
    for u, pos in positions_by_value(part) if len(parts) > 1 else [(0, np.arange(n))] if n else []:
        cols = parts[u].columns
        rows = row[pos]
        ep = cols.episode_of_rows(rows)
        groups.append(_Group(parts[u], u, pos, rows, cols.starts[ep], cols.starts[ep + 1]))
    whole = len(groups) == 1  # one part (a single dataset): each key is one gather into the whole batch
    first = parts[0].columns.arrays if parts else {}
    gpu_keys = parts[0].frames.spec.gpu_keys if parts else ()
    refs = FrameRefs() if gpu_keys else None
    empties = {}
    for f in layout.fields:
        if f.kind in TEXT_KINDS:
            continue
        column = first.get(f.sources[0]) if f.sources and f.sources[0] is not None else None
        if f.key in gpu_keys:  # (file, frame, pts) per frame
            empties[f.key] = Empty((*_shape(f, layout, n, column, parts)[:-3], 3), np.dtype(np.int64))
        else:
            empties[f.key] = Empty(_shape(f, layout, n, column, parts), item_dtype(f, dtype, column))
    placed = place(empties)
    view = {k: t.numpy() for k, t in placed.items()}
    jobs: dict[tuple, list] = {}
    decoded: dict[tuple, str] = {}  # (part, camera, window) -> the item key its frames were decoded into
    copies: list[tuple[_Group, str, str]] = []
    texts: dict[str, list] = {}
    for f in layout.fields:
        if f.kind in TEXT_KINDS:
            texts[f.key] = _text(f, layout, groups, n)
            continue
        out = view[f.key]
        for g in groups:
            src = f.sources[g.part.entry] if f.sources else None
            at = slice(None) if whole else g.pos
            if f.kind == "values":
                _values(f, g, src, out, at, whole)
            elif f.kind in FRAME_KINDS:
                on_gpu = f.key in gpu_keys
                if src is None:
                    out[at] = -1 if on_gpu else 0  # no frame: zeros
                    continue
                if on_gpu and src not in g.part.frames.spec.video_keys:
                    raise DatasetFormatError(
                        f"{g.part.frames.meta.root}: camera {src!r} is an image feature: it "
                        f"cannot be decoded on the GPU with the videos of key {f.key!r}"
                    )
                if not on_gpu:
                    shape = out.shape[-3:]
                    for p in g.part.subs or (g.part,):
                        if (src, shape) not in p._shapes_ok:  # (checked once per part)
                            _check_shape(layout, p, f, src, shape)
                seen = decoded.setdefault((g.index, src, f.window), f.key)
                if seen != f.key:  # a camera filling a second role: a copy of the first, after decoding
                    copies.append((g, seen, f.key))
                elif src in g.part.frames.spec.video_keys:
                    _frame_jobs(f, g, src, out, dtype, jobs, refs if on_gpu else None)
                else:
                    _images(f, g, src, out, at, dtype)
            elif f.kind == "pad":
                w = g.window(src) if src is not None else None
                out[at] = True if src is None else w[1] if w is not None else False
            elif f.kind == "mask":
                out[at] = False
                if src is not None:
                    out[at, : layout.base_of(f).dims[g.part.entry]] = True
            elif f.kind == "entry":
                per_row = g.part.entries()
                if per_row is None:
                    out[at] = layout.entry_index[g.part.entry]
                else:
                    out[at] = np.asarray(layout.entry_index, dtype=np.int64)[per_row[g.rows]]
    run_jobs([_job(parts) for parts in jobs.values()])
    for g, src_key, key in copies:
        view[key][g.pos] = view[src_key][g.pos]
    batch = {f.key: texts[f.key] if f.kind in TEXT_KINDS else placed[f.key] for f in layout.fields}
    if refs is not None:
        batch[FILES_KEY] = refs.files
    return batch


def _shape(f: Field, layout: ItemLayout, n: int, column: np.ndarray | None, parts: Sequence[Rows]) -> tuple:
    lead = (n,) if f.window is None else (n, f.window)
    if f.kind in FRAME_KINDS:
        if f.shape is not None:
            return (*lead, *f.shape)
        src = next(p for p in parts if f.sources[p.entry] is not None)  # a single dataset: its own frame size
        key = f.sources[src.entry]
        assert key is not None
        return (*lead, *src.frames.frame_shape(key))
    if f.kind == "pad":
        base = layout.base_of(f)
        return (n,) if base.window is None else (n, base.window)
    if f.kind == "mask":
        shape = layout.base_of(f).shape
        assert shape is not None, "a mask describes values of a fixed shape"
        return (n, *shape)
    if f.kind == "entry":
        return (n,)
    if f.shape is not None:
        return (*lead, *f.shape)
    assert column is not None, f"field {f.key!r} takes its column's shape"
    return (*lead, *column.shape[1:])


def _values(f: Field, g: _Group, src: str | None, out: np.ndarray, at, whole: bool) -> None:
    if src is None:
        out[at] = 0
        return
    w = g.window(src) if f.window is not None else None
    q = g.rows if w is None else w[0]
    column = g.part.columns.arrays[src]
    if f.shape is None:  # as stored (a single dataset)
        if whole:
            np.take(column, q, axis=0, out=out)
        else:
            out[at] = column[q]
        return
    v = column[q]
    if f.shape and v.ndim == q.ndim:  # a 1-dimensional feature comes without its axis
        v = v[..., None]
    sel = f.select[g.part.entry] if f.select else None
    if sel is not None:
        v = v[..., np.asarray(sel, dtype=np.int64)]
    if not f.shape or v.shape[-1] == f.shape[-1]:
        out[at] = v
    else:
        d = v.shape[-1]
        out[at, ..., :d] = v
        out[at, ..., d:] = 0


def _text(f: Field, layout: ItemLayout, groups: list[_Group], n: int) -> list[str]:
    if len(groups) == 1 and f.kind != "name":
        return _texts(f, groups[0])
    out = np.empty(n, dtype=object)
    for g in groups:
        if f.kind != "name":
            out[g.pos] = _texts(f, g)
            continue
        per_row = g.part.entries()
        out[g.pos] = (
            layout.entry_name[g.part.entry] if per_row is None else [layout.entry_name[e] for e in per_row[g.rows]]
        )
    return out.tolist()


def _texts(f: Field, g: _Group) -> list[str]:
    src = f.sources[g.part.entry]
    arrays = g.part.columns.arrays
    if f.kind == "task":
        if src is None:  # the entry removes its task role
            return [""] * len(g.rows)
        if src == "task":
            owners = _by_entry(g.part)
            if len(owners) == 1:  # one entry (a single dataset's pooled episodes too): one task table
                return g.part.frames.spec.tasks_at(arrays["task_index"][g.rows])
            assert g.part.sub_of_row is not None
            tables = [p.frames.spec.tasks for p in g.part.subs]  # each entry its own (`ItemSpec.tasks_at`'s rule)
            out = []
            for s, t in zip(g.part.sub_of_row[g.rows].tolist(), arrays["task_index"][g.rows].tolist()):
                table = tables[s]
                out.append(table[t] if 0 <= t < len(table) - 1 else table[-1])
            return out
        return [str(t) for t in arrays[src][g.rows].tolist()]  # a text feature as an entry's task
    assert src is not None, f"text field {f.key!r} has a column"
    return arrays[src][g.rows].tolist()


def _by_entry(part: Rows) -> dict[int, Rows]:
    """One part of each entry (each `EntryFrames`) whose rows a part holds, by the id of its frames."""
    return {id(p.frames): p for p in part.subs or (part,)}


def _check_shape(layout: ItemLayout, part: Rows, f: Field, src: str, shape: tuple[int, ...]) -> None:
    want = part.frames.frame_shape(src)
    if shape == want:
        part._shapes_ok.add((src, shape))
    else:
        name = layout.entry_name[part.entry]
        raise DatasetFormatError(
            f"{f'entry {name!r}: ' if name else ''}{part.frames.meta.root}: camera {src!r} gives "
            f"frames of shape {want}, the batch holds {tuple(shape)}"
        )


def _images(f: Field, g: _Group, src: str, out: np.ndarray, at, dtype: str) -> None:
    """An image feature's frames (PNG/JPEG bytes in the data file) of a group's rows, decoded here."""
    w = g.window(src) if f.window is not None else None
    q = g.rows if w is None else w[0]
    cols = g.part.columns
    eps = cols.episodes[cols.episode_of_rows(q)]
    frames = g.part.frames
    if isinstance(at, slice):
        frames.images(src, cols.images[src], q, out, frames.output(dtype, src), eps)
    else:
        tmp = np.empty((*q.shape, *out.shape[-3:]), out.dtype)
        frames.images(src, cols.images[src], q, tmp, frames.output(dtype, src), eps)
        out[at] = tmp


def _frame_jobs(
    f: Field, g: _Group, src: str, out: np.ndarray, dtype: str, jobs: dict, refs: FrameRefs | None = None
) -> None:
    """Plan the decoding of a group's frames of camera `src` into its rows of `out`: jobs keyed by file (one
    job per file for the whole batch where frames are located already; per part where they are located when
    decoded, so that an error names that part's episode). With `refs`, `out` holds frame references. The
    frames of a merged part's items come from each one's own part."""
    w = g.window(src) if f.window is not None else None
    q = g.rows[:, None] if w is None else w[0]
    t = q.shape[1]
    target = g.pos[:, None] * t + np.arange(t)
    dest = flat_frames(out, 3 if refs is None else 1)  # frames, or (file, frame, pts) references
    part = g.part
    if not part.subs or part.pooled:  # a pooled part locates the frames of every row of its parts
        _part_frame_jobs(f.key, part, src, q, target, dest, dtype, jobs, refs)
        return
    assert part.sub_of_row is not None and part.row_in_sub is not None
    files: dict[tuple, tuple] = {}  # (root, file) -> (its entry's frames, frame indices, slots, episodes)
    subs = part.subs
    for s, rows, slots in zip(part.sub_of_row[g.rows].tolist(), part.row_in_sub[q].tolist(), target.tolist()):
        sub = subs[s]
        located = [sub.frame_of(src, r) for r in rows]
        if None in located:  # located when run, so that the error names the item's episode
            _part_frame_jobs(f.key, sub, src, np.asarray([rows]), np.asarray([slots]), dest, dtype, jobs, refs)
            continue
        root = sub.frames.source.root
        for (rel, frame, ep), slot in zip(located, slots):
            got = files.get((root, rel))
            if got is None:
                got = files[(root, rel)] = (sub.frames, [], [], [])
            got[1].append(frame)
            got[2].append(slot)
            got[3].append(ep)
    outputs: dict[EntryFrames, FrameOutput | FrameRefs] = {}  # (one per entry: files of an entry share it)
    for (root, rel), (frames, located_frames, slots, eps) in files.items():  # (lists: most files give one frame)
        output = outputs.get(frames)
        if output is None:
            output = outputs[frames] = refs if refs is not None else frames.output(dtype, src)
        jobs.setdefault((root, rel, f.key, None), []).append(
            (frames, src, rel, eps, None, located_frames, dest, slots, output)
        )


def _part_frame_jobs(
    key: str,
    part: Rows,
    src: str,
    q: np.ndarray,
    target: np.ndarray,
    dest: np.ndarray,
    dtype: str,
    jobs: dict,
    refs: FrameRefs | None,
) -> None:
    """`_frame_jobs` of the items of one part: rows `q` ((B, T), clamped into each item's episode) of `part`
    into rows `target` of `dest`."""
    frames = part.frames
    if part.pooled:  # pooled episodes, each located once: the batch's rows grouped by file, as lists
        rows, slots = q.reshape(-1), target.reshape(-1).tolist()
        if part.subs:
            assert part.sub_of_row is not None and part.row_in_sub is not None
            subs, of_sub, in_sub = part.subs, part.sub_of_row[rows].tolist(), part.row_in_sub[rows].tolist()
        else:
            subs, of_sub, in_sub = (part,), [0] * len(rows), rows.tolist()
        groups: dict[tuple, tuple] = {}  # job key -> (its episode's part, episodes, frames or times, slots)
        for s, r, slot in zip(of_sub, in_sub, slots):
            sub = subs[s]
            rel, times, located, ep = sub.located(src)
            if located is None:  # located when run, one job per episode: an error names it and these rows' times
                k: tuple = (sub.frames.source.root, rel, key, ("episode", id(sub.frames), ep))
                value = float(times[r])
            else:
                k, value = (sub.frames.source.root, rel, key, None), located[r]
            got = groups.get(k)
            if got is None:
                got = groups[k] = (sub, [], [], [])
            got[1].append(ep)
            got[2].append(value)
            got[3].append(slot)
        for k, (sub, eps, values, slot_list) in groups.items():
            out = refs if refs is not None else sub.frames.output(dtype, src)
            lazy = k[3] is not None
            jobs.setdefault(k, []).append(
                (
                    sub.frames,
                    src,
                    k[1],
                    eps[:1] if lazy else eps,
                    values if lazy else None,
                    None if lazy else values,
                    dest,
                    slot_list,
                    out,
                )
            )
        return
    output = refs if refs is not None else frames.output(dtype, src)
    cols = part.columns
    eps = cols.episodes[cols.episode_of_rows(q[:, 0])]
    ts = cols.camera_times()[q].astype(np.float64)
    for job in frames.jobs(src, eps, ts, dest, target, output):
        jobs[(id(job), None, None, None)] = [job]


def _job(parts: list) -> FrameJob:
    """One file's job for the batch: a planned job as it is, or the pooled parts' frames of one file merged."""
    first = parts[0]
    if isinstance(first, FrameJob):
        return first
    frames, src, rel, eps, times, located, dest, slots, output = first
    if len(parts) > 1:
        eps, slots = np.concatenate([p[3] for p in parts]), np.concatenate([p[7] for p in parts])
        if located is None:  # located when run: these rows' times
            times = np.concatenate([p[4] for p in parts])
        else:
            located = np.concatenate([p[5] for p in parts])
    return FrameJob(frames, src, rel, eps, times, dest, slots, output, located)
