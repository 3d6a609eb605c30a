"""Reading the files of `meta/`: their paths, the `Reader` every metadata read goes through (bytes of one file,
MissingFileError when absent), parquet and jsonl files, stats.json.

The JSON metadata files are read whole and parsed into Python objects (a 105 MB info.json of tiny lists took 17 s
and 2.8 GB), so each has a bound (`MAX_BYTES`, `max_bytes(rel)`): info.json 8 MiB, stats.json 128 MiB,
tasks.jsonl 256 MiB, episodes.jsonl 1 GiB, episodes_stats.jsonl 2 GiB. A larger file is a DatasetFormatError
naming the file, its size and the bound (`too_large`). The plain reader reads at most the bound and one byte; a
remote source asks for the range of the bound and one byte (`storage.fetch.fetch_bytes`: a server that honours
ranges sends no more); and the parsers check the bytes they are given, whatever reader gave them (`read_meta`).
"""

from __future__ import annotations

import functools
import json
import posixpath
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import DatasetFormatError, MissingFileError
from .paths import dataset_path
from .stats import Stats, stats_from_json

INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
V21_EPISODES = "meta/episodes.jsonl"
V21_TASKS = "meta/tasks.jsonl"
V21_EPISODE_STATS = "meta/episodes_stats.jsonl"

Reader = Callable[[str], bytes]  # rel -> the file's bytes; raises MissingFileError when there is no such file

MAX_BYTES = {
    INFO_PATH: 8 << 20,
    STATS_PATH: 128 << 20,
    V21_TASKS: 256 << 20,
    V21_EPISODES: 1 << 30,
    V21_EPISODE_STATS: 2 << 30,
}


def max_bytes(rel: str) -> int | None:
    """The bound of the metadata JSON file `rel` (None: not one of them)."""
    return MAX_BYTES.get(rel)


def too_large(where: str, size: int | None, limit: int) -> DatasetFormatError:
    """The error of a metadata file `where` (a path or URL) of `size` bytes (None: unknown, past `limit`)."""
    got = f"{size:,} bytes, more" if size is not None else "more"
    return DatasetFormatError(
        f"{where}: {got} than the {limit:,} bytes episodic reads of this metadata file (it is "
        f"read whole and parsed; a larger one is refused)"
    )


def read_meta(read: Reader, root: str, rel: str) -> bytes:
    """`read(rel)`, refused when it is larger than the file's bound."""
    data = read(rel)
    limit = max_bytes(rel)
    if limit is not None and len(data) > limit:
        raise too_large(posixpath.join(root, rel), len(data), limit)
    return data


def read_bytes(fs, root: str, rel: str) -> bytes:
    """The plain reader: `root/rel` read through `fs` (no retries); `rel` must stay inside `root`
    (format.paths.dataset_path: UnsafePathError before anything is opened)."""
    path = dataset_path(fs, root, rel)
    limit = max_bytes(rel)
    try:
        with fs.open(path, "rb") as f:
            data = f.read() if limit is None else f.read(limit + 1)  # never more than the bound and a byte
    except FileNotFoundError:
        raise MissingFileError(f"{path}: file not found") from None
    except OSError as e:
        raise DatasetFormatError(f"{path}: cannot read ({e})") from None
    if limit is not None and len(data) > limit:
        try:
            size = fs.size(path)
        except OSError:
            size = None
        raise too_large(path, size, limit)
    return data


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


def read_jsonl(read: Reader, root: str, rel: str) -> list[dict]:
    """The JSON objects of a .jsonl file (one per non-empty line), each a named error when it is not one."""
    try:
        text = read_meta(read, root, rel).decode("utf-8")
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
                raise DatasetFormatError(
                    f"{posixpath.join(root, rel)}:{n}: expected a JSON object, got {type(row).__name__}"
                )
            rows.append(row)
    return rows


def read_stats_json(read: Reader, root: str) -> Stats | None:
    """meta/stats.json, or None when the dataset has none."""
    try:
        raw = json.loads(read_meta(read, root, STATS_PATH))
    except MissingFileError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DatasetFormatError(f"{posixpath.join(root, STATS_PATH)}: not valid JSON ({e})") from None
    try:
        return stats_from_json(raw) if isinstance(raw, dict) else None
    except (ValueError, TypeError) as e:
        raise DatasetFormatError(f"{posixpath.join(root, STATS_PATH)}: not statistics ({e})") from None
