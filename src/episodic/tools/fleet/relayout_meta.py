"""The metadata of a re-laid-out dataset, carried over from its source: every episode's row (its new data file,
video files and times from the plan; its tasks, length and index range as they were), the per-episode
statistics (v3.0: the ``stats/...`` columns as stored; v2.x: meta/episodes_stats.jsonl), the tasks (same
indices), meta/stats.json (the source's file as it is; or, when it has none, the statistics its loader
aggregates) and info.json (the source's, in the v3.0 layout: paths, sizes, totals). Written by the writer's
own functions (`writer.meta`), info.json last."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ...format.errors import DatasetFormatError, MissingFileError
from ...format.info import DEFAULT_DATA_PATH, DEFAULT_VIDEO_PATH, V30, DatasetInfo
from ...format.layout_v30 import read_v30_episode_tables
from ...format.metadata import (
    EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    V21_EPISODE_STATS,
    DatasetMetadata,
    read_jsonl,
)
from ...format.stats import stats_to_json
from ...writer.meta import episodes_table, write_episodes, write_info, write_stats, write_tasks
from .relayout_plan import Plan, RelayoutOptions

__all__ = ["write_relayout_metadata"]

log = logging.getLogger(__name__)

V21_ONLY_INFO = ("total_chunks", "total_videos")  # info.json keys of the v2.x layout alone


def _rows(meta: DatasetMetadata, plan: Plan) -> list[dict[str, Any]]:
    eps = meta.episodes
    rows = []
    for e in range(len(eps)):
        row: dict[str, Any] = {
            "episode_index": e,
            "tasks": list(eps.tasks[e]),
            "length": int(eps.length[e]),
            "data/chunk_index": plan.episode_data[e][0],
            "data/file_index": plan.episode_data[e][1],
            "dataset_from_index": int(eps.dataset_from_index[e]),
            "dataset_to_index": int(eps.dataset_to_index[e]),
        }
        for key in meta.video_keys:
            chunk, file, lo, hi = plan.episode_videos[key][e]
            row.update(
                {
                    f"videos/{key}/chunk_index": chunk,
                    f"videos/{key}/file_index": file,
                    f"videos/{key}/from_timestamp": lo,
                    f"videos/{key}/to_timestamp": hi,
                }
            )
        rows.append(row)
    return rows


def _v30_stats(source: Any, meta: DatasetMetadata) -> pa.Table | None:
    """The source's ``stats/...`` episode columns as stored, one row per episode in order."""
    table = read_v30_episode_tables(source.read_bytes, meta.root, meta.info, stats=True)
    names = [c for c in table.column_names if c.startswith("stats/")]
    if not names:
        return None
    order = pc.sort_indices(table.column("episode_index"))
    return table.take(order).select(names)


def _v21_stats(source: Any, meta: DatasetMetadata) -> list[dict] | None:
    """meta/episodes_stats.jsonl as one statistics dict per episode, when it has every episode once."""
    try:
        rows = read_jsonl(source.read_bytes, meta.root, V21_EPISODE_STATS)
    except MissingFileError:
        return None
    by_episode = {r.get("episode_index"): r.get("stats") for r in rows}
    n = len(meta.episodes)
    if sorted(k for k in by_episode if isinstance(k, int)) != list(range(n)) or len(rows) != n:
        log.warning(
            "%s: %s does not hold every episode once: the per-episode statistics are not carried over",
            meta.root,
            V21_EPISODE_STATS,
        )
        return None
    out = []
    for e in range(n):
        s = by_episode[e]
        if not isinstance(s, dict) or not all(isinstance(v, dict) for v in s.values()):
            raise DatasetFormatError(
                f"{meta.root}/{V21_EPISODE_STATS}: episode {e}: field 'stats' is not statistics per feature"
            )
        out.append(s)
    names = [sorted((f, k) for f, d in s.items() for k in d) for s in out]
    if any(x != names[0] for x in names):
        log.warning(
            "%s: %s does not hold the same statistics for every episode: the per-episode statistics are "
            "not carried over",
            meta.root,
            V21_EPISODE_STATS,
        )
        return None
    return out


def _info(meta: DatasetMetadata, options: RelayoutOptions) -> DatasetInfo:
    n = len(meta.episodes)
    extra = {k: v for k, v in meta.info.extra.items() if k not in V21_ONLY_INFO}
    return replace(
        meta.info,
        codebase_version=V30,
        total_episodes=n,
        total_frames=int(meta.episodes.length.sum()),
        total_tasks=len(meta.tasks),
        chunks_size=options.chunks_size,
        data_files_size_in_mb=options.data_file_mb,
        video_files_size_in_mb=options.video_file_mb,
        data_path=DEFAULT_DATA_PATH,
        video_path=DEFAULT_VIDEO_PATH if meta.video_keys else None,
        splits=meta.info.splits or {"train": f"0:{n}"},
        extra=extra,
    )


def write_relayout_metadata(
    root: str, source: Any, meta: DatasetMetadata, plan: Plan, options: RelayoutOptions, fsync: bool = True
) -> list[str]:
    """Write the new dataset's meta/ at `root` (info.json last); returns the files written (relative)."""
    rows = _rows(meta, plan)
    if meta.info.is_v21:
        table = episodes_table(rows, _v21_stats(source, meta) or [])
    else:
        table = episodes_table(rows, [])
        stats = _v30_stats(source, meta)
        if stats is not None:
            for name in stats.column_names:
                table = table.append_column(name, stats.column(name))
    write_episodes(root, table, fsync)
    write_tasks(root, meta.tasks, fsync)
    written = [EPISODES_PATH.format(chunk_index=0, file_index=0), TASKS_PATH]
    try:
        stats_json = source.read_bytes(STATS_PATH)
    except MissingFileError:
        stats_json = json.dumps(stats_to_json(meta.stats), indent=4).encode() if meta.stats else None
    if stats_json is not None:
        write_stats(root, stats_json, fsync)
        written.append(STATS_PATH)
    write_info(root, _info(meta, options), fsync)
    return written + [INFO_PATH]
