"""Statistics of datasets' numeric columns over selected episodes, computed from the data files, in parallel,
cached by content. numpy and pyarrow only (no torch).

A `StatsJob` is one dataset (its `Source` and metadata), an episode selection (default: every episode) and the
keys (numeric features: state, action, any float/int/bool vector; `numeric_keys`). `compute_stats` runs the jobs
whose statistics are not in the cache (`tabular.stats_cache`) on a pool of `workers` processes (default: the
usable cores; the default start method, fork on Linux, so a training script needs no ``__main__`` guard), or in
this process (one job, one worker, or a daemonic caller such as a DataLoader worker; one job alone takes its
dimensions on `workers` threads), with a progress bar over the jobs (`progress.bar`). The process that computed a
job stores it in the cache. One `SelectionStats` per job: per key, the exact statistics of the selected rows
(`format.stats.column_stats`: min, max, mean, std, count and the quantiles q01..q99, equal to numpy's on the
concatenated rows) and their quantile sketch (pooling with other selections: `format.quantiles`).

A job reads only the data files holding its episodes (only their row groups, when a file has one per episode:
`tabular.columns.load_columns`, which checks the bookkeeping values as the loaders do), a few keys at a time
(about `READ_BYTES` of values), in memory. A non-finite value (NaN, inf) is an error naming the file, the
episode, the frame and the dimension: statistics of such a column would be NaN. Cameras are not computed here
(their statistics come from stats.json; see docs/mixtures.md).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing as mp
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..checks import check_number
from ..format.errors import DatasetFormatError, EpisodicError
from ..format.metadata import DatasetMetadata
from ..format.stats import KeyStats, column_stats
from ..progress import bar
from ..runtime import usable_cores
from .columns import load_columns
from .stats_cache import StatsCache, data_file_identities, selection_digest
from .values import UnknownTasks

__all__ = ["READ_BYTES", "SelectionStats", "StatsJob", "compute_stats", "numeric_keys", "selection_stats"]

logger = logging.getLogger(__name__)

READ_BYTES = 512 << 20  # values read at a time, about (keys are grouped up to this)


def numeric_keys(meta: DatasetMetadata) -> list[str]:
    """The dataset's numeric features (not cameras, not text), in info.json order: what `episodic stats` covers."""
    return [k for k, f in meta.info.features.items() if not f.is_camera and f.dtype != "string"]


@dataclass(eq=False)
class StatsJob:
    """One selection of one dataset: `source` (a `storage.Source`; it reopens itself in a worker process),
    `meta` its metadata, `keys` (numeric features), `episodes` (ascending; None: every episode), `label` (for
    messages: the dataset or the mixture entry)."""

    source: Any
    meta: DatasetMetadata
    keys: tuple[str, ...]
    episodes: np.ndarray | None = None
    label: str = ""

    def selected(self) -> np.ndarray:
        """The selected episodes, ascending: ValueError naming the dataset when they are not, or do not exist."""
        n = len(self.meta.episodes)
        if self.episodes is None:
            return np.arange(n, dtype=np.int64)
        sel = np.asarray(self.episodes, dtype=np.int64).reshape(-1)
        if sel.size and (sel[0] < 0 or sel[-1] >= n or (np.diff(sel) <= 0).any()):
            raise ValueError(f"{self.label or self.meta.root}: episodes must be ascending, distinct and in 0..{n - 1}")
        return sel


@dataclass(eq=False)
class SelectionStats:
    """A job's result: per key, its `KeyStats`; `frames` and `episodes` selected; `cached`: the keys read from
    the cache; `seconds`: the time its computation took (0 when every key came from the cache)."""

    keys: dict[str, KeyStats]
    frames: int
    episodes: int
    cached: tuple[str, ...] = ()
    seconds: float = 0.0
    label: str = ""
    computed: tuple[str, ...] = field(default=())

    @property
    def from_cache(self) -> bool:
        return not self.computed


def _check_finite(meta: DatasetMetadata, columns, key: str, values: np.ndarray) -> None:
    """A non-finite value of a float column: an error naming the file, episode, frame and dimension."""
    if values.dtype.kind != "f":
        return
    flat = values.reshape(len(values), -1)
    bad = ~np.isfinite(flat)
    if not bad.any():
        return
    row, dim = (int(x) for x in np.argwhere(bad)[0])
    pos = int(columns.episode_of_rows(np.asarray([row]))[0])
    episode = int(columns.episodes[pos])
    frame = row - int(columns.starts[pos])
    raise DatasetFormatError(
        f"{meta.path(meta.data_file_of(episode))}: episode {episode}: column {key!r} at frame "
        f"{frame}, dimension {dim} is {flat[row, dim].item()!r} ({int(bad.sum())} non-finite "
        f"value(s) in the selection): statistics need finite values"
    )


def selection_stats(
    meta: DatasetMetadata,
    episodes: np.ndarray,
    keys: Sequence[str],
    open_file=None,
    read_bytes: int = READ_BYTES,
    threads: int = 1,
) -> dict[str, KeyStats]:
    """`keys`' statistics over `episodes` of `meta`, from the data files (no cache), `threads` dimensions at a
    time: see the module docstring."""
    feats = meta.info.features
    for key in keys:
        if key not in feats or feats[key].is_camera or feats[key].dtype == "string":
            raise DatasetFormatError(
                f"{meta.root}: {key!r} is not a numeric feature of the dataset (numeric: {numeric_keys(meta)})"
            )
    episodes = np.asarray(episodes, dtype=np.int64)
    frames = int(meta.episodes.length[episodes].sum())
    if frames == 0:
        raise DatasetFormatError(f"{meta.root}: the selected episodes have no frames: no statistics")
    groups: list[list[str]] = []
    size = 0
    for key in keys:  # a few keys per read, about read_bytes of values
        nbytes = frames * int(np.prod(feats[key].shape)) * np.dtype(feats[key].dtype).itemsize
        if not groups or size + nbytes > read_bytes:
            groups.append([])
            size = 0
        groups[-1].append(key)
        size += nbytes
    tasks = UnknownTasks(meta.root, len(meta.tasks))  # statistics of task_index need no task text
    out: dict[str, KeyStats] = {}
    for group in groups:
        columns = load_columns(meta, episodes, group, open_file=open_file, unknown_tasks=tasks)
        for key in group:
            values = columns.arrays[key]
            _check_finite(meta, columns, key, values)
            out[key] = column_stats(values, threads=threads)
        del columns
    return out


def _run_job(
    job: StatsJob, keys: tuple[str, ...], threads: int = 1, store: StatsCache | None = None, digest: str | None = None
) -> tuple[dict[str, KeyStats], float]:
    """A job's `keys` computed (in a worker process or this one: the source reopened for this process) and stored
    in `store` under `digest` (a cache that cannot be written: logged, the statistics still returned)."""
    t0 = time.perf_counter()
    source = job.source
    meta = replace(job.meta, fs=source.fs)
    open_file = None if source.is_local else source.open_for_read
    stats = selection_stats(meta, job.selected(), keys, open_file=open_file, threads=threads)
    seconds = time.perf_counter() - t0
    if store is not None and digest is not None:
        try:
            store.put(digest, meta, stats)
        except OSError as e:  # a read-only or full cache
            logger.warning("%s: statistics not cached (%s)", store.root, e)
    return stats, seconds


def _portable(job: StatsJob) -> StatsJob:
    """The job as it travels to a worker: metadata without its filesystem (the source brings this process's) and
    without what reading columns never uses (statistics, the episodes' extra columns)."""
    return replace(job, meta=replace(job.meta, fs=None, stats={}, episodes=replace(job.meta.episodes, extra=None)))


def _run_jobs(tasks: list[tuple[StatsJob, tuple[str, ...], StatsCache | None, str | None]]) -> list:
    """Several jobs in a worker process, one after the other: each one's result, or the exception it raised."""
    out: list = []
    for job, keys, store, digest in tasks:
        try:
            out.append(_run_job(job, keys, 1, store, digest))
        except Exception as e:  # noqa: BLE001  the parent reports it with the others
            out.append(e)
    return out


def compute_stats(
    jobs: Sequence[StatsJob],
    *,
    workers: int | None = None,
    progress: bool = False,
    cache: bool | str | os.PathLike = True,
) -> list[SelectionStats]:
    """Every job's statistics (see the module docstring), in job order. `cache`: True (episodic's cache
    directory), a directory, or False (compute everything, store nothing). Jobs that fail do not stop the
    others (whose results are cached); then one `DatasetFormatError` lists every failure, each job's label
    first (a single job's error is raised as it is: e.g. `MissingFileError` naming the data file)."""
    if workers is not None:
        check_number("workers", workers, 1, 1024, integer=True)
    store = None if cache is False else StatsCache(None if cache is True else cache)
    results: list[SelectionStats | None] = [None] * len(jobs)
    todo: list[tuple[int, tuple[str, ...], str | None]] = []  # job, keys to compute, its selection's digest
    failures: list[tuple[str, BaseException]] = []

    def failed(i: int, e: BaseException) -> None:
        if not isinstance(e, (EpisodicError, OSError, ValueError)):
            raise e
        label = jobs[i].label or str(jobs[i].meta.root)
        text = str(e) if str(e).startswith((label, str(jobs[i].meta.root))) else f"{label}: {e}"
        failures.append((text, e))

    for i, job in enumerate(jobs):
        sel = job.selected()
        frames = int(job.meta.episodes.length[sel].sum()) if len(sel) else 0
        got: dict[str, KeyStats] = {}
        digest = None
        if store is not None and len(sel):
            try:
                files = data_file_identities(job.meta, sel, getattr(job.source, "policy", None))
            except Exception as e:  # noqa: BLE001  reported with the others
                failed(i, e)
                continue
            digest = selection_digest(job.meta, sel, files)
            got = store.get(digest, job.meta, job.keys)
        missing = tuple(k for k in job.keys if k not in got)
        results[i] = SelectionStats(got, frames, len(sel), cached=tuple(got), label=job.label)
        if missing:
            todo.append((i, missing, digest))

    def done(i: int, keys: tuple[str, ...], value: tuple[dict, float]) -> None:
        stats, seconds = value
        res = results[i]
        assert res is not None, "a job computes keys after its result was made"
        res.keys.update(stats)
        res.keys = {k: res.keys[k] for k in jobs[i].keys}  # the job's key order
        res.computed, res.seconds = keys, seconds

    cores = workers or usable_cores()
    # a daemonic process (a DataLoader worker) may not start a pool: it computes here
    n_workers = 1 if mp.current_process().daemon else min(cores, len(todo))
    with bar(total=len(todo), enabled=progress and bool(todo), desc="statistics", unit="dataset") as pb:
        if n_workers <= 1:  # here; one job alone takes the cores as threads over its dimensions
            for i, keys, digest in todo:
                try:
                    done(i, keys, _run_job(jobs[i], keys, cores if len(todo) == 1 else 1, store, digest))
                except Exception as e:  # noqa: BLE001  reported with the others
                    failed(i, e)
                pb.update(1)
        else:  # each worker stores what it computed; jobs go in chunks, about 4 per worker (small jobs, few hand-overs)
            size = max(1, len(todo) // (4 * n_workers))
            chunks = [todo[k : k + size] for k in range(0, len(todo), size)]
            with cf.ProcessPoolExecutor(max_workers=n_workers) as pool:
                futures = {
                    pool.submit(
                        _run_jobs, [(_portable(jobs[i]), keys, store, digest) for i, keys, digest in chunk]
                    ): chunk
                    for chunk in chunks
                }
                for fut in cf.as_completed(futures):
                    chunk = futures[fut]
                    try:
                        answers = fut.result()
                    except Exception as e:  # noqa: BLE001  the worker itself died: every job of the chunk failed
                        answers = [e] * len(chunk)
                    for (i, keys, _), answer in zip(chunk, answers):
                        if isinstance(answer, BaseException):
                            failed(i, answer)
                        else:
                            done(i, keys, answer)
                        pb.update(1)
    if len(failures) == 1 and len(jobs) == 1:
        raise failures[0][1]
    if failures:
        more = f"\n  ... and {len(failures) - 10} more" if len(failures) > 10 else ""
        raise DatasetFormatError(
            f"statistics failed for {len(failures)} of {len(jobs)} selection(s):\n  - "
            + "\n  - ".join(text for text, _ in failures[:10])
            + more
        )
    out = [r for r in results if r is not None]
    assert len(out) == len(jobs), "every job has its result, or a failure was raised above"
    return out
