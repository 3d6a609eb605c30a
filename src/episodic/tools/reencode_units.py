"""`reencode` split into units that run apart (a fleet's processes, Ray tasks, SLURM array tasks): one per video
file (`encode_file`), then the dataset's final step once every file is done (`finish_copy`). The result is the
copy `tools.reencode.reencode` makes, on the same disk state, so the two mix: a copy begun whole is finished by
units and the other way round.

- `encode_file(src, dst, rel)`: the copy's settings recorded in (or checked against) ``DST/.episodic-reencode/``
  as `reencode` records them, the file encoded under a temporary name, renamed, verified (its frames' times those
  of the original's file), then a small record of it written (``.episodic-reencode/files/``). A file with its
  record is skipped; one without (a unit killed midway) is kept if it verifies, else encoded again. Each file has
  its own lock: a unit running twice at once gets `WriterLockedError`, units of other files run side by side.
- `finish_copy(src, dst)`: when every video file has its record, `reencode` itself on the copy: it keeps (after
  verifying) every file, copies the other files and writes meta/info.json last (only then is DST a dataset); a
  finished copy is verified and skipped. While files lack their record (units of other array tasks still to
  run) it returns ``pending`` and changes nothing: the run that finishes the last file finishes the copy. Two
  array tasks done with their files at once both try, one at a time (`reencode`'s lock,
  ``DST/.episodic-reencode.lock``, beside the work directory the finishing run renames away): the one that finds
  it taken returns ``pending`` (the other is finishing it); one that takes it after the other finished finds a
  finished copy (verified, ``skipped``). A plain `reencode` of the same copy takes the same lock.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..format.errors import ExistingDirectoryError, WriterLockedError
from ..format.metadata import INFO_PATH
from ..storage import open_source
from ..storage.atomic import atomic_write_bytes, is_temp_name
from ..writer.lock import DirectoryLock
from ..writer.session import DATASET, directory_state
from .reencode import WORK_DIR, begin_settings, camera_files, check_resumable, prepare, reencode

__all__ = ["FILES_DIR", "encode_file", "finish_copy", "video_files"]

FILES_DIR = "files"  # under WORK_DIR: one record per finished video file


def video_files(src: str) -> dict[str, int]:
    """Every video file of the local dataset `src` (relative path, sorted) -> its size in bytes."""
    meta = open_source(src).load_metadata()
    return {rel: os.path.getsize(os.path.join(src, rel)) for rel in sorted(camera_files(meta))}


def _record(dst: str, rel: str) -> str:
    return os.path.join(dst, WORK_DIR, FILES_DIR, rel.replace("/", "--") + ".done")


def _finished(job: Any) -> bool:
    """DST is a finished copy (meta/info.json written, no work directory); raises if it is one with other
    settings."""
    if directory_state(job.dst) != DATASET or os.path.isdir(os.path.join(job.dst, WORK_DIR)):
        return False
    with open(os.path.join(job.dst, INFO_PATH), "rb") as f:
        if f.read() == job.info:
            return True
    raise ExistingDirectoryError(
        f"{job.dst}: holds a dataset that is not a {job.settings['vcodec']} copy of {job.src} with these "
        f"settings ({INFO_PATH} differs); choose another directory or delete it"
    )


def encode_file(
    src: str, dst: str, rel: str, *, vcodec: str, gop: int, crf: int | None, pix_fmt: str, preset, fsync: bool = True
) -> dict[str, Any]:
    """Encode the video file `rel` of the copy SRC -> DST (module docstring); returns ``status`` (``done``,
    ``skipped``), ``detail`` and the counts (``files_encoded``, ``files_kept``, ``frames``)."""
    job = prepare(src, dst, vcodec, gop, crf, pix_fmt, preset, fsync, False)
    if rel not in job.cameras:
        raise ValueError(f"{rel}: not a video file of {job.src}")
    if _finished(job):  # the final step (`finish_copy`) verifies every file of a finished copy
        return {"status": "skipped", "detail": f"{rel}: the copy is finished", "files_kept": 1}
    check_resumable(job.dst, directory_state(job.dst))
    record = _record(job.dst, rel)
    if os.path.isfile(record) and os.path.isfile(os.path.join(job.dst, rel)):
        return {"status": "skipped", "detail": f"{rel}: encoded before", "files_kept": 1}
    job.probe([job.cameras[rel]])
    work = os.path.join(job.dst, WORK_DIR)
    os.makedirs(os.path.join(work, FILES_DIR), exist_ok=True)
    begin_settings(job, work)
    lock = DirectoryLock.acquire(record + ".lock", f"{job.dst}: {rel}")
    try:
        final = os.path.join(job.dst, rel)
        prefix = "." + os.path.basename(final) + "."
        folder = os.path.dirname(final)
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            if name.startswith(prefix) and is_temp_name(name):  # this file's, left by a killed unit
                os.unlink(os.path.join(folder, name))
        what, frames = job.video(rel, lambda n: None)
        atomic_write_bytes(
            record, json.dumps({"file": rel, "bytes": os.path.getsize(final), "frames": frames}).encode(), fsync=fsync
        )
        lock.release(remove=True)
    finally:
        lock.release()
    encoded = what == "encoded"
    return {
        "status": "done",
        "detail": f"{rel}: {'encoded' if encoded else 'kept (verified)'}",
        "files_encoded": int(encoded),
        "files_kept": int(not encoded),
        "frames": frames,
    }


def finish_copy(
    src: str, dst: str, *, vcodec: str, gop: int, crf: int | None, pix_fmt: str, preset, fsync: bool = True
) -> dict[str, Any]:
    """The copy's final step (module docstring); ``status`` ``done``, ``skipped`` (finished before, verified) or
    ``pending`` (files not encoded yet), ``detail`` and, when done, ``files_encoded`` (by this step: a file
    that did not verify), ``files_copied``, ``bytes_before``, ``bytes_after``."""
    job = prepare(src, dst, vcodec, gop, crf, pix_fmt, preset, fsync, False)
    if not _finished(job):
        missing = [rel for rel in job.cameras if not os.path.isfile(_record(job.dst, rel))]
        if missing:
            return {
                "status": "pending",
                "detail": f"{len(missing)} of {len(job.cameras)} video file(s) not encoded yet (e.g. {missing[0]}): "
                "the run that encodes the last one finishes the copy",
            }
    try:
        result = reencode(
            job.src, job.dst, vcodec=vcodec, gop=gop, crf=crf, pix_fmt=pix_fmt, preset=preset, workers=1, fsync=fsync
        )
    except WriterLockedError as e:  # another array task, done with its files at the same time, is finishing it
        return {"status": "pending", "detail": f"being finished by another run ({e})"}
    # files_encoded: those a unit's record vouched for that did not verify (0 unless a file was changed since)
    facts = {k: getattr(result, k) for k in ("files_encoded", "files_copied", "bytes_before", "bytes_after")}
    if result.skipped:
        return {"status": "skipped", "detail": result.summary(), **facts}
    return {"status": "done", "detail": f"{len(job.cameras)} video file(s) verified, info.json written", **facts}
