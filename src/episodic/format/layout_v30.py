"""The v3.0 layout's metadata: episode tables in `meta/episodes/*.parquet`, tasks in `meta/tasks.parquet`, every value
that decides an item checked as it is read."""

from __future__ import annotations

import posixpath

import numpy as np
import pyarrow as pa

from .episode_table import CameraFiles, EpisodeTable, require_episodes
from .errors import DatasetFormatError, MissingFileError, ProblemList
from .info import DatasetInfo
from .meta_files import (
    EPISODES_PATH,
    INFO_PATH,
    TASKS_PATH,
    Reader,
    read_parquet,
    read_stats_json,
)
from .paths import render_many
from .stats import Stats


def read_v30_episode_tables(read: Reader, root: str, info: DatasetInfo, stats: bool = False) -> pa.Table:
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
        raise DatasetFormatError(
            f"{posixpath.join(root, 'meta/episodes')}: the episodes files disagree on their columns ({e})"
        ) from None


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
        bad = np.flatnonzero(~np.isfinite(values) | (values != np.round(values)) | (np.abs(values) >= 2.0**62))
        if not len(bad):
            return values.astype(np.int64)
        raise DatasetFormatError(
            f"{source}: column {name!r} holds {values[bad[0]].item()!r} at row {int(bad[0])}, not a whole number"
        )
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
            problems.add(
                f"{source}: episode(s) {_first(bad)}: column 'videos/{key}/{name}' is "
                f"{float(values[bad][0])!r}, not a finite time >= 0"
            )
    bad = to_ts < from_ts
    if bad.any():
        problems.add(f"{source}: episode(s) {_first(bad)}: 'videos/{key}/to_timestamp' is before from_timestamp")


def _files(
    chunk: np.ndarray, file: np.ndarray, prefix: str, source: str, problems: ProblemList, render
) -> tuple[list[str], np.ndarray]:
    """Unique (chunk, file) pairs of the episodes -> their relative paths (rendered and checked by
    `render(chunks, files)`) and each episode's file id."""
    bad = (chunk < 0) | (file < 0)
    if bad.any():
        problems.add(
            f"{source}: episode(s) {_first(bad)}: '{prefix}/chunk_index' and '{prefix}/file_index' must "
            f"be >= 0, got ({int(chunk[bad][0])}, {int(file[bad][0])})"
        )
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
    if not (
        (pa.types.is_list(typ) or pa.types.is_large_list(typ))
        and (pa.types.is_string(typ.value_type) or pa.types.is_large_string(typ.value_type))
    ):
        problems.add(f"{source}: column 'tasks' is {typ}, not a list of strings")
        return [[] for _ in range(n)]
    return [t or [] for t in col.to_pylist()]


def load_v30(
    read: Reader, root: str, info: DatasetInfo, problems: ProblemList
) -> tuple[EpisodeTable, list[str], Stats]:
    source = posixpath.join(root, "meta/episodes")
    info_source = posixpath.join(root, INFO_PATH)
    table = read_v30_episode_tables(read, root, info)
    require_episodes(table.num_rows, source, info.total_episodes)
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
        "data",
        lambda c, f: render_many(info.data_path, f"{info_source}: field 'data_path'", chunk_index=c, file_index=f),
    )
    cameras = {}
    for key in info.video_keys:
        files, file_id = files_of(
            f"videos/{key}",
            lambda c, f, k=key: render_many(
                info.video_path or "",
                f"{info_source}: field 'video_path'",
                video_key=[k] * len(c),
                chunk_index=c,
                file_index=f,
            ),
        )
        times, present = [], True
        for name in ("from_timestamp", "to_timestamp"):
            try:
                times.append(_float_col(table, f"videos/{key}/{name}", source))
            except DatasetFormatError as e:
                problems.add(str(e))
                times.append(np.full(len(ep_index), np.nan))  # lenient: already reported
                present = False
        if present:
            _check_times(times[0], times[1], key, source, problems)
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
    stats = read_stats_json(read, root) or {}
    return episodes, tasks, stats


def tasks_by_index(index: np.ndarray, texts: list, source: str, problems: ProblemList) -> list[str]:
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
    text_col = (
        "task"
        if "task" in names
        else next(
            (
                c
                for c in names
                if pa.types.is_string(t.schema.field(c).type) or pa.types.is_large_string(t.schema.field(c).type)
            ),
            None,
        )
    )
    if text_col is None:
        raise DatasetFormatError(f"{source}: no task string column (expected 'task')")
    texts = t.column(text_col).to_pylist()
    if "task_index" not in t.column_names:
        return tasks_by_index(np.arange(len(texts)), texts, source, problems)
    return tasks_by_index(_int_col(t, "task_index", source), texts, source, problems)
