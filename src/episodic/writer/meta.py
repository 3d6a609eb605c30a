"""The metadata files of a finished dataset: meta/episodes, meta/tasks.parquet, meta/stats.json and, last,
meta/info.json (a directory without it is never taken for a complete dataset).

`write_metadata` writes them all for the writer; its parts (`episodes_table`, `write_episodes`, `write_tasks`,
`write_stats`, `write_info`) are also used by `episodic convert` / `repack` (tools/fleet/relayout.py), which
carry another dataset's info, tasks and statistics over."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..format.features import Feature
from ..format.info import DEFAULT_DATA_PATH, DEFAULT_VIDEO_PATH, V30, DatasetInfo
from ..format.metadata import EPISODES_PATH, INFO_PATH, STATS_PATH, TASKS_PATH
from ..format.stats import aggregate_stats, stats_to_json
from ..storage.atomic import atomic_write_bytes
from .data_files import write_parquet


def _parquet(root: str, rel: str, table: pa.Table, fsync: bool) -> None:
    write_parquet(os.path.join(root, rel), table.schema, [table], row_group_per_table=False, fsync=fsync)


def episodes_table(
    episodes: Sequence[dict[str, Any]], episode_stats: Sequence[Mapping[str, Mapping[str, Any]]]
) -> pa.Table:
    """The meta/episodes table of `episodes` (one dict of columns per episode) and their per-episode
    statistics (``stats/<feature>/<name>`` columns), without the ``meta/episodes/...`` columns."""
    table = pa.Table.from_pylist(list(episodes)) if episodes else pa.table({"episode_index": pa.array([], pa.int64())})
    stat_cols: dict[str, list] = {}
    for s in episode_stats:
        for feat, d in s.items():
            for name, v in d.items():
                stat_cols.setdefault(f"stats/{feat}/{name}", []).append(np.asarray(v).tolist())
    for name, values in stat_cols.items():
        table = table.append_column(name, pa.array(values))
    return table


def write_episodes(root: str, table: pa.Table, fsync: bool = False) -> None:
    """`table` (one row per episode) as the one meta/episodes file, with its ``meta/episodes/...`` columns."""
    n = table.num_rows
    for name in ("meta/episodes/chunk_index", "meta/episodes/file_index"):
        if name in table.column_names:
            table = table.drop_columns([name])
        table = table.append_column(name, pa.array(np.zeros(n, np.int64)))
    _parquet(root, EPISODES_PATH.format(chunk_index=0, file_index=0), table, fsync)


def write_tasks(root: str, tasks: Sequence[str], fsync: bool = False) -> None:
    """meta/tasks.parquet: task `i` is `tasks[i]` (LeRobot's layout: the text as the pandas index)."""
    names = list(tasks)
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": "__index_level_0__",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
    }
    task_table = pa.table(
        {
            "task_index": pa.array(np.arange(len(names), dtype=np.int64)),
            "__index_level_0__": pa.array(names, pa.large_string()),
        }
    )
    _parquet(root, TASKS_PATH, task_table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)}), fsync)


def write_stats(root: str, stats_json: bytes, fsync: bool = False) -> None:
    """meta/stats.json from its bytes."""
    atomic_write_bytes(os.path.join(root, STATS_PATH), stats_json, fsync=fsync)


def write_info(root: str, info: DatasetInfo, fsync: bool = False) -> None:
    """meta/info.json: written last, it makes the directory a dataset."""
    atomic_write_bytes(os.path.join(root, INFO_PATH), json.dumps(info.to_dict(), indent=4).encode(), fsync=fsync)


def write_metadata(
    root: str,
    *,
    fps: int,
    features: Mapping[str, Feature],
    video_info: Mapping[str, Any],
    episodes: Sequence[dict[str, Any]],
    episode_stats: Sequence[Mapping[str, Mapping[str, Any]]],
    tasks: Sequence[str],
    total_frames: int,
    chunks_size: int,
    sizes_mb: tuple[float, float],
    robot_type: str | None,
    fsync: bool = False,
) -> None:
    """`video_info`: the `info` entries every camera gets (codec, pixel format, gop, crf)."""
    write_episodes(root, episodes_table(episodes, episode_stats), fsync)
    write_tasks(root, tasks, fsync)
    stats = aggregate_stats(episode_stats)
    write_stats(root, json.dumps(stats_to_json(stats), indent=4).encode(), fsync)

    out_features = {}
    video_keys = []
    for k, f in features.items():
        spec = f.to_json()
        if f.is_video:
            video_keys.append(k)
            h, w, c = f.shape
            spec["names"] = f.names or ["height", "width", "channels"]
            spec["info"] = {
                "video.height": h,
                "video.width": w,
                "video.codec": video_info["video.codec"],
                "video.pix_fmt": video_info["video.pix_fmt"],
                "video.is_depth_map": False,
                "video.fps": fps,
                "video.channels": c,
                "video.g": video_info["video.g"],
                "video.crf": video_info["video.crf"],
                "has_audio": False,
            }
            if f.is_depth:  # LeRobot 0.6's depth camera: 12-bit codes in lossless HEVC, its coding
                spec["info"].update({"video.codec": "hevc", "video.pix_fmt": "gray12le", "video.crf": None})
                del spec["info"]["video.is_depth_map"]
                spec["info"] = {
                    **f.depth_coding.info(),
                    **spec["info"],
                    "video.extra_options": {"x265-params": "lossless=1"},
                }
        out_features[k] = Feature.from_json(k, spec)
    info = DatasetInfo(
        codebase_version=V30,
        fps=fps,
        features=out_features,
        total_episodes=len(episodes),
        total_frames=total_frames,
        total_tasks=len(tasks),
        chunks_size=chunks_size,
        data_files_size_in_mb=sizes_mb[0],
        video_files_size_in_mb=sizes_mb[1],
        data_path=DEFAULT_DATA_PATH,
        video_path=DEFAULT_VIDEO_PATH if video_keys else None,
        robot_type=robot_type,
        splits={"train": f"0:{len(episodes)}"},
    )
    write_info(root, info, fsync)
