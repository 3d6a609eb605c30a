"""What a tool's result on a dataset was made from, so that a re-run skips what is done and verified.

- `source_fingerprint(source, meta)`: SHA-256 of the dataset as loaded (info.json, every episode's length, index
  range, data file and video files and times, the tasks) and of every data and video file it names: a local
  file's size and modification time (or that it is missing), a remote one's version token
  (`storage.versions.file_identity`: no data read).
  A changed file, episode or setting changes it.
- The done record: JSON naming the tool, its options, the source, the fingerprint and every file of the result
  with its size, written (atomically) after the result is complete. `check_record` says whether a record still
  stands: same tool, options and fingerprint, and every file there with its size; otherwise why not.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

from ...format.metadata import DatasetMetadata
from ...storage.atomic import atomic_write_bytes
from ...storage.versions import file_identity

__all__ = ["RECORD_FORMAT", "check_record", "make_record", "read_record", "source_fingerprint", "write_record"]

RECORD_FORMAT = 1


def source_fingerprint(source: Any, meta: DatasetMetadata) -> str:
    """The fingerprint of the dataset `meta` read from `source` (a `storage.source.Source`)."""
    eps = meta.episodes
    h = hashlib.sha256()

    def part(value: Any) -> None:
        h.update(json.dumps(value, sort_keys=True, default=str).encode())
        h.update(b"\0")

    part(meta.info.to_dict())
    part(meta.tasks)
    part(eps.tasks)
    for arr in (eps.length, eps.dataset_from_index, eps.dataset_to_index, eps.data_file_id):
        h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
    part(eps.data_files)
    files = list(eps.data_files)
    for key, cam in sorted(eps.cameras.items()):
        part([key, cam.files])
        for arr in (cam.file_id.astype("<i8"), cam.from_ts.astype("<f8"), cam.to_ts.astype("<f8")):
            h.update(np.ascontiguousarray(arr).tobytes())
        files += cam.files
    for rel in files:
        try:
            part([rel, file_identity(source.fs, source.path(rel), getattr(source, "policy", None))])
        except FileNotFoundError:  # a fact about the source like any other (`validate` reports it)
            part([rel, "missing"])
    return h.hexdigest()


def make_record(
    tool: str, options: dict, source: str, fingerprint: str, root: str, files: list[str], **facts: Any
) -> dict:
    """The done record of a result at `root` made of `files` (paths relative to it)."""
    sizes = {rel: os.path.getsize(os.path.join(root, rel)) for rel in files}
    return {
        "format": RECORD_FORMAT,
        "tool": tool,
        "options": options,
        "source": source,
        "fingerprint": fingerprint,
        "files": sizes,
        **facts,
    }


def write_record(path: str, record: dict, fsync: bool = True) -> None:
    atomic_write_bytes(path, json.dumps(record, indent=1, sort_keys=True).encode(), fsync=fsync)


def read_record(path: str) -> dict | None:
    """The record at `path`; None when there is none, or it is not one (damaged, another format)."""
    try:
        with open(path, "rb") as f:
            raw = json.loads(f.read())
    except (OSError, ValueError):
        return None
    ok = isinstance(raw, dict) and raw.get("format") == RECORD_FORMAT and isinstance(raw.get("files"), dict)
    return raw if ok else None


def check_record(record: dict | None, tool: str, options: dict, fingerprint: str, root: str) -> str | None:
    """None when `record` stands for a finished result of `tool` with `options` on the source of `fingerprint`
    at `root`; otherwise why not (in words)."""
    if record is None:
        return "no done record"
    if record.get("tool") != tool:
        return f"made by {record.get('tool')!r}, not {tool!r}"
    if record.get("options") != options:
        return f"made with other options ({record.get('options')})"
    if record.get("fingerprint") != fingerprint:
        return "the source changed since"
    for rel, size in record["files"].items():
        path = os.path.join(root, rel)
        try:
            have = os.path.getsize(path)
        except OSError:
            return f"{rel} is missing"
        if have != size:
            return f"{rel} has {have} bytes, {size} when it was written"
    return None
