"""Each mixture entry's item spec and rows (`gather.Rows`: its selected episodes' columns and frame decoding),
built on first use in each process.

An entry's `ItemSpec` is the one its single dataset would have with the entry's mapped cameras as
``video_keys`` (unmapped cameras are never opened), its windows as seconds on its own fps grid, its
``tolerance_s``, the mixture's ``image_size``/``resize_mode`` (frames resized while decoding), and only the
tabular columns its items need (bookkeeping columns, the state, action and task keys: nothing else is read).
Its rows are the columns of its selected episodes, read through the entry's `Source` from preflight (remote reads
under the fetch policy), memory-mapped under ``<cache_dir>/tabular`` from `mmap_min_bytes` bytes on (default
`MMAP_MIN_BYTES`, 64 KiB: an entry with fewer bytes of columns is read into RAM, since mapping it costs a file
per column, written when the engine is built, and page-sized mappings larger than its bytes; so a process that
touches every entry holds at most 64 KiB of columns per entry in RAM, whatever their frames). Entries share
one `DecoderCache` and one `Counters`. Until an entry is used, a process holds only its metadata (O(episodes)).
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from dataclasses import replace
from pathlib import Path

import numpy as np

from .. import config
from ..counters import Counters
from ..format.errors import EpisodeIndexError
from ..mixture.checking.entry_checks import selected_episodes
from ..mixture.checking.report import PreflightReport
from ..mixture.layout import EntryLayout, MixtureLayout
from ..tabular import UnknownTasks, load_columns
from ..tabular.resample import Resampling, episode_bounds
from ..video import DecoderCache
from ..video.decoder_cache import CacheRule
from .decode import EntryFrames, camera_files
from .entry_reader import StreamEntry
from .gather import Rows
from .item_spec import ItemSpec

__all__ = ["MMAP_MIN_BYTES", "EntryEngines", "entry_item_spec"]

MMAP_MIN_BYTES = 64 << 10  # entries with fewer bytes of columns are read into RAM


def entry_item_spec(meta, entry: EntryLayout, layout: MixtureLayout, on_unknown_task: str = "warn") -> ItemSpec:
    """The item spec of one entry: its mapped cameras, windows and tolerance, only the columns it needs; rows whose
    task_index its tasks table lacks are warned about once per entry (naming it), or refused (`on_unknown_task`)."""
    info = meta.info
    cams = list(dict.fromkeys(entry.cameras.values()))
    videos = [k for k in cams if k in info.video_keys]
    images = [k for k in cams if k in info.image_keys]
    spec = ItemSpec.build(
        meta,
        entry.delta_timestamps(),
        entry.tolerance_s,
        video_keys=videos,
        image_size=layout.image_size,
        resize_mode=layout.resize_mode,
        columns=[*entry.data_keys, *images],
        on_unknown_task=on_unknown_task,
        resampling=Resampling.of(entry.target_fps, entry.resample),
        depth_output_unit=layout.depth_unit,
    )
    unknown = UnknownTasks(f"mixture entry {entry.name!r} ({meta.root})", len(meta.tasks), on_unknown_task)
    return replace(spec, unknown_tasks=unknown)


class EntryEngines:
    """Per-process rows of a mixture's entries (indexed by `layout.entries` position, the sampler's entry)."""

    def __init__(
        self,
        report: PreflightReport,
        layout: MixtureLayout,
        counters: Counters,
        decoders: DecoderCache | None,
        cache_dir: str | os.PathLike | None = None,
        mmap_min_bytes: int = MMAP_MIN_BYTES,
    ):
        self.layout = layout
        self.metadata = [report.metadata[e.index] for e in layout.entries]
        self.sources = [report.sources[e.index] for e in layout.entries]
        self.on_unknown_task = report.spec.on_unknown_task
        self.selected = [
            selected_episodes(report.spec.entries[e.index], len(m.episodes))
            for e, m in zip(layout.entries, self.metadata)
        ]
        self.counters, self.decoders = counters, decoders
        self.cache_dir = Path(cache_dir) if cache_dir is not None else config.cache_dir()
        self.mmap_min_bytes = int(mmap_min_bytes)
        self._specs: dict[int, ItemSpec] = {}
        self.gpu_keys: tuple[str, ...] = ()  # item keys decoded on the GPU (`decode_on_gpu`)
        self._rows: dict[int, Rows] = {}
        self._bounds: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # `positions_of`'s: bounds, selection and the selected episodes' first rows in `rows(slot)`, as lists
        self._lists: dict[int, tuple[list, list, list, list]] = {}
        for source in self.sources:  # remote reads (retries, bytes, files) count as the mixture's
            if getattr(source, "cache", None) is not None:
                source.cache.stats = counters

    def __len__(self) -> int:
        return len(self.layout.entries)

    def spec(self, slot: int) -> ItemSpec:
        if slot not in self._specs:
            spec = entry_item_spec(self.metadata[slot], self.layout.entries[slot], self.layout, self.on_unknown_task)
            self._specs[slot] = replace(spec, gpu_keys=self.gpu_keys) if self.gpu_keys else spec
        return self._specs[slot]

    def entries(self) -> list[tuple]:
        """(metadata, item spec, source, selected episodes) of every entry (what `gpu_frames.gpu_setup` checks)."""
        return [(self.metadata[s], self.spec(s), self.sources[s], self.selected[s]) for s in range(len(self))]

    def decode_on_gpu(self, keys: tuple[str, ...]) -> None:
        """Every entry's items leave `keys` to the GPU (before any rows are built)."""
        self.gpu_keys = tuple(keys)
        self._specs = {s: replace(spec, gpu_keys=self.gpu_keys) for s, spec in self._specs.items()}

    def stream_entry(self, slot: int) -> StreamEntry:
        """What a streaming consumer reads of entry `slot`: its metadata, item spec and source."""
        return StreamEntry(self.metadata[slot], self.spec(slot), self.sources[slot])

    def rows(self, slot: int) -> Rows:
        """Entry `slot`'s rows: its selected episodes (read the first time)."""
        rows = self._rows.get(slot)
        if rows is None:
            meta, source, spec = self.metadata[slot], self.sources[slot], self.spec(slot)
            columns = load_columns(
                meta,
                self.selected[slot],
                list(spec.data_keys),
                mmap_dir=self.cache_dir / "tabular",
                open_file=None if source.is_local else source.open_for_read,
                mmap_min_bytes=self.mmap_min_bytes,
                unknown_tasks=spec.unknown_tasks,
            )
            columns = spec.resample(columns, meta)  # at the mixture's control rate, when it has one
            for name, values in columns.arrays.items():  # memory-mapped columns as plain arrays over the same
                columns.arrays[name] = np.asarray(values)  # pages (np.memmap's subclass costs per gather)
            frames = EntryFrames(spec, meta, source, decoders=self.decoders, counters=self.counters)
            rows = self._rows[slot] = Rows(slot, columns, frames)
        return rows

    def camera_sizes(self) -> list[tuple[int, int]]:
        """(height, width) of each mapped video camera of each entry as its files hold it (the most a streaming
        consumer's pool decodes from at once is one per role: the largest of each role's cameras)."""
        best: dict[str, tuple[int, int]] = {}
        for meta, entry in zip(self.metadata, self.layout.entries):
            for role, key in entry.cameras.items():
                if key in meta.info.video_keys:
                    h, w = meta.info.camera_hw(key)[:2]
                    best[role] = max(best.get(role, (0, 0)), (h, w), key=lambda s: s[0] * s[1])
        return list(best.values()) or [(0, 0)]

    def video_files(self) -> list[tuple[int, int, int]]:
        """(height, width, files) per entry and mapped video camera: how many video files its selected
        episodes span."""
        out = []
        for slot, (meta, entry) in enumerate(zip(self.metadata, self.layout.entries)):
            keys = [k for k in dict.fromkeys(entry.cameras.values()) if k in meta.info.video_keys]
            out += camera_files(meta, keys, self.selected[slot])
        return out

    def decoder_cache_rule(self) -> CacheRule:
        """Open decoders for random access over the mixture (map-style): one per video file its mapped cameras
        span (a batch's frames come from files all over the mixture), within each process's decoder budget
        (`video.decoder_cache.CacheRule`)."""
        return CacheRule(tuple(self.video_files()))

    @property
    def built(self) -> int:
        """Entries whose rows this process has read so far."""
        return len(self._rows)

    def positions(self, slot: int, rows: np.ndarray) -> np.ndarray:
        """Engine positions of dataset rows (global ``index`` values) of entry `slot`: IndexError naming the
        entry for a row outside its selected episodes."""
        rows = np.asarray(rows, dtype=np.int64)
        first, last = self.bounds(slot)
        sel = self.selected[slot]
        ep = np.searchsorted(last, rows, side="right")
        k = np.minimum(np.searchsorted(sel, ep), max(len(sel) - 1, 0))
        bad = (rows < 0) | (ep >= len(last)) | (sel[k] != ep)
        if bad.any():
            r = int(rows[np.flatnonzero(bad)[0]])
            raise EpisodeIndexError(f"entry {self.layout.entries[slot].name!r}: row {r} is not in a selected episode")
        starts = self.rows(slot).columns.starts
        return starts[k] + rows - first[ep]

    def positions_of(self, slots: np.ndarray, rows: np.ndarray, used: np.ndarray, part: np.ndarray) -> np.ndarray:
        """`positions` of each (entry slot, dataset row) pair (`used`, `part`: `np.unique(slots,
        return_inverse=True)`): per entry when entries give several rows each, else pair by pair in scalars (a
        mixture's batch: a row or two of each of many entries)."""
        out = np.empty(len(rows), np.int64)
        if 2 * len(used) <= len(rows):
            for i, s in enumerate(used.tolist()):
                sel = part == i
                out[sel] = self.positions(s, rows[sel])
            return out
        at = []
        for slot, r in zip(slots.tolist(), rows.tolist()):
            got = self._lists.get(slot)
            if got is None:  # the same arrays as lists: bisect on a list costs less than a numpy call on one value
                first, last = self.bounds(slot)
                starts = self.rows(slot).starts()
                got = self._lists[slot] = (first.tolist(), last.tolist(), self.selected[slot].tolist(), starts)
            first_l, last_l, sel, starts = got
            ep = bisect_right(last_l, r)
            k = min(bisect_left(sel, ep), max(len(sel) - 1, 0))
            if r < 0 or ep >= len(last_l) or sel[k] != ep:
                self.positions(slot, np.asarray([r]))  # raises, naming the entry
            at.append(starts[k] + r - first_l[ep])
        out[:] = at
        return out

    def bounds(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """Entry `slot`'s episodes' global index ranges, as its items number rows (`tabular.resample.episode_bounds`:
        resampled at the mixture's control rate)."""
        got = self._bounds.get(slot)
        if got is None:
            got = self._bounds[slot] = episode_bounds(self.metadata[slot], self.layout.entries[slot].target_fps)
        return got
