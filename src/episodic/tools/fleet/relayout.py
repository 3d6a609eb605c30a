"""`episodic convert` and `episodic repack`: a dataset (LeRobot v2.0/v2.1 or v3.0; a directory, an fsspec URL or a
Hub repo) written anew in the v3.0 layout, its items equal to the original's: rows copied as they are (same
schema and values), frames copied as packets (no re-encoding), metadata carried over (`relayout_meta`). Only
the layout changes: episodes packed into data and video files by size, row groups, chunk directories
(`relayout_plan`). The source is only read.

Crash-safe and resumable. While it runs, the new dataset's directory holds::

    .episodic-relayout/
        lock         one run per directory (`writer.lock.DirectoryLock`: released when its process dies)
        plan.json    the digest of the plan and the source's fingerprint
        files.jsonl  one line per finished file of the plan (path, size), appended after its rename
    data/..., videos/...   the files finished so far, each written under a temporary name and renamed

then meta/ (info.json last), the done record (`provenance`) and the session directory goes. A run stopped at any
point (killed, a full disk) is continued by the next run with the same source and options: the plan is computed
again (a pure function of the source), and every file its journal names with that size is kept. Another plan
(the source or the options changed) starts over. A finished dataset whose done record still stands (same tool,
options and source fingerprint; every file with its size) is skipped. A directory that holds anything else is
never written into.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...format.errors import DatasetFormatError, MissingFileError, RelayoutError
from ...format.metadata import DatasetMetadata
from ...progress import bar
from ...storage.atomic import atomic_write_bytes, temp_files
from ...writer.data_files import write_parquet
from ...writer.lock import DirectoryLock
from ...writer.remux import PacketRun, copy_runs, packet_table
from .provenance import check_record, make_record, read_record, source_fingerprint, write_record
from .relayout_meta import write_relayout_metadata
from .relayout_plan import DataFileFacts, RelayoutOptions, plan_layout
from .video_units import file_units

__all__ = ["DONE_RECORD", "STAGING", "relayout"]

log = logging.getLogger(__name__)

STAGING = ".episodic-relayout"
DONE_RECORD = ".episodic-done.json"
DROP_METADATA = (b"pandas",)  # schema metadata that describes one file's rows (its index), not the data


# ------------------------------------------------------------------------------------------- the source
def _data_facts(source: Any, meta: DatasetMetadata) -> list[DataFileFacts]:
    out = []
    for rel in meta.episodes.data_files:
        path = source.local_path(rel)
        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as e:
            raise DatasetFormatError(f"{source.url(rel)}: not a readable parquet file ({e})") from None
        md = pf.metadata
        size = sum(
            md.row_group(g).column(c).total_compressed_size
            for g in range(md.num_row_groups)
            for c in range(md.num_columns)
        )
        out.append(DataFileFacts(rows=md.num_rows, bytes=size, schema=pf.schema_arrow.remove_metadata().to_string()))
    return out


def _units(source: Any, meta: DatasetMetadata, progress: bool) -> dict:
    eps = meta.episodes
    out: dict[str, list] = {}
    jobs = [(key, fid) for key, cam in eps.cameras.items() for fid in range(len(cam.files))]
    for key, fid in bar(jobs, enabled=progress, desc="reading video files", unit="file"):
        cam = eps.cameras[key]
        rel = cam.files[fid]
        owners = (cam.file_id == fid).nonzero()[0]
        table = packet_table(source.local_path(rel), label=source.url(rel))
        out.setdefault(key, []).extend(
            file_units(
                table,
                rel,
                owners,
                cam.from_ts[owners],
                eps.length[owners],
                meta.fps,
                f"{source.url(rel)} (camera {key!r})",
            )
        )
    return out


class _Rows:
    """Episodes' rows from the source's data files (the last file read kept: episodes come in file order)."""

    def __init__(self, source: Any, meta: DatasetMetadata):
        self.source, self.meta = source, meta
        self.fid = -1
        self.table: pa.Table | None = None
        self.where: dict[int, tuple[int, int]] = {}

    def episode(self, e: int) -> pa.Table:
        fid = int(self.meta.episodes.data_file_id[e])
        rel = self.meta.episodes.data_files[fid]
        if fid != self.fid:
            try:
                self.table = pq.ParquetFile(self.source.local_path(rel), page_checksum_verification=True).read()
            except (pa.ArrowException, OSError) as err:
                raise DatasetFormatError(f"{self.source.url(rel)}: not a readable parquet file ({err})") from None
            self.fid, self.where = fid, self._offsets(self.table, rel)
        start, n = self.where.get(e, (0, 0))
        if n != int(self.meta.episodes.length[e]):
            got = "rows that are not one run" if n < 0 else f"{n} rows"
            raise DatasetFormatError(
                f"{self.source.url(rel)}: episode {e}: {got} with this episode_index, the "
                f"metadata says length {int(self.meta.episodes.length[e])}"
            )
        assert self.table is not None, "read above"
        return self.table.slice(start, n)

    def _offsets(self, table: pa.Table, rel: str) -> dict[int, tuple[int, int]]:
        if "episode_index" not in table.column_names:
            raise DatasetFormatError(f"{self.source.url(rel)}: no column 'episode_index'")
        col = table.column("episode_index").to_numpy()
        out: dict[int, tuple[int, int]] = {}
        edges = [0, *((col[1:] != col[:-1]).nonzero()[0] + 1).tolist(), len(col)]
        for a, b in zip(edges, edges[1:]):
            e = int(col[a])
            if e in out:  # not one run: its rows are not contiguous
                out[e] = (0, -1)
            else:
                out[e] = (a, b - a)
        return out


# --------------------------------------------------------------------------------------------- writing
def _write_data(root: str, item: dict, rows: _Rows, fsync: bool) -> None:
    schema = None

    def tables():
        nonlocal schema
        for group in item["row_groups"]:
            parts = []
            for e, lo, hi in group:
                t = rows.episode(e).slice(lo, hi - lo)
                if schema is None:
                    md = {k: v for k, v in (t.schema.metadata or {}).items() if k not in DROP_METADATA}
                    schema = t.schema.with_metadata(md)
                parts.append(t.replace_schema_metadata(schema.metadata))
            yield pa.concat_tables(parts)

    gen = tables()
    first = next(gen)  # the schema is the first episode's
    write_parquet(
        os.path.join(root, item["rel"]),
        schema,
        itertools.chain([first], gen),
        row_group_per_table=True,
        fsync=fsync,
        page_index=True,
    )


def _write_video(root: str, item: dict, source: Any, fsync: bool) -> None:
    runs = [
        PacketRun(source.local_path(r["src"]), r["start"], r["stop"], r["shift"], label=source.url(r["src"]))
        for r in item["runs"]
    ]
    copy_runs(runs, os.path.join(root, item["rel"]), fsync=fsync)


# ---------------------------------------------------------------------------------------- the directory
def _state(root: str) -> str:
    if not os.path.lexists(root):
        return "absent"
    if not os.path.isdir(root):
        return "file"
    if os.path.isdir(os.path.join(root, STAGING)):
        return "session"
    if os.path.isfile(os.path.join(root, DONE_RECORD)):
        return "done"
    return "foreign" if os.listdir(root) else "empty"


def _clear(root: str) -> None:
    """Remove a previous run's files from `root` (its own: a session or a done record was found), the session
    directory aside."""
    for name in os.listdir(root):
        if name == STAGING:
            continue
        path = os.path.join(root, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def _journal(staging: str, digest: str, fingerprint: str) -> dict[str, int]:
    """The files a previous run of this same plan finished (path -> size); a run of another plan is wiped."""
    try:
        with open(os.path.join(staging, "plan.json"), "rb") as f:
            stage = json.loads(f.read())
        same = stage == {"plan": digest, "fingerprint": fingerprint}
    except (OSError, ValueError):
        same = False
    done: dict[str, int] = {}
    if same:
        try:
            with open(os.path.join(staging, "files.jsonl"), "rb") as f:
                for line in f.read().split(b"\n"):
                    try:
                        rec = json.loads(line)
                        done[str(rec["rel"])] = int(rec["size"])
                    except (ValueError, KeyError, TypeError):
                        continue  # a torn last line
        except FileNotFoundError:
            pass
    return done if same else {}


def _require_files(source: Any, meta: DatasetMetadata) -> None:
    """Every data and video file the metadata names is there (a local source; a remote one's missing file is
    named when it is fetched)."""
    if not source.is_local:
        return
    eps = meta.episodes
    for rel in [*eps.data_files, *(f for cam in eps.cameras.values() for f in cam.files)]:
        if not os.path.isfile(source.path(rel)):
            raise MissingFileError(f"{source.path(rel)}: file not found")


def _refuse_overlap(source: Any, root: str) -> None:
    if not source.is_local:
        return
    src, dst = os.path.realpath(source.root), os.path.realpath(root)
    if src == dst or dst.startswith(src + os.sep) or src.startswith(dst + os.sep):
        raise RelayoutError(
            f"{root}: the new dataset's directory must lie outside the source {source.root} (and not hold it)"
        )


# ------------------------------------------------------------------------------------------------- run
def relayout(
    source: Any,
    output: str,
    options: RelayoutOptions,
    *,
    tool: str = "repack",
    progress: bool = False,
    fsync: bool = True,
) -> dict[str, Any]:
    """Write the dataset of `source` (a `storage.source.Source`) anew at `output` (module docstring). Returns
    what was done: ``status`` ``"done"`` or ``"skipped"`` (a finished result of the same source and options was
    there), and counts."""
    root = os.path.abspath(output)
    _refuse_overlap(source, root)
    meta = source.load_metadata()
    _require_files(source, meta)
    fingerprint = source_fingerprint(source, meta)
    opts = options.to_json()
    state = _state(root)
    if (
        state == "done"
        and check_record(read_record(os.path.join(root, DONE_RECORD)), tool, opts, fingerprint, root) is None
    ):
        return {"status": "skipped", "detail": "done and verified", "episodes": len(meta.episodes)}
    if state in ("file", "foreign"):
        raise RelayoutError(
            f"{root}: {'not a directory' if state == 'file' else 'not empty'} and not a dataset "
            f"written by episodic {tool}: choose a new or empty directory (nothing there is replaced)"
        )
    staging = os.path.join(root, STAGING)
    lock = _lock_session(staging, root)
    try:
        return _run(source, meta, root, staging, options, tool, fingerprint, progress, fsync, lock)
    except BaseException:
        lock.release()
        raise


def _run(
    source: Any,
    meta: DatasetMetadata,
    root: str,
    staging: str,
    options: RelayoutOptions,
    tool: str,
    fingerprint: str,
    progress: bool,
    fsync: bool,
    lock: DirectoryLock,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    opts = options.to_json()
    record = read_record(os.path.join(root, DONE_RECORD))
    if check_record(record, tool, opts, fingerprint, root) is None:  # another process finished it meanwhile
        _finish_session(staging, lock)
        return {"status": "skipped", "detail": "done and verified", "episodes": len(meta.episodes)}
    for path in temp_files(root):  # a killed run's partial file (never renamed into place)
        os.unlink(path)
    plan = plan_layout(meta, _data_facts(source, meta), _units(source, meta, progress), options)
    kept = _journal(staging, plan.digest, fingerprint)
    if not kept:
        _clear(root)
        atomic_write_bytes(
            os.path.join(staging, "plan.json"),
            json.dumps({"plan": plan.digest, "fingerprint": fingerprint}).encode(),
            fsync=fsync,
        )
        with open(os.path.join(staging, "files.jsonl"), "wb"):
            pass
    kept = {rel: size for rel, size in kept.items() if _size(root, rel) == size}
    rows = _Rows(source, meta)
    todo = [("data", d) for d in plan.data] + [("video", v) for v in plan.videos]
    with open(os.path.join(staging, "files.jsonl"), "ab") as journal:
        for kind, item in bar(todo, enabled=progress, desc=f"{tool}: writing files", unit="file"):
            if item["rel"] in kept:
                continue
            if kind == "data":
                _write_data(root, item, rows, fsync)
            else:
                _write_video(root, item, source, fsync)
            journal.write(json.dumps({"rel": item["rel"], "size": _size(root, item["rel"])}).encode() + b"\n")
            journal.flush()
            if fsync:
                os.fsync(journal.fileno())
    written = write_relayout_metadata(root, source, meta, plan, options, fsync)
    _verify(root, meta, options)
    facts = {
        "episodes": len(meta.episodes),
        "frames": int(meta.episodes.length.sum()),
        "data_files": len(plan.data),
        "video_files": len(plan.videos),
        "kept_files": len(kept),
    }
    files = plan.files + written
    write_record(
        os.path.join(root, DONE_RECORD),
        make_record(
            tool,
            opts,
            source.location or source.root,
            fingerprint,
            root,
            files,
            **facts,
            bytes=sum(_size(root, f) for f in files),
        ),
        fsync=fsync,
    )
    _finish_session(staging, lock)
    resumed = f", {len(kept)} file(s) kept from an interrupted run" if kept else ""
    return {
        "status": "done",
        "seconds": time.perf_counter() - t0,
        "detail": f"{facts['episodes']} episodes into {len(plan.data)} data and {len(plan.videos)} video "
        f"file(s){resumed}",
        **facts,
    }


def _size(root: str, rel: str) -> int:
    try:
        return os.path.getsize(os.path.join(root, rel))
    except OSError:
        return -1


def _verify(root: str, meta: DatasetMetadata, options: RelayoutOptions) -> None:
    if options.verify == "none":
        return
    from ..validate import validate

    report = validate(root, progress=False, decode=options.verify == "frames")
    if not report.ok:
        shown = "; ".join(report.problems[:3]) + (
            f" (and {len(report.problems) - 3} more)" if len(report.problems) > 3 else ""
        )
        raise RelayoutError(f"{root}: the new dataset does not check out: {shown}")
    if report.checked.get("episodes") != len(meta.episodes):
        raise RelayoutError(
            f"{root}: the new dataset has {report.checked.get('episodes')} episodes, the source {len(meta.episodes)}"
        )


def _lock_session(staging: str, root: str) -> DirectoryLock:
    """The session directory made (or found) and its lock taken. Another run that finishes meanwhile removes the
    directory (`_finish_session`) between our making it and our lock: then it is made again (`_run` then finds
    the dataset finished and verified)."""
    for attempt in range(3):
        os.makedirs(staging, exist_ok=True)
        try:
            return DirectoryLock.acquire(os.path.join(staging, "lock"), root)
        except FileNotFoundError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _finish_session(staging: str, lock: DirectoryLock) -> None:
    """The dataset is finished: remove the session directory (its lock last)."""
    for name in ("plan.json", "files.jsonl"):
        try:
            os.unlink(os.path.join(staging, name))
        except FileNotFoundError:
            pass
    lock.release(remove=True)
    try:
        os.rmdir(staging)
    except OSError:
        pass
