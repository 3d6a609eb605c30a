"""The v2.x layout's metadata: `meta/episodes.jsonl`, `meta/tasks.jsonl`, `meta/episodes_stats.jsonl`."""

from __future__ import annotations

import posixpath

import numpy as np

from .episode_table import CameraFiles, EpisodeTable, require_episodes
from .errors import DatasetFormatError, MissingFileError, ProblemList
from .info import DatasetInfo
from .layout_v30 import tasks_by_index
from .meta_files import (
    INFO_PATH,
    V21_EPISODE_STATS,
    V21_EPISODES,
    V21_TASKS,
    Reader,
    read_jsonl,
    read_stats_json,
)
from .paths import render_many
from .stats import Stats, aggregate_stats, stats_from_json
from .timebase import frames_to_seconds

V21_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"


def _jsonl_int(rows: list[dict], name: str, source: str, default: int | None = None) -> np.ndarray:
    """Field `name` of every row as int64: an int (not a bool, a string or a float), else a named error."""
    out = np.empty(len(rows), dtype=np.int64)
    for n, r in enumerate(rows):
        v = r.get(name, default)
        if isinstance(v, bool) or not isinstance(v, int) or not -(2**62) < v < 2**62:
            raise DatasetFormatError(f"{source}: row {n + 1}: field {name!r} must be an integer, got {v!r}")
        out[n] = v
    return out


def load_v21(
    read: Reader, root: str, info: DatasetInfo, problems: ProblemList
) -> tuple[EpisodeTable, list[str], Stats]:
    source = posixpath.join(root, V21_EPISODES)
    info_source = posixpath.join(root, INFO_PATH)
    rows = read_jsonl(read, root, V21_EPISODES)
    require_episodes(len(rows), source, info.total_episodes)
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
        files = render_many(
            video_tpl,
            f"{info_source}: field 'video_path'",
            episode_chunk=chunk,
            video_key=[key] * len(eps),
            episode_index=eps,
        )
        cameras[key] = CameraFiles(
            files=files,
            file_id=np.arange(len(rows), dtype=np.int32),
            from_ts=np.zeros(len(rows)),
            to_ts=frames_to_seconds(length, info.fps),
        )
    episodes = EpisodeTable(
        length=length,
        dataset_from_index=from_index,
        dataset_to_index=to_index,
        tasks=tasks_of,
        data_files=data_files,
        data_file_id=np.arange(len(rows), dtype=np.int32),
        cameras=cameras,
    )
    episodes.check(source, info.total_frames, problems)
    tasks_source = posixpath.join(root, V21_TASKS)
    task_rows = read_jsonl(read, root, V21_TASKS)
    tasks = tasks_by_index(
        _jsonl_int(task_rows, "task_index", tasks_source), [r.get("task") for r in task_rows], tasks_source, problems
    )
    stats = read_stats_json(read, root)
    if stats is None:
        try:
            per_episode = read_jsonl(read, root, V21_EPISODE_STATS)
        except MissingFileError:
            per_episode = None
        if per_episode is not None:
            try:
                stats = aggregate_stats(stats_from_json(r.get("stats") or {}) for r in per_episode)
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                raise DatasetFormatError(
                    f"{posixpath.join(root, V21_EPISODE_STATS)}: not statistics ({type(e).__name__}: {e})"
                ) from None
    return episodes, tasks, stats or {}
