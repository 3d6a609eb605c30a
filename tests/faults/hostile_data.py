"""Hostile and corrupt datasets for the fault tests, each made from a good dataset written by episodic's writer
(a copy, then one edit), and the tools that watch what the library touches: a static HTTP server that records
every request, and a recorder of the files this Python process opens (an audit hook).

`HOSTILE` and `CORRUPT` are catalogues of (name, edit, expected error class, pattern the message must match,
pattern `episodic validate` must report): the loader's tests and the validate tests run the same cases.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from episodic.format import DatasetFormatError
from episodic.format.errors import UnsafePathError

EPISODES = "meta/episodes/chunk-000/file-000.parquet"
DATA = "data/chunk-000/file-000.parquet"
TASKS = "meta/tasks.parquet"
TOP = "observation.images.top"
TOP_MP4 = f"videos/{TOP}/chunk-000/file-000.mp4"


# ---------------------------------------------------------------------------------------------- edits
def edit_info(root: Path, change: Callable[[dict], None]) -> None:
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    change(info)
    path.write_text(json.dumps(info))


def edit_table(root: Path, rel: str, change: Callable[[pa.Table], pa.Table]) -> None:
    path = root / rel
    pq.write_table(change(pq.read_table(path)), path)


def set_column(table: pa.Table, name: str, values) -> pa.Table:
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, arr)
    return table.append_column(name, arr)


def column_edit(rel: str, name: str, edit: Callable[[np.ndarray], object]) -> Callable[[Path], None]:
    """An edit of one numeric column of one parquet file: `edit(values)` returns the new values."""

    def apply(root: Path) -> None:
        edit_table(root, rel, lambda t: set_column(t, name, edit(t.column(name).to_numpy().copy())))

    return apply


def _put(values: np.ndarray, i: int, v) -> np.ndarray:
    values = values.astype(np.result_type(values, np.asarray(v)))
    values[i] = v
    return values


def rename_camera(root: Path, old: str, new: str) -> None:
    """Rename a video feature in info.json and its columns in the episodes table (not the files)."""

    def info_change(info: dict) -> None:
        info["features"] = {(new if k == old else k): v for k, v in info["features"].items()}

    edit_info(root, info_change)
    edit_table(
        root,
        EPISODES,
        lambda t: t.rename_columns(
            [
                c.replace(f"videos/{old}/", f"videos/{new}/") if c.startswith(f"videos/{old}/") else c
                for c in t.column_names
            ]
        ),
    )


def ragged_action(root: Path) -> None:
    """`action` as variable-length lists: row 0 one value short, row 1 one long (the same total)."""

    def change(t: pa.Table) -> pa.Table:
        rows = t.column("action").to_pylist()
        rows[1] = rows[1] + [rows[0][-1]]
        rows[0] = rows[0][:-1]
        return set_column(t, "action", pa.array(rows, pa.list_(pa.float32())))

    edit_table(root, DATA, change)


def string_timestamps(root: Path) -> None:
    edit_table(
        root, DATA, lambda t: set_column(t, "timestamp", pa.array([str(x) for x in t.column("timestamp").to_pylist()]))
    )


def short_action_lists(root: Path) -> None:
    edit_table(
        root,
        DATA,
        lambda t: set_column(
            t, "action", pa.array([r[:7] for r in t.column("action").to_pylist()], pa.list_(pa.float32(), 7))
        ),
    )


# pyarrow 15 cannot read a null inside a fixed-size list column at all (an error naming the file, not the column)
MISSING_VALUES = (
    r"column 'action': 1 missing values"
    if int(pa.__version__.split(".")[0]) >= 16
    else r"file-000\.parquet: not a readable parquet file"
)


def missing_action_value(root: Path) -> None:
    def change(t: pa.Table) -> pa.Table:
        rows = t.column("action").to_pylist()
        return set_column(t, "action", pa.array([None] + rows[1:], t.schema.field("action").type))

    edit_table(root, DATA, change)


def huge_length(root: Path) -> None:
    """Episode 5 claims 2**40 frames, consistently in the episodes table and info.json."""

    def change(t: pa.Table) -> pa.Table:
        length = t.column("length").to_numpy().copy()
        length[5] = 2**40
        return set_column(
            set_column(t, "length", length), "dataset_to_index", t.column("dataset_from_index").to_numpy() + length
        )

    edit_table(root, EPISODES, change)
    edit_info(
        root,
        lambda info: info.update(
            total_frames=int(pq.read_table(root / EPISODES).column("dataset_to_index").to_numpy()[-1])
        ),
    )


def drop_tasks_row(root: Path) -> None:
    edit_table(root, TASKS, lambda t: t.slice(0, 2))


def drop_from_timestamp(root: Path) -> None:
    edit_table(root, EPISODES, lambda t: t.drop_columns([f"videos/{TOP}/from_timestamp"]))


def camera_key_dotdot(root: Path) -> None:
    edit_info(root, lambda info: info.update(video_path="{video_key}/{video_key}/c{chunk_index}f{file_index}.mp4"))
    rename_camera(root, TOP, "..")


# ---------------------------------------------------------------------------------------------- catalogues
@dataclass(frozen=True)
class Case:
    name: str
    edit: Callable[[Path], None]
    error: type[Exception]
    message: str  # regex the loader's error must match (file and field)
    at_item: bool = False  # the loader fails at the first item (a video), not at construction
    validate: str | None = None  # regex one of validate's problems must match (default: `message`)
    options: dict = field(default_factory=dict)  # loader arguments under which the loader refuses it


def _info(change: Callable[[dict], None]) -> Callable[[Path], None]:
    return lambda root: edit_info(root, change)


def _setitem(key, value):
    def change(info: dict) -> None:
        info[key] = value

    return change


def _feature(name: str, spec: dict):
    def change(info: dict) -> None:
        info["features"][name] = spec

    return change


STRICT = {"on_unknown_task": "raise"}

HOSTILE = [
    Case(
        "data_path parent",
        _info(_setitem("data_path", "../outside/file-{chunk_index:03d}.parquet")),
        UnsafePathError,
        r"info\.json: field 'data_path'.*'\.\./outside/file-000\.parquet'.*'\.\.' component",
    ),
    Case(
        "data_path absolute",
        _info(_setitem("data_path", "/tmp/episodic-outside/{chunk_index}/{file_index}.parquet")),
        UnsafePathError,
        r"info\.json: field 'data_path'.*absolute",
    ),
    Case(
        "video_path other host",
        _info(_setitem("video_path", "//127.0.0.2:9/{video_key}/{chunk_index}-{file_index}.mp4")),
        UnsafePathError,
        r"info\.json: field 'video_path'.*absolute.*another host",
    ),
    Case(
        "video_path url",
        _info(_setitem("video_path", "http://127.0.0.2:9/{video_key}/{chunk_index}{file_index}.mp4")),
        UnsafePathError,
        r"info\.json: field 'video_path'.*scheme",
    ),
    Case(
        "camera key '..'",
        camera_key_dotdot,
        UnsafePathError,
        r"info\.json: field 'video_path' \(video_key='\.\.', chunk_index=0, file_index=0\).*'\.\./\.\./c0f0\.mp4'",
    ),
    Case(
        "percent-encoded parent",
        _info(_setitem("data_path", "data/%2e%2e/%2e%2e/{chunk_index}-{file_index}.parquet")),
        UnsafePathError,
        r"field 'data_path'.*character '%'",
    ),
    Case(
        "unknown placeholder",
        _info(_setitem("data_path", "data/{chunk_index}/{repo}/{file_index}.parquet")),
        DatasetFormatError,
        r"info\.json: field 'data_path'.*unknown placeholder.*\{repo\}",
    ),
    Case(
        "attribute placeholder",
        _info(_setitem("video_path", "{video_key.__class__.__init__}/{chunk_index}{file_index}.mp4")),
        DatasetFormatError,
        r"field 'video_path'.*not a plain name",
    ),
    Case(
        "feature named task",
        _info(_feature("task", {"dtype": "string", "shape": [1], "names": None})),
        DatasetFormatError,
        r"info\.json: feature 'task'.*item key",
    ),
    Case(
        "feature named *_is_pad",
        _info(_feature("action_is_pad", {"dtype": "bool", "shape": [1], "names": None})),
        DatasetFormatError,
        r"info\.json: feature 'action_is_pad'.*_is_pad",
    ),
    # task indices the tasks table lacks (metadata drift): refused with on_unknown_task="raise"; by default loaded
    # with one warning (tests/faults/test_metadata_drift.py)
    Case(
        "negative task_index",
        column_edit(DATA, "task_index", lambda v: _put(v, 3, -1)),
        DatasetFormatError,
        r"file-000\.parquet: episode 0: column 'task_index' at frame 3 is -1.*3 task",
        options=STRICT,
    ),
    Case(
        "task_index out of range",
        column_edit(DATA, "task_index", lambda v: _put(v, len(v) - 1, 3)),
        DatasetFormatError,
        r"file-000\.parquet: episode 5: column 'task_index' .* is 3.*3 task",
        options=STRICT,
    ),
    Case(
        "huge task_index in tasks table",
        column_edit(TASKS, "task_index", lambda v: _put(v, 2, 2**62)),
        DatasetFormatError,
        r"tasks\.parquet: task_index must number the 3 tasks 0\.\.2",
    ),
    Case(
        "task missing from tasks table",
        drop_tasks_row,
        DatasetFormatError,
        r"column 'task_index' .* is 2: the tasks table has 2 task",
        options=STRICT,
    ),
    Case(
        "NaN from_timestamp",
        column_edit(EPISODES, f"videos/{TOP}/from_timestamp", lambda v: _put(v, 2, np.nan)),
        DatasetFormatError,
        rf"meta/episodes: episode\(s\) \[2\]: column 'videos/{TOP}/from_timestamp' is nan",
    ),
    Case(
        "missing from_timestamp column",
        drop_from_timestamp,
        DatasetFormatError,
        rf"meta/episodes: missing column 'videos/{TOP}/from_timestamp'",
    ),
    Case(
        "negative file index",
        column_edit(EPISODES, "data/file_index", lambda v: _put(v, 1, -1)),
        DatasetFormatError,
        r"episode\(s\) \[1\]: 'data/chunk_index' and 'data/file_index' must be >= 0",
    ),
    Case(
        "float length",
        column_edit(EPISODES, "length", lambda v: _put(v, 0, 12.5)),
        DatasetFormatError,
        r"meta/episodes: column 'length' holds 12\.5 at row 0, not a whole number",
    ),
    Case(
        "huge length",
        huge_length,
        DatasetFormatError,
        r"meta/episodes: the selected episodes' columns would take \d+ GiB .*episode 5: length 1099511627776",
        validate=r"file-000\.parquet: episode 5: \d+ rows, metadata length 1099511627776",
    ),
]

CORRUPT = [
    Case(
        "ragged list column",
        ragged_action,
        DatasetFormatError,
        r"file-000\.parquet: column 'action': ragged lists: row 0 has 13 values, other rows 14",
    ),
    Case(
        "float frame_index",
        column_edit(DATA, "frame_index", lambda v: v.astype(np.float64) + 0.5),
        DatasetFormatError,
        r"file-000\.parquet: column 'frame_index': holds 0\.5 at row 0.*int64",
    ),
    Case(
        "string column",
        string_timestamps,
        DatasetFormatError,
        r"file-000\.parquet: column 'timestamp': is string, info\.json says float32",
    ),
    Case(
        "list size",
        short_action_lists,
        DatasetFormatError,
        r"column 'action': holds lists of 7 values per row, info\.json says shape \[14\]",
    ),
    Case(
        "shifted index",
        column_edit(DATA, "index", lambda v: v + 1),
        DatasetFormatError,
        r"file-000\.parquet: episode 0: column 'index' at frame 0 is 1, expected 0",
    ),
    Case(
        "NaN timestamp",
        column_edit(DATA, "timestamp", lambda v: _put(v, 4, np.nan)),
        DatasetFormatError,
        r"file-000\.parquet: episode 0: column 'timestamp' at frame 4 is nan, not a finite time",
    ),
    Case("missing values", missing_action_value, DatasetFormatError, MISSING_VALUES),
]


# ---------------------------------------------------------------------------------------------- watching
class RecordingServer:
    """A static HTTP server for `directory` on `host` (127.0.0.1, 127.0.0.2, ...) that records the path of
    every request in `requests`."""

    def __init__(self, directory: Path, host: str = "127.0.0.1"):
        requests: list[str] = []
        self.requests = requests

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send_head(self):
                requests.append(self.path)
                return super().send_head()

        handler = functools.partial(Handler, directory=str(directory))
        self.server = http.server.ThreadingHTTPServer((host, 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> RecordingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


_RECORDERS: list[list[str]] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _RECORDERS and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(args[0])
        for r in _RECORDERS:
            r.append(path)


_HOOKED = []


class OpenRecorder:
    """Records the paths this process opens through Python (`open`, `os.open`, fsspec's and pyarrow's
    Python-level opens) while active, with a process-wide audit hook (installed once)."""

    def __enter__(self) -> list[str]:
        if not _HOOKED:
            sys.addaudithook(_audit)
            _HOOKED.append(True)
        self.paths: list[str] = []
        _RECORDERS.append(self.paths)
        return self.paths

    def __exit__(self, *exc) -> None:
        _RECORDERS.remove(self.paths)


def to_v21(src: Path, dst: Path) -> Path:
    """The tabular part of a v3.0 dataset as a v2.1 one (one parquet per episode, jsonl metadata, no videos)."""
    info = json.loads((src / "meta/info.json").read_text())
    info["codebase_version"] = "v2.1"
    info["features"] = {k: v for k, v in info["features"].items() if v["dtype"] != "video"}
    info["data_path"] = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
    info["video_path"] = None
    (dst / "meta").mkdir(parents=True)
    (dst / "meta/info.json").write_text(json.dumps(info))
    tasks = pq.read_table(src / TASKS)
    texts = tasks.column("__index_level_0__").to_pylist()
    (dst / "meta/tasks.jsonl").write_text(
        "".join(json.dumps({"task_index": i, "task": t}) + "\n" for i, t in enumerate(texts))
    )
    eps = pq.read_table(src / EPISODES)
    data = pq.read_table(src / DATA)
    rows = []
    for e, (n, ts) in enumerate(zip(eps.column("length").to_pylist(), eps.column("tasks").to_pylist())):
        part = data.filter(pa.compute.equal(data.column("episode_index"), e))
        (dst / "data/chunk-000").mkdir(parents=True, exist_ok=True)
        pq.write_table(part, dst / f"data/chunk-000/episode_{e:06d}.parquet")
        rows.append({"episode_index": e, "tasks": ts, "length": n})
    (dst / "meta/episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst
