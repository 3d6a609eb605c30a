"""Dataset metadata (info, episodes, tasks, stats) for the v3.0 and v2.x layouts, in one compact model.

Everything here reads through an fsspec filesystem and a root path, so local directories and remote URLs
load the same way. Files are read with a `read(rel) -> bytes` function: by default a plain read of
`fs`; `episodic.storage` passes one that retries remote reads under its fetch policy (`Source.load_metadata`)
(this layer does not import storage). Episodes are held as numpy columns (one entry per episode), never as
a dict per episode.
"""

from __future__ import annotations

import functools
import json
import posixpath
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import DatasetFormatError, EpisodeIndexError, MissingFileError
from .info import DatasetInfo
from .stats import Stats, aggregate_stats, stats_from_json
from .timebase import frames_to_seconds

INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
V21_EPISODES = "meta/episodes.jsonl"
V21_TASKS = "meta/tasks.jsonl"
V21_EPISODE_STATS = "meta/episodes_stats.jsonl"

Reader = Callable[[str], bytes]  # rel -> the file's bytes; raises MissingFileError when there is no such file


def read_bytes(fs, root: str, rel: str) -> bytes:
    """The plain reader: `root/rel` read through `fs` (no retries)."""
    path = posixpath.join(root, rel)
    try:
        with fs.open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise MissingFileError(f"{path}: file not found") from None
    except OSError as e:
        raise DatasetFormatError(f"{path}: cannot read ({e})") from None


def plain_reader(fs, root: str) -> Reader:
    """`read(rel)` for `root` on `fs`: the default of `load_metadata`."""
    return functools.partial(read_bytes, fs, root)


def read_parquet(read: Reader, root: str, rel: str, columns=None) -> pa.Table:
    """Read a parquet file with `read`; `columns` is a list of names or a predicate on a column name."""
    path = posixpath.join(root, rel)
    data = read(rel)
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))  # not a Python file: pyarrow's threads must not hold one
        if callable(columns):
            columns = [c for c in pf.schema_arrow.names if columns(c)]
        return pf.read(columns=columns)
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as e:
        raise DatasetFormatError(f"{path}: not a readable parquet file ({e})") from None


def _jsonl(read: Reader, root: str, rel: str) -> list[dict]:
    text = read(rel).decode("utf-8")
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise DatasetFormatError(f"{posixpath.join(root, rel)}:{n}: not valid JSON ({e})") from None
    return rows


@dataclass
class CameraFiles:
    """Where each episode's frames of one camera live: a file id per episode and the time range inside it."""

    files: list[str]  # relative paths, indexed by file_id
    file_id: np.ndarray  # (E,) int32
    from_ts: np.ndarray  # (E,) float64, seconds inside the file
    to_ts: np.ndarray  # (E,) float64


@dataclass
class EpisodeTable:
    """One row per episode of the dataset, as numpy columns. Row i is episode i."""

    length: np.ndarray  # int64
    dataset_from_index: np.ndarray  # int64, global `index` range, end exclusive
    dataset_to_index: np.ndarray
    tasks: list[list[str]]
    data_files: list[str]
    data_file_id: np.ndarray  # int32 into data_files
    cameras: dict[str, CameraFiles] = field(default_factory=dict)
    extra: pa.Table | None = None  # other columns of the episodes files, for `episodes["column"]` look-ups

    def __len__(self) -> int:
        return len(self.length)

    @property
    def episode_index(self) -> np.ndarray:
        return np.arange(len(self.length), dtype=np.int64)

    def columns(self) -> dict[str, Any]:
        cols: dict[str, Any] = {
            "episode_index": self.episode_index,
            "tasks": self.tasks,
            "length": self.length,
            "dataset_from_index": self.dataset_from_index,
            "dataset_to_index": self.dataset_to_index,
        }
        for key, cam in self.cameras.items():
            cols[f"videos/{key}/from_timestamp"] = cam.from_ts
            cols[f"videos/{key}/to_timestamp"] = cam.to_ts
        return cols

    def __getitem__(self, key: str | int):
        """`episodes["dataset_from_index"]` gives a column; `episodes[i]` gives episode i as a dict."""
        if isinstance(key, str):
            cols = self.columns()
            if key in cols:
                return cols[key]
            if self.extra is not None and key in self.extra.column_names:
                return self.extra.column(key).to_numpy(zero_copy_only=False)
            raise KeyError(key)
        i = int(key)
        if not -len(self) <= i < len(self):
            raise EpisodeIndexError(f"episode {key} out of range: the dataset has {len(self)} episodes")
        i %= len(self)
        row = {k: (v[i].item() if isinstance(v, np.ndarray) else v[i]) for k, v in self.columns().items()}
        if self.extra is not None:
            row.update({k: v[0] for k, v in self.extra.slice(i, 1).to_pydict().items()})
        return row

    def check(self, source: str, total_frames: int | None) -> None:
        if len(self) and (np.any(self.length < 0) or np.any(self.dataset_to_index - self.dataset_from_index != self.length)):
            bad = int(np.flatnonzero(self.dataset_to_index - self.dataset_from_index != self.length)[0])
            raise DatasetFormatError(
                f"{source}: episode {bad}: dataset_from_index/dataset_to_index "
                f"({self.dataset_from_index[bad]}, {self.dataset_to_index[bad]}) do not match length {self.length[bad]}"
            )
        if len(self) and np.any(self.dataset_from_index[1:] != self.dataset_to_index[:-1]):
            bad = int(np.flatnonzero(self.dataset_from_index[1:] != self.dataset_to_index[:-1])[0]) + 1
            raise DatasetFormatError(f"{source}: episode {bad}: dataset_from_index is not contiguous with episode {bad - 1}")
        if total_frames is not None and len(self) and int(self.dataset_to_index[-1]) != total_frames:
            raise DatasetFormatError(
                f"{source}: episodes end at index {int(self.dataset_to_index[-1])} but info.json total_frames is {total_frames}"
            )


@dataclass
class DatasetMetadata:
    """info.json + episodes + tasks + stats of one dataset, loaded through an fsspec filesystem."""

    fs: Any
    root: str
    info: DatasetInfo
    episodes: EpisodeTable
    tasks: list[str]
    stats: Stats

    # LeRobot-compatible views -------------------------------------------------
    @property
    def fps(self) -> int:
        return self.info.fps

    @property
    def features(self) -> dict[str, dict]:
        return {k: f.to_json() for k, f in self.info.features.items()}

    @property
    def video_keys(self) -> list[str]:
        return self.info.video_keys

    @property
    def image_keys(self) -> list[str]:
        return self.info.image_keys

    @property
    def camera_keys(self) -> list[str]:
        return self.info.camera_keys

    @property
    def total_episodes(self) -> int:
        return len(self.episodes)

    @property
    def total_frames(self) -> int:
        return self.info.total_frames

    @property
    def total_tasks(self) -> int:
        return len(self.tasks)

    @property
    def robot_type(self) -> str | None:
        return self.info.robot_type

    def path(self, rel: str) -> str:
        return posixpath.join(self.root, rel)

    def data_file_of(self, episode: int) -> str:
        return self.episodes.data_files[self.episodes.data_file_id[episode]]

    def video_file_of(self, episode: int, key: str) -> str:
        cam = self.episodes.cameras[key]
        return cam.files[cam.file_id[episode]]

    def episode_stats(self, episode: int, read: Reader | None = None) -> Stats:
        """Per-episode stats, read on demand (they are not kept in memory) with `read` (default: a plain
        read of `fs`)."""
        read = read or plain_reader(self.fs, self.root)
        if self.info.is_v21:
            for row in _jsonl(read, self.root, V21_EPISODE_STATS):
                if int(row.get("episode_index", -1)) == episode:
                    return stats_from_json(row.get("stats", {}))
            return {}
        table = _read_v30_episode_tables(read, self.root, self.info, stats=True)
        row = table.slice(episode, 1).to_pylist()[0]
        out: Stats = {}
        for name, value in row.items():
            if name.startswith("stats/"):
                _, feat, stat = name.split("/", 2)
                out.setdefault(feat, {})[stat] = np.asarray(value)
        return out


def load_metadata(fs, root: str, read: Reader | None = None) -> DatasetMetadata:
    """The metadata of the dataset at `root` on `fs`. `read(rel) -> bytes` reads one file of it (default: a
    plain read of `fs`; `Source.load_metadata` passes one that retries remote reads); it must raise
    MissingFileError for a file that does not exist."""
    root = root.rstrip("/") or "/"
    read = read or plain_reader(fs, root)
    info = DatasetInfo.from_json(read(INFO_PATH), source=posixpath.join(root, INFO_PATH))
    if info.is_v21:
        episodes, tasks, stats = _load_v21(read, root, info)
    else:
        episodes, tasks, stats = _load_v30(read, root, info)
    _warn_unknown_tasks(episodes, tasks, posixpath.join(root, "meta"))
    return DatasetMetadata(fs=fs, root=root, info=info, episodes=episodes, tasks=tasks, stats=stats)


def _warn_unknown_tasks(episodes: EpisodeTable, tasks: list[str], source: str) -> None:
    known = set(tasks)
    missing = sorted({t for ts in episodes.tasks for t in (ts or []) if t not in known})
    if missing:
        warnings.warn(
            f"{source}: {len(missing)} task label(s) named by episodes are not in the tasks table and are skipped: "
            f"{missing[:5]}",
            stacklevel=3,
        )


def _read_stats_json(read: Reader, root: str) -> Stats | None:
    try:
        raw = json.loads(read(STATS_PATH))
    except DatasetFormatError:
        return None
    except json.JSONDecodeError as e:
        raise DatasetFormatError(f"{posixpath.join(root, STATS_PATH)}: not valid JSON ({e})") from None
    return stats_from_json(raw) if isinstance(raw, dict) else None


# ----------------------------------------------------------------------------- v3.0
def _read_v30_episode_tables(read: Reader, root: str, info: DatasetInfo, stats: bool = False) -> pa.Table:
    """Read meta/episodes/*.parquet in order. Files are found by walking the path template, so no listing
    is needed (HTTP servers cannot list): after a missing file other than a chunk's first, the next chunk's
    first file."""
    columns = None if stats else (lambda c: not c.startswith("stats/"))

    def table_or_none(chunk: int, file: int) -> pa.Table | None:
        try:
            return read_parquet(read, root, EPISODES_PATH.format(chunk_index=chunk, file_index=file), columns)
        except MissingFileError:
            return None

    tables: list[pa.Table] = []
    rows, chunk, file = 0, 0, 0
    while rows < info.total_episodes:
        t = table_or_none(chunk, file)
        if t is None and file > 0 and (t := table_or_none(chunk + 1, 0)) is not None:
            chunk, file = chunk + 1, 0
        if t is None:
            rel = EPISODES_PATH.format(chunk_index=chunk, file_index=file)
            raise MissingFileError(
                f"{posixpath.join(root, rel)}: file not found; episodes files hold {rows} of the "
                f"{info.total_episodes} episodes that info.json announces"
            )
        tables.append(t)
        rows += t.num_rows
        file += 1
        if file >= info.chunks_size:
            chunk, file = chunk + 1, 0
    if not tables:
        return pa.table({"episode_index": pa.array([], pa.int64())})
    return pa.concat_tables(tables, promote_options="default")


def _int_col(table: pa.Table, name: str, source: str) -> np.ndarray:
    if name not in table.column_names:
        raise DatasetFormatError(f"{source}: missing column {name!r}")
    col = table.column(name)
    if col.null_count:
        raise DatasetFormatError(f"{source}: column {name!r} has missing values")
    try:
        return col.to_numpy().astype(np.int64)
    except (pa.ArrowInvalid, ValueError, TypeError) as e:
        raise DatasetFormatError(f"{source}: column {name!r} is not integer ({e})") from None


def _load_v30(read: Reader, root: str, info: DatasetInfo) -> tuple[EpisodeTable, list[str], Stats]:
    source = posixpath.join(root, "meta/episodes")
    table = _read_v30_episode_tables(read, root, info)
    ep_index = _int_col(table, "episode_index", source)
    order = np.argsort(ep_index, kind="stable")
    if not np.array_equal(ep_index[order], np.arange(len(ep_index))):
        raise DatasetFormatError(f"{source}: episode_index must run 0..{len(ep_index) - 1} without gaps")
    if not np.array_equal(order, np.arange(len(order))):
        table = table.take(order)
    if len(ep_index) != info.total_episodes:
        raise DatasetFormatError(
            f"{source}: {len(ep_index)} episodes found but info.json total_episodes is {info.total_episodes}"
        )

    def files_of(prefix: str, fmt) -> tuple[list[str], np.ndarray]:
        chunk = _int_col(table, f"{prefix}/chunk_index", source)
        file = _int_col(table, f"{prefix}/file_index", source)
        pairs, inverse = np.unique(np.stack([chunk, file], axis=1), axis=0, return_inverse=True)
        return [fmt(int(c), int(f)) for c, f in pairs], inverse.reshape(-1).astype(np.int32)

    data_files, data_file_id = files_of("data", info.data_file)
    cameras = {}
    for key in info.video_keys:
        files, file_id = files_of(f"videos/{key}", lambda c, f, k=key: info.video_file(k, c, f))
        from_ts = table.column(f"videos/{key}/from_timestamp").to_numpy().astype(np.float64)
        to_ts = table.column(f"videos/{key}/to_timestamp").to_numpy().astype(np.float64)
        cameras[key] = CameraFiles(files=files, file_id=file_id, from_ts=from_ts, to_ts=to_ts)
    tasks_col = table.column("tasks").to_pylist() if "tasks" in table.column_names else [[] for _ in ep_index]
    known = {"episode_index", "tasks", "length", "dataset_from_index", "dataset_to_index"}
    extra = table.select([c for c in table.column_names if c not in known and not c.startswith("videos/")])
    episodes = EpisodeTable(
        length=_int_col(table, "length", source),
        dataset_from_index=_int_col(table, "dataset_from_index", source),
        dataset_to_index=_int_col(table, "dataset_to_index", source),
        tasks=tasks_col,
        data_files=data_files,
        data_file_id=data_file_id,
        cameras=cameras,
        extra=extra,
    )
    episodes.check(source, info.total_frames)
    tasks = _load_tasks_parquet(read, root)
    stats = _read_stats_json(read, root) or {}
    return episodes, tasks, stats


def _load_tasks_parquet(read: Reader, root: str) -> list[str]:
    source = posixpath.join(root, TASKS_PATH)
    t = read_parquet(read, root, TASKS_PATH)
    names = [c for c in t.column_names if c != "task_index"]
    text_col = "task" if "task" in names else next((c for c in names if pa.types.is_string(t.schema.field(c).type)
                                                     or pa.types.is_large_string(t.schema.field(c).type)), None)
    if text_col is None:
        raise DatasetFormatError(f"{source}: no task string column (expected 'task')")
    texts = t.column(text_col).to_pylist()
    if "task_index" not in t.column_names:
        return texts
    idx = _int_col(t, "task_index", source)
    out = [""] * (int(idx.max()) + 1 if len(idx) else 0)
    for i, s in zip(idx, texts):
        out[int(i)] = s
    return out


# ----------------------------------------------------------------------------- v2.x
V21_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"


def _load_v21(read: Reader, root: str, info: DatasetInfo) -> tuple[EpisodeTable, list[str], Stats]:
    source = posixpath.join(root, V21_EPISODES)
    rows = sorted(_jsonl(read, root, V21_EPISODES), key=lambda r: int(r.get("episode_index", -1)))
    ep_index = np.array([int(r.get("episode_index", -1)) for r in rows], dtype=np.int64)
    if not np.array_equal(ep_index, np.arange(len(rows))):
        raise DatasetFormatError(f"{source}: episode_index must run 0..{len(rows) - 1} without gaps")
    try:
        length = np.array([int(r["length"]) for r in rows], dtype=np.int64)
    except (KeyError, TypeError, ValueError):
        raise DatasetFormatError(f"{source}: every episode needs an integer 'length'") from None
    to_index = np.cumsum(length)
    from_index = to_index - length
    data_tpl = info.data_path if "episode_index" in info.data_path else V21_DATA_PATH
    chunk = ep_index // info.chunks_size
    data_files = [data_tpl.format(episode_chunk=int(c), episode_index=int(e)) for c, e in zip(chunk, ep_index)]
    cameras = {}
    video_tpl = info.video_path if info.video_path and "episode_index" in info.video_path else V21_VIDEO_PATH
    for key in info.video_keys:
        files = [video_tpl.format(episode_chunk=int(c), video_key=key, episode_index=int(e)) for c, e in zip(chunk, ep_index)]
        cameras[key] = CameraFiles(files=files, file_id=np.arange(len(rows), dtype=np.int32),
                                   from_ts=np.zeros(len(rows)), to_ts=frames_to_seconds(length, info.fps))
    episodes = EpisodeTable(
        length=length, dataset_from_index=from_index, dataset_to_index=to_index,
        tasks=[list(r.get("tasks") or []) for r in rows], data_files=data_files,
        data_file_id=np.arange(len(rows), dtype=np.int32), cameras=cameras,
    )
    episodes.check(source, info.total_frames)
    task_rows = _jsonl(read, root, V21_TASKS)
    tasks = [""] * (max((int(r["task_index"]) for r in task_rows), default=-1) + 1)
    for r in task_rows:
        tasks[int(r["task_index"])] = r["task"]
    stats = _read_stats_json(read, root)
    if stats is None:
        try:
            per_episode = _jsonl(read, root, V21_EPISODE_STATS)
        except MissingFileError:
            per_episode = None
        if per_episode is not None:
            stats = aggregate_stats(stats_from_json(r.get("stats", {})) for r in per_episode)
    return episodes, tasks, stats or {}
