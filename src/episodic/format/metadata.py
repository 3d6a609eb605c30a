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
import operator
import posixpath
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import DatasetFormatError, EpisodeIndexError, MissingFileError, ProblemList
from .info import DatasetInfo
from .paths import dataset_path, render_many
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
    """The plain reader: `root/rel` read through `fs` (no retries); `rel` must stay inside `root`
    (format.paths.dataset_path: UnsafePathError before anything is opened)."""
    path = dataset_path(fs, root, rel)
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
    try:
        text = read(rel).decode("utf-8")
    except UnicodeDecodeError as e:
        raise DatasetFormatError(f"{posixpath.join(root, rel)}: not UTF-8 text ({e})") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetFormatError(f"{posixpath.join(root, rel)}:{n}: not valid JSON ({e})") from None
            if not isinstance(row, dict):
                raise DatasetFormatError(f"{posixpath.join(root, rel)}:{n}: expected a JSON object, got "
                                         f"{type(row).__name__}")
            rows.append(row)
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
        try:  # a float (1.7) or a bool is a TypeError, never episode 1
            i = operator.index(key) if not isinstance(key, (bool, np.bool_)) else None
        except TypeError:
            i = None
        if i is None:
            raise TypeError(f"episode index must be an integer, got {key!r}")
        if not -len(self) <= i < len(self):
            raise EpisodeIndexError(f"episode {key} out of range: the dataset has {len(self)} episodes")
        i %= len(self)
        row = {k: (v[i].item() if isinstance(v, np.ndarray) else v[i]) for k, v in self.columns().items()}
        if self.extra is not None:
            row.update({k: v[0] for k, v in self.extra.slice(i, 1).to_pydict().items()})
        return row

    def check(self, source: str, total_frames: int | None, problems: ProblemList | None = None) -> None:
        """Lengths and global index ranges: non-negative lengths, from/to matching them, contiguous, ending
        at info.json's total_frames (problems named by episode; the first raises unless lenient)."""
        problems = problems if problems is not None else ProblemList()
        if not len(self):
            return
        bad = np.flatnonzero((self.length < 0) | (self.dataset_to_index - self.dataset_from_index != self.length))
        if len(bad):
            e = int(bad[0])
            problems.add(f"{source}: episode {e}: dataset_from_index/dataset_to_index ({self.dataset_from_index[e]}, "
                         f"{self.dataset_to_index[e]}) do not match length {self.length[e]}")
        if self.dataset_from_index[0] != 0:
            problems.add(f"{source}: episode 0: dataset_from_index is {self.dataset_from_index[0]}, not 0")
        gaps = np.flatnonzero(self.dataset_from_index[1:] != self.dataset_to_index[:-1])
        if len(gaps):
            e = int(gaps[0]) + 1
            problems.add(f"{source}: episode {e}: dataset_from_index is not contiguous with episode {e - 1}")
        if total_frames is not None and int(self.dataset_to_index[-1]) != total_frames:
            problems.add(f"{source}: episodes end at index {int(self.dataset_to_index[-1])} but info.json "
                         f"total_frames is {total_frames}")


@dataclass
class DatasetMetadata:
    """info.json + episodes + tasks + stats of one dataset, loaded through an fsspec filesystem."""

    fs: Any
    root: str
    info: DatasetInfo
    episodes: EpisodeTable
    tasks: list[str]
    stats: Stats
    problems: list[str] = field(default_factory=list)  # found by a lenient load (`episodic validate`)

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
        """`root/rel`, checked to stay inside the root (format.paths.dataset_path)."""
        return dataset_path(self.fs, self.root, rel)

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


def load_metadata(fs, root: str, read: Reader | None = None, problems: ProblemList | None = None) -> DatasetMetadata:
    """The metadata of the dataset at `root` on `fs`. `read(rel) -> bytes` reads one file of it (default: a
    plain read of `fs`; `Source.load_metadata` passes one that retries remote reads); it must raise
    MissingFileError for a file that does not exist.

    Every value that decides what an item contains is checked here, vectorised (lengths and index ranges,
    file indices, video times, task indices), and every path it names is checked to stay inside the root
    (format.paths): the first problem raises a DatasetFormatError naming the file, the episode and the
    field. With a lenient `problems` (ProblemList(strict=False), as `episodic validate` passes) problems are
    collected there instead and loading goes on as far as the files allow (they are also in
    `metadata.problems`)."""
    root = root.rstrip("/") or "/"
    read = read or plain_reader(fs, root)
    problems = problems if problems is not None else ProblemList()
    info = DatasetInfo.from_json(read(INFO_PATH), source=posixpath.join(root, INFO_PATH))
    if info.is_v21:
        episodes, tasks, stats = _load_v21(read, root, info, problems)
    else:
        episodes, tasks, stats = _load_v30(read, root, info, problems)
    _unknown_tasks(episodes, tasks, posixpath.join(root, "meta"), problems)
    return DatasetMetadata(fs=fs, root=root, info=info, episodes=episodes, tasks=tasks, stats=stats,
                           problems=problems.items)


def _unknown_tasks(episodes: EpisodeTable, tasks: list[str], source: str, problems: ProblemList) -> None:
    """Task labels of the episodes table that the tasks table lacks: a warning for the loader (items use
    the data's task_index, checked on its own), a problem for `validate`."""
    known = set(tasks)
    missing = sorted({t for ts in episodes.tasks for t in (ts or []) if t not in known})
    if missing:
        message = (f"{source}: {len(missing)} task label(s) named by episodes are not in the tasks table and are "
                   f"skipped: {missing[:5]}")
        if problems.strict:
            warnings.warn(message, stacklevel=3)
        else:
            problems.add(message)


def _read_stats_json(read: Reader, root: str) -> Stats | None:
    try:
        raw = json.loads(read(STATS_PATH))
    except MissingFileError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DatasetFormatError(f"{posixpath.join(root, STATS_PATH)}: not valid JSON ({e})") from None
    try:
        return stats_from_json(raw) if isinstance(raw, dict) else None
    except (ValueError, TypeError) as e:
        raise DatasetFormatError(f"{posixpath.join(root, STATS_PATH)}: not statistics ({e})") from None


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
    try:
        return pa.concat_tables(tables, promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise DatasetFormatError(f"{posixpath.join(root, 'meta/episodes')}: the episodes files disagree on their "
                                 f"columns ({e})") from None


def _column(table: pa.Table, name: str, source: str) -> pa.Array:
    if name not in table.column_names:
        raise DatasetFormatError(f"{source}: missing column {name!r}")
    col = table.column(name).combine_chunks()
    if col.null_count:
        bad = np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))
        raise DatasetFormatError(f"{source}: column {name!r} has missing values (rows {bad[:10].tolist()})")
    return col


def _int_col(table: pa.Table, name: str, source: str) -> np.ndarray:
    """An integer column as int64. Floats are accepted only when every value is a whole number (a float
    index is never truncated)."""
    col = _column(table, name, source)
    typ = col.type
    if pa.types.is_integer(typ):
        return col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if pa.types.is_floating(typ):
        values = col.to_numpy(zero_copy_only=False)
        bad = np.flatnonzero(~np.isfinite(values) | (values != np.round(values)) | (np.abs(values) >= 2.0 ** 62))
        if not len(bad):
            return values.astype(np.int64)
        raise DatasetFormatError(f"{source}: column {name!r} holds {values[bad[0]].item()!r} at row {int(bad[0])}, "
                                 f"not a whole number")
    raise DatasetFormatError(f"{source}: column {name!r} is {typ}, not integer")


def _float_col(table: pa.Table, name: str, source: str) -> np.ndarray:
    col = _column(table, name, source)
    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
        raise DatasetFormatError(f"{source}: column {name!r} is {col.type}, not a number")
    return col.to_numpy(zero_copy_only=False).astype(np.float64)


def _first(mask: np.ndarray) -> list[int]:
    return np.flatnonzero(mask)[:10].tolist()


def _check_times(from_ts: np.ndarray, to_ts: np.ndarray, key: str, source: str, problems: ProblemList) -> None:
    """A camera's per-episode times in its file: finite, from >= 0, to >= from (a NaN time would make
    every query land on one frame)."""
    for name, values in (("from_timestamp", from_ts), ("to_timestamp", to_ts)):
        bad = ~np.isfinite(values) | (values < 0)
        if bad.any():
            problems.add(f"{source}: episode(s) {_first(bad)}: column 'videos/{key}/{name}' is "
                         f"{float(values[bad][0])!r}, not a finite time >= 0")
    bad = to_ts < from_ts
    if bad.any():
        problems.add(f"{source}: episode(s) {_first(bad)}: 'videos/{key}/to_timestamp' is before from_timestamp")


def _files(chunk: np.ndarray, file: np.ndarray, prefix: str, source: str, problems: ProblemList,
           render) -> tuple[list[str], np.ndarray]:
    """Unique (chunk, file) pairs of the episodes -> their relative paths (rendered and checked by
    `render(chunks, files)`) and each episode's file id."""
    bad = (chunk < 0) | (file < 0)
    if bad.any():
        problems.add(f"{source}: episode(s) {_first(bad)}: '{prefix}/chunk_index' and '{prefix}/file_index' must "
                     f"be >= 0, got ({int(chunk[bad][0])}, {int(file[bad][0])})")
    pairs, inverse = np.unique(np.stack([chunk, file], axis=1), axis=0, return_inverse=True)
    try:
        files = render([int(c) for c in pairs[:, 0]], [int(f) for f in pairs[:, 1]])
    except DatasetFormatError as e:
        problems.add(str(e), type(e))
        files = [""] * len(pairs)  # lenient: no path; `validate` skips these files (already reported)
    return files, inverse.reshape(-1).astype(np.int32)


def _tasks_column(table: pa.Table, source: str, problems: ProblemList, n: int) -> list[list[str]]:
    if "tasks" not in table.column_names:
        return [[] for _ in range(n)]
    col = table.column("tasks")
    typ = col.type
    if not ((pa.types.is_list(typ) or pa.types.is_large_list(typ)) and
            (pa.types.is_string(typ.value_type) or pa.types.is_large_string(typ.value_type))):
        problems.add(f"{source}: column 'tasks' is {typ}, not a list of strings")
        return [[] for _ in range(n)]
    return [t or [] for t in col.to_pylist()]


def _load_v30(read: Reader, root: str, info: DatasetInfo, problems: ProblemList) -> tuple[EpisodeTable, list[str], Stats]:
    source = posixpath.join(root, "meta/episodes")
    info_source = posixpath.join(root, INFO_PATH)
    table = _read_v30_episode_tables(read, root, info)
    ep_index = _int_col(table, "episode_index", source)
    order = np.argsort(ep_index, kind="stable")
    if not np.array_equal(ep_index[order], np.arange(len(ep_index))):
        raise DatasetFormatError(f"{source}: episode_index must run 0..{len(ep_index) - 1} without gaps")
    if not np.array_equal(order, np.arange(len(order))):
        table = table.take(order)
    if len(ep_index) != info.total_episodes:
        problems.add(f"{source}: {len(ep_index)} episodes found but info.json total_episodes is {info.total_episodes}")

    def files_of(prefix: str, render) -> tuple[list[str], np.ndarray]:
        chunk = _int_col(table, f"{prefix}/chunk_index", source)
        file = _int_col(table, f"{prefix}/file_index", source)
        return _files(chunk, file, prefix, source, problems, render)

    data_files, data_file_id = files_of(
        "data", lambda c, f: render_many(info.data_path, f"{info_source}: field 'data_path'", chunk_index=c, file_index=f))
    cameras = {}
    for key in info.video_keys:
        files, file_id = files_of(f"videos/{key}", lambda c, f, k=key: render_many(
            info.video_path or "", f"{info_source}: field 'video_path'", video_key=[k] * len(c), chunk_index=c,
            file_index=f))
        times, present = [], True
        for name in ("from_timestamp", "to_timestamp"):
            try:
                times.append(_float_col(table, f"videos/{key}/{name}", source))
            except DatasetFormatError as e:
                problems.add(str(e))
                times.append(np.full(len(ep_index), np.nan))  # lenient: already reported
                present = False
        if present:
            _check_times(*times, key, source, problems)
        cameras[key] = CameraFiles(files=files, file_id=file_id, from_ts=times[0], to_ts=times[1])
    known = {"episode_index", "tasks", "length", "dataset_from_index", "dataset_to_index"}
    extra = table.select([c for c in table.column_names if c not in known and not c.startswith("videos/")])
    episodes = EpisodeTable(
        length=_int_col(table, "length", source),
        dataset_from_index=_int_col(table, "dataset_from_index", source),
        dataset_to_index=_int_col(table, "dataset_to_index", source),
        tasks=_tasks_column(table, source, problems, len(ep_index)),
        data_files=data_files,
        data_file_id=data_file_id,
        cameras=cameras,
        extra=extra,
    )
    episodes.check(source, info.total_frames, problems)
    tasks = _load_tasks_parquet(read, root, problems)
    stats = _read_stats_json(read, root) or {}
    return episodes, tasks, stats


def _tasks_by_index(index: np.ndarray, texts: list, source: str, problems: ProblemList) -> list[str]:
    """Task strings placed at their task_index, which must run 0..T-1 (each once) and name strings: a gap,
    a negative, a duplicate or a huge index is a problem (never a list sized by it)."""
    n = len(texts)
    bad_type = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad_type:
        problems.add(f"{source}: row {bad_type[0]}: task {texts[bad_type[0]]!r} is not a string")
    if n and (index.min() < 0 or index.max() >= n or len(np.unique(index)) != n):
        bad = (index < 0) | (index >= n)
        why = f"{index[bad][:5].tolist()} out of range" if bad.any() else "repeated values"
        problems.add(f"{source}: task_index must number the {n} tasks 0..{n - 1} once each ({why})")
        out = [""] * n
        for i, t in zip(index.tolist(), texts):
            if 0 <= i < n:
                out[i] = t if isinstance(t, str) else ""
        return out
    out = [""] * n
    for i, t in zip(index.tolist(), texts):
        out[i] = t if isinstance(t, str) else ""
    return out


def _load_tasks_parquet(read: Reader, root: str, problems: ProblemList) -> list[str]:
    source = posixpath.join(root, TASKS_PATH)
    t = read_parquet(read, root, TASKS_PATH)
    names = [c for c in t.column_names if c != "task_index"]
    text_col = "task" if "task" in names else next((c for c in names if pa.types.is_string(t.schema.field(c).type)
                                                     or pa.types.is_large_string(t.schema.field(c).type)), None)
    if text_col is None:
        raise DatasetFormatError(f"{source}: no task string column (expected 'task')")
    texts = t.column(text_col).to_pylist()
    if "task_index" not in t.column_names:
        return _tasks_by_index(np.arange(len(texts)), texts, source, problems)
    return _tasks_by_index(_int_col(t, "task_index", source), texts, source, problems)


# ----------------------------------------------------------------------------- v2.x
V21_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"


def _jsonl_int(rows: list[dict], name: str, source: str, default: int | None = None) -> np.ndarray:
    """Field `name` of every row as int64: an int (not a bool, a string or a float), else a named error."""
    out = np.empty(len(rows), dtype=np.int64)
    for n, r in enumerate(rows):
        v = r.get(name, default)
        if isinstance(v, bool) or not isinstance(v, int) or not -2 ** 62 < v < 2 ** 62:
            raise DatasetFormatError(f"{source}: row {n + 1}: field {name!r} must be an integer, got {v!r}")
        out[n] = v
    return out


def _load_v21(read: Reader, root: str, info: DatasetInfo, problems: ProblemList) -> tuple[EpisodeTable, list[str], Stats]:
    source = posixpath.join(root, V21_EPISODES)
    info_source = posixpath.join(root, INFO_PATH)
    rows = _jsonl(read, root, V21_EPISODES)
    ep_index = _jsonl_int(rows, "episode_index", source)
    order = np.argsort(ep_index, kind="stable")
    rows, ep_index = [rows[i] for i in order], ep_index[order]
    if not np.array_equal(ep_index, np.arange(len(rows))):
        raise DatasetFormatError(f"{source}: episode_index must run 0..{len(rows) - 1} without gaps")
    length = _jsonl_int(rows, "length", source)
    tasks_of = []
    for r in rows:
        ts = r.get("tasks") or []
        if not isinstance(ts, list) or not all(isinstance(t, str) for t in ts):
            problems.add(f"{source}: episode {r['episode_index']}: field 'tasks' must be a list of strings, got {ts!r}")
            ts = []
        tasks_of.append(list(ts))
    to_index = np.cumsum(length)
    from_index = to_index - length
    data_tpl = info.data_path if "episode_index" in info.data_path else V21_DATA_PATH
    chunk = (ep_index // info.chunks_size).tolist()
    eps = ep_index.tolist()
    data_files = render_many(data_tpl, f"{info_source}: field 'data_path'", episode_chunk=chunk, episode_index=eps)
    cameras = {}
    video_tpl = info.video_path if info.video_path and "episode_index" in info.video_path else V21_VIDEO_PATH
    for key in info.video_keys:
        files = render_many(video_tpl, f"{info_source}: field 'video_path'", episode_chunk=chunk,
                            video_key=[key] * len(eps), episode_index=eps)
        cameras[key] = CameraFiles(files=files, file_id=np.arange(len(rows), dtype=np.int32),
                                   from_ts=np.zeros(len(rows)), to_ts=frames_to_seconds(length, info.fps))
    episodes = EpisodeTable(
        length=length, dataset_from_index=from_index, dataset_to_index=to_index,
        tasks=tasks_of, data_files=data_files,
        data_file_id=np.arange(len(rows), dtype=np.int32), cameras=cameras,
    )
    episodes.check(source, info.total_frames, problems)
    tasks_source = posixpath.join(root, V21_TASKS)
    task_rows = _jsonl(read, root, V21_TASKS)
    tasks = _tasks_by_index(_jsonl_int(task_rows, "task_index", tasks_source),
                            [r.get("task") for r in task_rows], tasks_source, problems)
    stats = _read_stats_json(read, root)
    if stats is None:
        try:
            per_episode = _jsonl(read, root, V21_EPISODE_STATS)
        except MissingFileError:
            per_episode = None
        if per_episode is not None:
            try:
                stats = aggregate_stats(stats_from_json(r.get("stats") or {}) for r in per_episode)
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                raise DatasetFormatError(f"{posixpath.join(root, V21_EPISODE_STATS)}: not statistics "
                                         f"({type(e).__name__}: {e})") from None
    return episodes, tasks, stats or {}
