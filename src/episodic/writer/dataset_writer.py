"""Write LeRobot v3.0 datasets: parquet + mp4, several episodes per file, rotation by size, atomic files."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..format.features import DEFAULT_FEATURES, Feature
from ..format.info import DEFAULT_DATA_PATH, DEFAULT_VIDEO_PATH, V30, DatasetInfo
from ..format.metadata import EPISODES_PATH, INFO_PATH, STATS_PATH, TASKS_PATH
from ..format.stats import aggregate_stats, array_stats, stats_to_json
from ..format.timebase import frames_to_seconds, timestamp_column
from ..storage.atomic import AtomicFile, atomic_path, atomic_write_bytes
from .video import VideoFileWriter

MB = 1024 * 1024
MAX_IMAGE_STATS_FRAMES = 100


def _arrow_type(f: Feature) -> pa.DataType:
    if f.dtype == "string":
        return pa.string()
    base = pa.from_numpy_dtype(np.dtype(f.dtype))
    if f.shape == (1,):
        return base
    t = base
    for n in reversed(f.shape):
        t = pa.list_(t, n)
    return t


def _hf_type(f: Feature) -> dict:
    value = {"dtype": f.dtype, "_type": "Value"}
    if f.shape == (1,):
        return value
    t: dict = value
    for n in reversed(f.shape):
        t = {"feature": t, "length": n, "_type": "List"}
    return t


def _column(values: np.ndarray, f: Feature) -> pa.Array:
    typ = _arrow_type(f)
    if f.dtype == "string":
        return pa.array([str(v) for v in values], typ)
    arr = np.ascontiguousarray(values, dtype=np.dtype(f.dtype))
    if f.shape == (1,):
        return pa.array(arr.reshape(-1), typ)
    flat = pa.array(arr.reshape(-1))
    for n in reversed(f.shape):
        flat = pa.FixedSizeListArray.from_arrays(flat, n)
    return flat


class _Rotating:
    """Tracks (chunk, file) indices of a rotating file series."""

    def __init__(self, chunks_size: int):
        self.chunks_size, self.chunk, self.file = chunks_size, 0, 0

    def advance(self) -> None:
        self.file += 1
        if self.file >= self.chunks_size:
            self.chunk, self.file = self.chunk + 1, 0


class DatasetWriter:
    """Create a LeRobot v3.0 dataset episode by episode.

    >>> w = DatasetWriter("out", fps=30, features={"observation.state": {"dtype": "float32", "shape": [6]},
    ...                                          "observation.images.top": {"dtype": "video", "shape": [96, 128, 3]}})
    >>> w.add_episode({"observation.state": states, "observation.images.top": frames}, task="pick")  # doctest: +SKIP
    >>> w.finalize()  # doctest: +SKIP

    Every file is written under a temporary name and renamed when complete; meta/info.json is written last,
    so an interrupted run never leaves a directory that looks like a complete dataset.
    """

    def __init__(self, root: str | os.PathLike, fps: int, features: Mapping[str, Mapping[str, Any]],
                 robot_type: str | None = None, vcodec: str = "av1", gop: int = 2, crf: int | None = 30,
                 pix_fmt: str = "yuv420p", preset: int | str | None = None, data_files_size_in_mb: float = 100,
                 video_files_size_in_mb: float = 200, chunks_size: int = 1000, overwrite: bool = False):
        self.root = os.path.abspath(os.fspath(root))
        if os.path.exists(self.root) and os.listdir(self.root):
            if not overwrite:
                raise FileExistsError(f"{self.root}: directory exists and is not empty (pass overwrite=True)")
            shutil.rmtree(self.root)
        os.makedirs(self.root, exist_ok=True)
        self.fps = int(fps)
        feats = {name: Feature.from_json(name, {"names": None, **spec}, "features") for name, spec in features.items()}
        for name, spec in DEFAULT_FEATURES.items():
            feats.setdefault(name, Feature.from_json(name, spec))
        for f in feats.values():
            if f.is_image:
                raise ValueError(f"feature {f.name!r}: 'image' features are not written by episodic; use 'video'")
        self.video_opts = dict(vcodec=vcodec, gop=gop, crf=crf, pix_fmt=pix_fmt, preset=preset)
        self.features = feats
        self.video_keys = [k for k, f in feats.items() if f.is_video]
        self.data_keys = [k for k, f in feats.items() if not f.is_video]
        self.robot_type = robot_type
        self.data_limit = data_files_size_in_mb * MB
        self.video_limit = video_files_size_in_mb * MB
        self.sizes = (data_files_size_in_mb, video_files_size_in_mb)
        self.chunks_size = chunks_size
        self.tasks: dict[str, int] = {}
        self.episodes: list[dict[str, Any]] = []
        self.episode_stats: list[dict] = []
        self.total_frames = 0
        self._data_pos = _Rotating(chunks_size)
        self._data_writer: pq.ParquetWriter | None = None
        self._data_file: AtomicFile | None = None
        self._schema = pa.schema([pa.field(k, _arrow_type(feats[k])) for k in self.data_keys],
                                 metadata={"huggingface": json.dumps({"info": {"features": {k: _hf_type(feats[k]) for k in self.data_keys}}})})
        self._video_pos = {k: _Rotating(chunks_size) for k in self.video_keys}
        self._video_writers: dict[str, VideoFileWriter | None] = {k: None for k in self.video_keys}
        self._video_info: dict[str, dict] = {}
        self._finalized = False

    # ------------------------------------------------------------------ api
    def add_episode(self, frames: Mapping[str, np.ndarray], task: str | Sequence[str]) -> int:
        """Append one episode. `frames` maps each user feature to an array with one row per frame (cameras:
        (T, H, W, 3) uint8). `task` is one string, or one string per frame. Returns the episode index."""
        if self._finalized:
            raise RuntimeError("dataset already finalized")
        ep = len(self.episodes)
        user = [k for k in self.features if k not in DEFAULT_FEATURES]
        missing = [k for k in user if k not in frames]
        unknown = [k for k in frames if k not in self.features]
        if missing or unknown:
            raise ValueError(f"episode {ep}: missing features {missing}, unknown features {unknown}")
        lengths = {k: len(frames[k]) for k in user}
        n = next(iter(lengths.values())) if lengths else 0
        if n == 0 or any(v != n for v in lengths.values()):
            raise ValueError(f"episode {ep}: every feature needs the same positive number of frames, got {lengths}")
        tasks = [task] * n if isinstance(task, str) else list(task)
        if len(tasks) != n:
            raise ValueError(f"episode {ep}: {len(tasks)} task strings for {n} frames")
        for t in tasks:
            self.tasks.setdefault(t, len(self.tasks))
        for k in self.video_keys:
            f = self.features[k]
            h, w, c = f.shape
            a = frames[k]
            if a.dtype != np.uint8 or a.shape[1:] != (h, w, c):
                raise ValueError(f"episode {ep}: camera {k!r} needs uint8 frames of shape (T, {h}, {w}, {c}), got {a.dtype} {a.shape}")
        columns = {k: np.asarray(frames[k]) for k in user if k not in self.video_keys}
        frame_index = np.arange(n, dtype=np.int64)
        columns.update(timestamp=timestamp_column(frame_index, self.fps), frame_index=frame_index,
                       episode_index=np.full(n, ep, np.int64),
                       index=np.arange(self.total_frames, self.total_frames + n, dtype=np.int64),
                       task_index=np.array([self.tasks[t] for t in tasks], dtype=np.int64))
        for k in self.data_keys:
            exp = self.features[k].shape
            got = columns[k].shape[1:] or (1,)
            if self.features[k].dtype != "string" and tuple(got) != exp:
                raise ValueError(f"episode {ep}: feature {k!r} has shape {tuple(got)} per frame, info says {exp}")
        record: dict[str, Any] = {"episode_index": ep, "tasks": list(dict.fromkeys(tasks)), "length": n}
        record.update(self._write_data(columns, n))
        record["dataset_from_index"] = self.total_frames
        record["dataset_to_index"] = self.total_frames + n
        for k in self.video_keys:
            record.update(self._write_video(k, frames[k]))
        stats = {k: array_stats(columns[k]) for k in self.data_keys if self.features[k].dtype not in ("string", "bool")}
        for k in self.video_keys:
            step = max(1, n // MAX_IMAGE_STATS_FRAMES)
            stats[k] = array_stats(frames[k][::step], image=True)
        self.episode_stats.append(stats)
        self.episodes.append(record)
        self.total_frames += n
        return ep

    def finalize(self) -> str:
        """Close the open files, then write the episodes, tasks, stats and (last) info.json."""
        if self._finalized:
            return self.root
        self._close_data()
        for k in self.video_keys:
            self._close_video(k)
        self._write_meta()
        self._finalized = True
        return self.root

    def abort(self) -> None:
        """Drop the files being written (nothing that looks complete is left)."""
        if self._data_writer is not None:
            self._data_writer.close()
            self._data_file.discard()
            self._data_writer = self._data_file = None
        for k, w in self._video_writers.items():
            if w is not None:
                w.abort()
                self._video_writers[k] = None

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finalize()
        else:
            self.abort()

    # ------------------------------------------------------------------ data files
    def _write_data(self, columns: dict[str, np.ndarray], n: int) -> dict[str, int]:
        if self._data_writer is None:
            rel = DEFAULT_DATA_PATH.format(chunk_index=self._data_pos.chunk, file_index=self._data_pos.file)
            self._data_file = AtomicFile(os.path.join(self.root, rel))
            self._data_writer = pq.ParquetWriter(self._data_file.tmp, self._schema, compression="snappy")
        table = pa.Table.from_arrays([_column(columns[k], self.features[k]) for k in self.data_keys], schema=self._schema)
        self._data_writer.write_table(table, row_group_size=max(n, 1))  # one row group per episode
        where = {"data/chunk_index": self._data_pos.chunk, "data/file_index": self._data_pos.file}
        if os.path.getsize(self._data_file.tmp) >= self.data_limit:
            self._close_data()
        return where

    def _close_data(self) -> None:
        if self._data_writer is not None:
            self._data_writer.close()
            self._data_file.commit()
            self._data_writer = self._data_file = None
            self._data_pos.advance()

    # ------------------------------------------------------------------ videos
    def _write_video(self, key: str, frames: np.ndarray) -> dict[str, Any]:
        w = self._video_writers[key]
        pos = self._video_pos[key]
        if w is None:
            h, wd, _ = self.features[key].shape
            path = os.path.join(self.root, DEFAULT_VIDEO_PATH.format(video_key=key, chunk_index=pos.chunk, file_index=pos.file))
            w = self._video_writers[key] = VideoFileWriter(path, wd, h, self.fps, **self.video_opts)
            self._video_info[key] = {"video.codec": w.codec, "video.pix_fmt": w.pix_fmt}
        start = w.add(frames)
        where = {f"videos/{key}/chunk_index": pos.chunk, f"videos/{key}/file_index": pos.file,
                 f"videos/{key}/from_timestamp": start, f"videos/{key}/to_timestamp": start + frames_to_seconds(len(frames), self.fps)}
        if w.size() >= self.video_limit:
            self._close_video(key)
        return where

    def _close_video(self, key: str) -> None:
        w = self._video_writers[key]
        if w is not None:
            w.close()
            self._video_writers[key] = None
            self._video_pos[key].advance()

    # ------------------------------------------------------------------ metadata
    def _write_meta(self) -> None:
        ep_table = pa.Table.from_pylist(self.episodes) if self.episodes else pa.table({"episode_index": pa.array([], pa.int64())})
        stat_cols: dict[str, list] = {}
        for s in self.episode_stats:
            for feat, d in s.items():
                for name, v in d.items():
                    stat_cols.setdefault(f"stats/{feat}/{name}", []).append(np.asarray(v).tolist())
        for name, values in stat_cols.items():
            ep_table = ep_table.append_column(name, pa.array(values))
        n = ep_table.num_rows
        ep_table = ep_table.append_column("meta/episodes/chunk_index", pa.array(np.zeros(n, np.int64)))
        ep_table = ep_table.append_column("meta/episodes/file_index", pa.array(np.zeros(n, np.int64)))
        self._write_parquet(EPISODES_PATH.format(chunk_index=0, file_index=0), ep_table)

        names = list(self.tasks)
        pandas_meta = {"index_columns": ["__index_level_0__"],
                       "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                                           "metadata": {"encoding": "UTF-8"}}],
                       "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64", "metadata": None},
                                   {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode", "numpy_type": "object", "metadata": None}],
                       "attributes": {}, "creator": {"library": "pyarrow", "version": pa.__version__}}
        tasks = pa.table({"task_index": pa.array(np.arange(len(names), dtype=np.int64)), "__index_level_0__": pa.array(names, pa.large_string())})
        tasks = tasks.replace_schema_metadata({"pandas": json.dumps(pandas_meta)})
        self._write_parquet(TASKS_PATH, tasks)

        stats = aggregate_stats(self.episode_stats)
        atomic_write_bytes(os.path.join(self.root, STATS_PATH), json.dumps(stats_to_json(stats), indent=4).encode())

        features = {}
        for k, f in self.features.items():
            spec = f.to_json()
            if f.is_video:
                h, w, c = f.shape
                spec["names"] = f.names or ["height", "width", "channels"]
                spec["info"] = {"video.height": h, "video.width": w, **self._video_info.get(k, {}),
                                "video.is_depth_map": False, "video.fps": self.fps, "video.channels": c,
                                "video.g": self.video_opts["gop"], "video.crf": self.video_opts["crf"], "has_audio": False}
            features[k] = spec
        info = DatasetInfo(codebase_version=V30, fps=self.fps, features={k: Feature.from_json(k, v) for k, v in features.items()},
                           total_episodes=len(self.episodes), total_frames=self.total_frames, total_tasks=len(self.tasks),
                           chunks_size=self.chunks_size, data_files_size_in_mb=self.sizes[0], video_files_size_in_mb=self.sizes[1],
                           data_path=DEFAULT_DATA_PATH, video_path=DEFAULT_VIDEO_PATH if self.video_keys else None,
                           robot_type=self.robot_type, splits={"train": f"0:{len(self.episodes)}"})
        atomic_write_bytes(os.path.join(self.root, INFO_PATH), json.dumps(info.to_dict(), indent=4).encode())

    def _write_parquet(self, rel: str, table: pa.Table) -> None:
        with atomic_path(os.path.join(self.root, rel)) as tmp:
            pq.write_table(table, tmp)
