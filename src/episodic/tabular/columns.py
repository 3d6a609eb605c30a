"""Tabular columns of a set of episodes as contiguous numpy arrays (memory-mapped when large)."""

from __future__ import annotations

import functools
import hashlib
import math
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import config
from ..format.errors import DatasetFormatError, EpisodicError, MissingFileError, ProblemList
from ..format.metadata import DatasetMetadata
from ..format.paths import cache_name
from ..progress import bar
from ..storage.atomic import AtomicFile
from ..storage.fetch import is_local
from ..storage.ranges import leaf_columns, open_for_read, row_group_spans
from .values import UnknownTasks, check_rows, column_values

MMAP_THRESHOLD_BYTES = 1 << 30
THREADED_READ_ROWS = 1 << 16  # a local read of this many rows and more decodes its columns on Arrow's threads


@dataclass
class Columns:
    """Rows of the selected episodes, in ascending episode order. Row r of every array is the same frame."""

    episodes: np.ndarray  # (E,) selected episode indices, ascending
    starts: np.ndarray  # (E + 1,) first row of each selected episode, then the total
    arrays: dict[str, np.ndarray]  # name -> (N,) or (N, *shape)
    images: dict[str, list] = field(default_factory=dict)  # name -> per-row encoded image bytes
    # each row's time of its camera frames when it is not the row's own timestamp: a resampled row's is the time
    # of the source frame nearest to it (`tabular.resample`)
    frame_times: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.starts[-1])

    def camera_times(self) -> np.ndarray:
        """Each row's time of its camera frames, seconds in its episode: `frame_times`, else the timestamps."""
        return self.frame_times if self.frame_times is not None else self.arrays["timestamp"]

    def episode_of_rows(self, rows: np.ndarray) -> np.ndarray:
        """Position of each row's episode in `episodes` (O(log E) per row)."""
        return np.searchsorted(self.starts, rows, side="right") - 1

    def episode(self, i: int) -> Columns:
        """The rows of the i-th selected episode alone (views, no copy)."""
        return self.span(i, i + 1)

    def span(self, a: int, b: int) -> Columns:
        """The rows of selected episodes a..b-1 alone (views, no copy)."""
        s, t = int(self.starts[a]), int(self.starts[b])
        return Columns(
            episodes=self.episodes[a:b].astype(np.int64),
            starts=(self.starts[a : b + 1] - s).astype(np.int64),
            arrays={n: v[s:t] for n, v in self.arrays.items()},
            images={n: v[s:t] for n, v in self.images.items()},
            frame_times=None if self.frame_times is None else self.frame_times[s:t],
        )


def _row_groups_for(pf: pq.ParquetFile, lengths: np.ndarray, wanted: np.ndarray) -> tuple[list[int] | None, bool]:
    """The row groups holding rows of the wanted episodes (one row group per episode, as LeRobot writes; several
    episodes per row group, or an episode over several, as `episodic repack` may write): (groups, True when they
    hold no other episode's rows). (None, True) when every episode is wanted and the rows add up: the whole file,
    without working out its groups (a mixture's one-episode entry, streamed: ~0.73 -> ~0.65 ms per file's rows);
    (None, False) when the file's rows do not add up to its episodes' lengths: then the whole file is read (and
    its rows checked)."""
    md = pf.metadata
    if wanted.all() and md.num_rows == int(lengths.sum()):
        return None, True
    group_ends = np.cumsum([md.row_group(i).num_rows for i in range(md.num_row_groups)], dtype=np.int64)
    episode_ends = np.cumsum(lengths, dtype=np.int64)
    if not len(group_ends) or not len(episode_ends) or group_ends[-1] != episode_ends[-1]:
        return None, False
    group_starts = group_ends - np.diff(group_ends, prepend=0)
    lo = (episode_ends - lengths)[wanted]
    hi = episode_ends[wanted]
    keep = hi > lo
    first = np.searchsorted(group_ends, lo[keep], side="right")  # the group holding each episode's first row
    last = np.searchsorted(group_starts, hi[keep], side="left") - 1  # ... and its last
    marks = np.zeros(len(group_ends) + 1, dtype=np.int64)
    np.add.at(marks, first, 1)
    np.add.at(marks, last + 1, -1)
    groups = np.flatnonzero(np.cumsum(marks[:-1]) > 0)
    rows = int((group_ends[groups] - group_starts[groups]).sum())
    return [int(g) for g in groups], rows == int((hi - lo).sum())


def _open_native(fs, path: str):
    """A local file opened by pyarrow itself (no Python file object for its threads to read), else `fs`'s."""
    return pa.OSFile(path, "rb") if is_local(fs) else fs.open(path, "rb")


def _read_rows(
    fs,
    path: str,
    names: list[str],
    file_lengths: np.ndarray,
    wanted: np.ndarray,
    wanted_eps: np.ndarray,
    open_file: Callable[[str], Any] | None = None,
) -> pa.Table:
    """Rows of the wanted episodes of one data file, read through a seekable file (only the footer and the
    row groups holding them are read). With `open_file` (a remote file of range reads) the needed column chunks
    are fetched first, in one round of concurrent requests.

    pyarrow never reads a Python file object on its own threads here (a local file is opened by pyarrow
    itself; a remote file is read without `pre_buffer` and without threads, its bytes fetched beforehand):
    an Arrow thread left holding a Python file at interpreter exit aborts the process ("terminate called
    without an active exception")."""
    try:
        with open_file(path) if open_file is not None else _open_native(fs, path) as f:
            # pages written with a checksum (episodic's writer) are verified: a damaged page is an error
            pf = pq.ParquetFile(f, pre_buffer=False, page_checksum_verification=True)
            present = pf.schema_arrow.names
            missing = [n for n in names + ["episode_index"] if n not in present]
            if missing:
                raise DatasetFormatError(f"{path}: missing column(s) {missing}")
            cols = list(dict.fromkeys(names + ["episode_index"]))
            groups, exact = _row_groups_for(pf, file_lengths, wanted)
            md = pf.metadata
            if hasattr(f, "prefetch"):  # a remote file: the needed column chunks in one round trip
                every = range(md.num_row_groups)
                f.prefetch(
                    row_group_spans(
                        pf.metadata, every if groups is None else groups, leaf_columns(pf.schema_arrow, cols)
                    )
                )
            # a Python file is read on this thread only; a local one on Arrow's threads only when it is large: for a
            # few hundred rows (a streamed episode of a mixture's entry) waking them cost more than the read
            rows = md.num_rows if groups is None else sum(md.row_group(g).num_rows for g in groups)
            threads = isinstance(f, pa.NativeFile) and rows >= THREADED_READ_ROWS
            t = (
                pf.read_row_groups(groups, columns=cols, use_threads=threads)
                if groups is not None
                else pf.read(columns=cols, use_threads=threads)
            )
    except (FileNotFoundError, MissingFileError):
        raise MissingFileError(f"{path}: data file not found (holds episodes {wanted_eps.tolist()[:10]})") from None
    except EpisodicError:  # e.g. a remote read that gave up (FetchError, an OSError): it names the URL already
        raise
    except (pa.ArrowException, OSError) as e:
        raise DatasetFormatError(f"{path}: not a readable parquet file ({e})") from None
    if not exact:  # the rows of other episodes too
        mask = np.isin(t.column("episode_index").to_numpy(), wanted_eps)
        if not mask.all():
            t = t.filter(pa.array(mask))
    return t


def load_columns(
    meta: DatasetMetadata,
    episodes: np.ndarray,
    names: list[str],
    mmap_dir: str | os.PathLike | None = None,
    progress: bool = False,
    open_file: Callable[[str], Any] | None = None,
    mmap_min_bytes: int | None = None,
    unknown_tasks: UnknownTasks | None = None,
) -> Columns:
    """Read `names` for `episodes` (ascending) from the data files; only the files and the row groups that hold
    them. `open_file(path)` opens a data file for
    reading (default: `storage.ranges.open_for_read`: the file itself when local, else retried range reads).
    With `mmap_dir`, columns of `mmap_min_bytes` bytes and more (default `MMAP_THRESHOLD_BYTES`; 0: always)
    are memory-mapped files there instead of RAM. Every value that decides an item is checked (`check_rows`);
    rows whose `task_index` the tasks table lacks go to `unknown_tasks` (the dataset's: it warns once, its policy
    may refuse them; None: refused, the first one raises)."""
    info, table = meta.info, meta.episodes
    if open_file is None and not is_local(meta.fs):
        open_file = functools.partial(open_for_read, meta.fs)
    episodes = np.asarray(episodes, dtype=np.int64)
    lengths = table.length[episodes]
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    total = int(starts[-1])
    feats = info.features
    numeric = [n for n in names if not feats[n].is_image]
    image_names = [n for n in names if feats[n].is_image]

    def shape_of(n: str) -> tuple[int, ...]:
        return () if feats[n].shape == (1,) else feats[n].shape

    nbytes = sum(
        total * math.prod(shape_of(n)) * (8 if feats[n].dtype == "string" else np.dtype(feats[n].dtype).itemsize)
        for n in numeric
    )
    threshold = MMAP_THRESHOLD_BYTES if mmap_min_bytes is None else int(mmap_min_bytes)
    use_mmap = mmap_dir is not None and (nbytes >= threshold or config.force_mmap())
    arrays: dict[str, np.ndarray] = {}
    _check_sizes(meta, episodes, lengths, nbytes)
    images: dict[str, list] = {n: [None] * total for n in image_names}
    mmap_files: dict[str, AtomicFile] = {}  # memory-mapped columns: written under temporary names, then renamed
    if use_mmap and mmap_dir is not None:
        key = hashlib.sha1(f"{meta.root}|{episodes.tobytes().hex()}|{names}".encode()).hexdigest()[:16]
        base = Path(mmap_dir) / key
    try:
        for i, n in enumerate(numeric):
            dt = object if feats[n].dtype == "string" else np.dtype(feats[n].dtype)
            if use_mmap and dt is not object:  # file names from feature names: made safe (format.paths)
                mmap_files[n] = AtomicFile(base / f"{i:03d}-{cache_name(n)}.npy")
                arrays[n] = np.lib.format.open_memmap(
                    mmap_files[n].tmp, mode="w+", dtype=dt, shape=(total, *shape_of(n))
                )
            else:
                try:
                    arrays[n] = np.empty((total, *shape_of(n)), dtype=dt)
                except MemoryError:  # lengths the metadata claims: a named error, not the allocator's
                    raise DatasetFormatError(
                        f"{posixpath.join(meta.root, 'meta/episodes')}: the selected episodes "
                        f"claim {total} frames; column {n!r} does not fit in memory"
                    ) from None
        _read_files(meta, episodes, starts, names, arrays, images, progress, open_file, unknown_tasks)
        for n, f in mmap_files.items():
            mapped = arrays.pop(n)
            assert isinstance(mapped, np.memmap)
            mapped.flush()
            del mapped
            arrays[n] = np.load(f.commit(), mmap_mode="r")
    except BaseException:
        arrays.clear()  # the maps go before their files
        for f in mmap_files.values():
            f.discard()
        raise
    if unknown_tasks is not None:
        unknown_tasks.report()
    return Columns(episodes=episodes, starts=starts, arrays=arrays, images=images)


def _read_files(
    meta: DatasetMetadata,
    episodes: np.ndarray,
    starts: np.ndarray,
    names: list[str],
    arrays: dict[str, np.ndarray],
    images: dict[str, list],
    progress: bool,
    open_file: Callable[[str], Any] | None,
    unknown_tasks: UnknownTasks | None,
) -> None:
    """Fill `arrays` and `images` (rows `starts[p]:starts[p + 1]` for `episodes[p]`) from the data files."""
    table, feats = meta.episodes, meta.info.features
    lengths = np.diff(starts)
    numeric = [n for n in names if n in arrays]
    image_names = [n for n in names if n in images]
    file_ids = table.data_file_id[episodes]
    order = np.unique(file_ids)
    # no bar object at all when none is asked for: this runs once per streamed episode of a mixture entry, where
    # building even a disabled tqdm cost ~0.2 ms
    for fid in bar(order, enabled=progress, desc="reading data files", unit="file") if progress else order:
        rel = table.data_files[fid]
        path = meta.path(rel)  # inside the dataset root (UnsafePathError otherwise)
        sel = np.flatnonzero(file_ids == fid)  # positions in `episodes`
        file_eps = np.flatnonzero(table.data_file_id == fid)  # all episodes of this file, ascending
        # every episode of the file wanted (episodes[sel] is a subset of file_eps), or those of them selected
        wanted = np.ones(len(file_eps), dtype=bool) if len(sel) == len(file_eps) else np.isin(file_eps, episodes[sel])
        t = _read_rows(meta.fs, path, names, table.length[file_eps], wanted, episodes[sel], open_file)
        ep_col = t.column("episode_index").to_numpy()
        # every selected episode of this file must be present with exactly its length, in order
        expect = np.repeat(episodes[sel], lengths[sel])
        if len(ep_col) != len(expect) or not np.array_equal(ep_col, expect):
            got = (
                np.bincount(ep_col.astype(np.int64), minlength=int(episodes[sel].max()) + 1)
                if len(ep_col)
                else np.zeros(1)
            )
            for e, n in zip(episodes[sel], lengths[sel]):
                have = int(got[e]) if e < len(got) else 0
                if have != n:
                    raise DatasetFormatError(f"{path}: episode {int(e)} has {have} rows, metadata says length {int(n)}")
            raise DatasetFormatError(f"{path}: rows of episodes {episodes[sel].tolist()[:10]} are not in episode order")
        # destination rows: usually one contiguous range (episodes are written file after file)
        dst = np.concatenate([np.arange(starts[p], starts[p + 1]) for p in sel])
        lo, hi = int(dst[0]), int(dst[-1]) + 1
        contiguous = hi - lo == len(dst)
        file_values = {}
        for n in numeric:
            values = file_values[n] = column_values(t.column(n), feats[n], f"{path}: column {n!r}")
            if contiguous:
                arrays[n][lo:hi] = values
            else:
                arrays[n][dst] = values
        # the values that decide what an item holds, against the metadata (vectorised over the file's rows)
        first = np.repeat(table.dataset_from_index[episodes[sel]], lengths[sel])
        frame = np.arange(len(ep_col), dtype=np.int64) - np.repeat(np.cumsum(lengths[sel]) - lengths[sel], lengths[sel])
        tolerant = unknown_tasks is not None and unknown_tasks.tolerant
        check_rows(path, ep_col, frame, first, file_values, None if tolerant else len(meta.tasks), ProblemList())
        if unknown_tasks is not None and tolerant and "task_index" in file_values:
            unknown_tasks.add(ep_col, file_values["task_index"])
        for n in image_names:
            col = t.column(n).combine_chunks()
            data = col.field("bytes").to_pylist() if pa.types.is_struct(col.type) else col.to_pylist()
            for r, b in zip(dst, data):
                images[n][int(r)] = b


def _check_sizes(meta: DatasetMetadata, episodes: np.ndarray, lengths: np.ndarray, nbytes: int) -> None:
    """Episode lengths the data files could hold: a corrupt `length` (huge or negative) is a named error here,
    before anything is allocated for it (never a MemoryError)."""
    if len(lengths) and (lengths.min() < 0 or int(lengths.sum()) > meta.info.total_frames):
        e = int(episodes[np.argmax(lengths)] if lengths.min() >= 0 else episodes[np.argmin(lengths)])
        raise DatasetFormatError(
            f"{posixpath.join(meta.root, 'meta/episodes')}: episode {e}: length {int(meta.episodes.length[e])} "
            f"does not fit the dataset ({meta.info.total_frames} frames in info.json)"
        )
    if nbytes >= 1 << 40:
        e = int(episodes[np.argmax(lengths)])
        raise DatasetFormatError(
            f"{posixpath.join(meta.root, 'meta/episodes')}: the selected episodes' columns would "
            f"take {nbytes / 2**30:.0f} GiB ({int(lengths.sum())} frames; episode {e}: length "
            f"{int(meta.episodes.length[e])}): check the episodes metadata and info.json"
        )
