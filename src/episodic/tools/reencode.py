"""`episodic reencode SRC DST`: a copy of a dataset with its videos encoded again (H.264 or HEVC, e.g. for GPUs
whose NVDEC has no AV1: A100, H100, H200), frame for frame; the original is never modified.

What the copy is:
- every video file re-encoded by the writer's encoder (`writer.video.VideoFileWriter`: its encoder check, its
  refusals of frame sizes an encoder cannot take), frame i of the copy at exactly i/fps in the same file, so
  every episode's `from_timestamp`/`to_timestamp` and every row's `timestamp` select the same frames as in the
  original. A source whose frames are not on that grid (within `format.timebase.TIME_EPS_S`) is refused, naming
  the file and the frame: the copy could not keep its times;
- every other file (data parquet, meta/ but info.json, README ...) copied byte for byte: statistics included.
  The writer computes a camera's statistics from the frames it is given; a copy is given the original's decoded
  frames, whose statistics the original's stats.json holds (the copy's pixels differ within the codec's loss);
- meta/info.json, written last, the original's with each camera's `video.codec`, `video.pix_fmt`, `video.g`
  and `video.crf` set to the copy's.

Like the writer it is crash-safe and resumable: every file is written under a temporary name and renamed when
complete (`storage.atomic`), so a file at its final name is whole; a directory without meta/info.json is no
dataset any loader reads. A run on a directory an interrupted run left (`.episodic-reencode/` holds its settings)
removes the temporary files, keeps each finished file that verifies (its frames' times those of the original's
file) and does the rest. A run holds ``DST/.episodic-reencode.lock`` from its look at DST to its end (removed
then): a second run at the same time gets `WriterLockedError`; one that gets the lock after another finished the
copy finds it finished. A finished copy made from the same source with the same settings is verified and left as
it is (`ReencodeResult.skipped`): what a fleet runner calls per dataset. Files are encoded side by side on
`workers` threads (PyAV decodes and encodes without the GIL), with a progress bar in frames.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import av
import numpy as np

from .. import runtime
from ..format.errors import DatasetFormatError, EncoderError, ExistingDirectoryError, VideoDecodeError
from ..format.metadata import INFO_PATH
from ..format.timebase import TIME_EPS_S
from ..progress import bar
from ..storage import open_source
from ..storage.atomic import AtomicFile, atomic_write_bytes, temp_files
from ..video.decoder import VideoReader
from ..writer.lock import DirectoryLock
from ..writer.session import ABSENT, DATASET, FILE, SESSION, directory_state
from ..writer.video import ENCODE_ATTEMPTS, INFO_CODEC, VideoFileWriter, encoder_name, probe_encoder

__all__ = [
    "REENCODE_CODECS",
    "ReencodeResult",
    "begin_settings",
    "camera_files",
    "check_resumable",
    "prepare",
    "reencode",
]

log = logging.getLogger(__name__)

REENCODE_CODECS = ("h264", "hevc")  # what the command offers: codecs every NVDEC generation decodes
WORK_DIR = ".episodic-reencode"  # an unfinished copy's settings (and a split copy's records of finished files)
# held by a run of `reencode` (a whole copy, or a split copy's final step) from its look at DST to its end, removed
# when done: beside the work directory, which a finishing run renames away while another may be looking at it
COPY_LOCK = ".episodic-reencode.lock"
SETTINGS = "settings.json"
CHUNK_FRAMES = 32  # frames decoded, then encoded, at a time (a file is never held whole in memory)


@dataclass
class ReencodeResult:
    """What `reencode` did. `skipped`: DST already held a verified copy of SRC with these settings."""

    src: str
    dst: str
    vcodec: str
    gop: int
    crf: int | None
    files_encoded: int = 0
    files_kept: int = 0  # finished by an interrupted run and verified
    files_copied: int = 0
    frames: int = 0  # frames encoded by this run
    bytes_before: int = 0  # the original's video bytes
    bytes_after: int = 0  # the copy's
    seconds: float = 0.0
    skipped: bool = False
    resumed: bool = False
    temp_files_removed: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        if self.skipped:
            return f"{self.dst}: already a verified {self.vcodec} copy of {self.src}; nothing to do"
        ratio = (
            f" ({self.bytes_after / self.bytes_before:.2f}x the original's video bytes)" if self.bytes_before else ""
        )
        kept = f", {self.files_kept} kept from an interrupted run" if self.files_kept else ""
        return (
            f"{self.dst}: {self.files_encoded} video file(s) re-encoded to {self.vcodec} ({self.frames} frames, "
            f"{self.seconds:.1f} s){kept}, {self.files_copied} other file(s) copied{ratio}"
        )


def _settings(src: str, vcodec: str, gop: int, crf: int | None, pix_fmt: str, preset) -> dict:
    return json.loads(
        json.dumps(
            {
                "format": 1,
                "source": src,
                "vcodec": INFO_CODEC[encoder_name(vcodec)],
                "gop": gop,
                "crf": crf,
                "pix_fmt": pix_fmt,
                "preset": preset,
            }
        )
    )


def _expected_info(raw: bytes, video_keys, settings: dict) -> bytes:
    """The copy's info.json: the original's with each camera's codec, pixel format, gop and crf replaced."""
    info = json.loads(raw)
    for k in video_keys:
        spec = info["features"][k].setdefault("info", {})
        spec.update(
            {
                "video.codec": settings["vcodec"],
                "video.pix_fmt": settings["pix_fmt"],
                "video.g": settings["gop"],
                "video.crf": settings["crf"],
            }
        )
    return json.dumps(info, indent=4).encode()


def camera_files(meta) -> dict[str, str]:
    """Every video file of a dataset (relative path) -> its camera."""
    return {rel: k for k in meta.info.video_keys for rel in meta.episodes.cameras[k].files}


def _plain_files(src: str, videos: set[str]) -> list[str]:
    """Every file of the original but its videos and info.json (relative paths, sorted); hidden entries (a
    `.cache`, temporary files) are left out."""
    out = []
    for d, dirs, files in os.walk(src):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), src).replace(os.sep, "/")
            if not f.startswith(".") and rel not in videos and rel != INFO_PATH:
                out.append(rel)
    return sorted(out)


def _grid_check(reader: VideoReader, fps: int, rel: str) -> None:
    t = reader.index.times
    off = np.flatnonzero(np.abs(t - np.arange(len(t)) / fps) > TIME_EPS_S)
    if len(off):
        i = int(off[0])
        raise DatasetFormatError(
            f"{rel}: frame {i} is at {t[i]:.6f} s, not {i / fps:.6f} s (frame {i} at {fps} "
            f"fps): the copy would not keep the original's frame times ({len(off)} frame(s) "
            f"off the grid); reencode takes files whose frame i is at i/fps"
        )


def _same_frames(src_path: str, dst_path: str) -> str | None:
    """Why the copy's file `dst_path` is not a whole copy of `src_path` (frame count or times), or None."""
    try:
        a, b = VideoReader(src_path), VideoReader(dst_path)
    except VideoDecodeError as e:
        return str(e)
    try:
        if len(a.index) != len(b.index):
            return f"{len(b.index)} frames, the original {len(a.index)}"
        worst = float(np.abs(a.index.times - b.index.times).max())
        return f"frame times differ by up to {worst:.2e} s" if worst > TIME_EPS_S else None
    finally:
        a.close()
        b.close()


class _Copy:
    """One run over SRC -> DST (see `reencode`)."""

    def __init__(self, src: str, dst: str, settings: dict, fsync: bool, progress: bool):
        self.src, self.dst, self.settings, self.fsync = src, dst, settings, fsync
        self.meta = open_source(src).load_metadata()
        self.fps = self.meta.info.fps
        self.cameras = camera_files(self.meta)
        self.plain = _plain_files(src, set(self.cameras))
        with open(os.path.join(src, INFO_PATH), "rb") as f:
            self.info = _expected_info(f.read(), self.meta.info.video_keys, settings)
        self.progress = progress
        self._lock = threading.Lock()

    def writer_opts(self) -> dict:
        s = self.settings
        return dict(vcodec=s["vcodec"], gop=s["gop"], crf=s["crf"], pix_fmt=s["pix_fmt"], preset=s["preset"])

    def probe(self, keys=None) -> None:
        """Every camera's (or `keys`') size through the encoder, before anything is written."""
        for k in self.meta.info.video_keys if keys is None else keys:
            h, w = self.meta.info.camera_hw(k)[:2]
            probe_encoder(k, w, h, int(self.fps), **self.writer_opts())

    def verify(self) -> str | None:
        """Why DST is not a finished copy of SRC with these settings, or None."""
        try:
            with open(os.path.join(self.dst, INFO_PATH), "rb") as f:
                if f.read() != self.info:
                    return f"{INFO_PATH} is not the original's with these video settings"
        except OSError as e:
            return str(e)
        for rel in self.plain:
            a, b = os.path.join(self.src, rel), os.path.join(self.dst, rel)
            if not os.path.isfile(b) or os.path.getsize(a) != os.path.getsize(b):
                return f"{rel}: missing or not the original's size"
        for rel in self.cameras:
            why = _same_frames(os.path.join(self.src, rel), os.path.join(self.dst, rel))
            if why:
                return f"{rel}: {why}"
        return None

    def copy_plain(self, result: ReencodeResult) -> None:
        for rel in self.plain:
            a, b = os.path.join(self.src, rel), os.path.join(self.dst, rel)
            if os.path.isfile(b) and os.path.getsize(a) == os.path.getsize(b):
                continue  # renamed into place whole by an earlier run
            f = AtomicFile(b)
            try:
                shutil.copyfile(a, f.tmp)
                f.commit(fsync=self.fsync)
            except BaseException:
                f.discard()
                raise
            result.files_copied += 1

    def video(self, rel: str, tick) -> tuple[str, int]:
        """Re-encode one file (or keep the one an earlier run finished); ("encoded" | "kept", frames encoded)."""
        a, b = os.path.join(self.src, rel), os.path.join(self.dst, rel)
        if os.path.isfile(b):
            why = _same_frames(a, b)
            if why is None:
                return "kept", 0
            log.warning("%s: not a whole copy (%s); encoding it again", b, why)
        for attempt in range(1, ENCODE_ATTEMPTS + 1):
            try:
                return "encoded", self._encode(a, b, rel, tick)
            except av.FFmpegError as e:
                if attempt == ENCODE_ATTEMPTS:
                    raise EncoderError(
                        f"{rel}: camera {self.cameras[rel]!r}: the {self.settings['vcodec']} encoder "
                        f"failed at each of {ENCODE_ATTEMPTS} attempts (last: {e})"
                    ) from e
                log.warning(
                    "%s: the encoder failed (%s); encoding the file again (attempt %d of %d)",
                    rel,
                    e,
                    attempt + 1,
                    ENCODE_ATTEMPTS,
                )
        raise AssertionError("unreachable")

    def _encode(self, a: str, b: str, rel: str, tick) -> int:
        reader = VideoReader(a)
        try:
            _grid_check(reader, int(self.fps), rel)
            h, w = reader.shape
            n = len(reader.index)
            writer = VideoFileWriter(b, w, h, int(self.fps), **self.writer_opts())
            try:
                for start in range(0, n, CHUNK_FRAMES):
                    frames = reader.decode(np.arange(start, min(n, start + CHUNK_FRAMES)))
                    writer.add(frames)
                    tick(len(frames))
                writer.close(fsync=self.fsync)
            except BaseException:
                writer.abort()
                raise
        finally:
            reader.close()
        why = _same_frames(a, b)
        if why is not None:
            os.unlink(b)
            raise VideoDecodeError(f"{rel}: the re-encoded file is not frame for frame the original's ({why})")
        return n


def reencode(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    vcodec: str = "h264",
    gop: int = 2,
    crf: int | None = 30,
    pix_fmt: str = "yuv420p",
    preset: int | str | None = None,
    workers: int | None = None,
    progress: bool = False,
    fsync: bool = True,
) -> ReencodeResult:
    """Copy the dataset at `src` (a local directory) to `dst` with every video encoded again with `vcodec` ("h264",
    "hevc"; the writer's other codecs too), `gop`, `crf`, `pix_fmt` and `preset` (the writer's meanings); see the
    module docstring. `workers`: files encoded side by side (default: the usable cores, at most the files).
    Returns what was done; `dst` holding a verified copy with these settings is left as it is (`skipped`)."""
    t0 = time.perf_counter()
    job = prepare(src, dst, vcodec, gop, crf, pix_fmt, preset, fsync, progress)
    src, dst, settings = job.src, job.dst, job.settings
    result = ReencodeResult(src, dst, settings["vcodec"], gop, crf)
    work = os.path.join(dst, WORK_DIR)
    if _verified_copy(job, work, result):  # refusals and a finished copy first: nothing written for them
        result.seconds = time.perf_counter() - t0
        return result
    job.probe()
    os.makedirs(dst, exist_ok=True)
    lock = DirectoryLock.acquire(os.path.join(dst, COPY_LOCK), dst)
    try:
        # again, now that no other run can change it: one that held the lock may have finished the copy meanwhile
        if not _verified_copy(job, work, result):
            os.makedirs(work, exist_ok=True)
            _begin(job, work, result)
            _run(job, result, workers)
            atomic_write_bytes(os.path.join(dst, INFO_PATH), job.info, fsync=fsync)  # last: now it is a dataset
            # the work directory goes in one step, renamed, then removed: a unit of a split copy looking at the
            # copy meanwhile (`reencode_units.encode_file`, which takes no copy lock) sees it unfinished or
            # finished; never a work directory half removed (it took that for a directory it must not touch)
            done = f"{work}.{os.getpid()}.done"
            os.rename(work, done)
            shutil.rmtree(done, ignore_errors=True)
    finally:
        lock.release(remove=True)
    result.seconds = time.perf_counter() - t0
    if not result.skipped:
        log.info("%s", result.summary())
    return result


def _verified_copy(job: _Copy, work: str, result: ReencodeResult) -> bool:
    """True when DST is a finished copy of SRC with these settings (verified: `result.skipped`); raises when it
    holds something else (another dataset, files of no copy); False when the copy is new or unfinished."""
    state = directory_state(job.dst)
    if state == DATASET and not os.path.isdir(work):
        why = job.verify()
        if why is None:
            result.skipped = True
            return True
        raise ExistingDirectoryError(
            f"{job.dst}: holds a dataset that is not a {job.settings['vcodec']} copy of {job.src} with "
            f"these settings ({why}); choose another directory or delete it"
        )
    check_resumable(job.dst, state)
    return False


def prepare(
    src, dst, vcodec: str, gop: int, crf: int | None, pix_fmt: str, preset, fsync: bool, progress: bool
) -> _Copy:
    """The copy SRC -> DST with these settings, its arguments checked (nothing written)."""
    src, dst = os.path.realpath(os.fspath(src)), os.path.realpath(os.fspath(dst))
    if not os.path.isdir(src):
        raise DatasetFormatError(
            f"{src}: not a directory; reencode reads a local dataset (download a remote one first)"
        )
    if src == dst or dst.startswith(src + os.sep) or src.startswith(dst + os.sep):
        raise ExistingDirectoryError(f"{dst}: the copy must be outside the original ({src}) and not contain it")
    if directory_state(src) == SESSION:
        raise DatasetFormatError(f"{src}: an unfinished writing session; finish it with `episodic repair {src}` first")
    if isinstance(gop, bool) or not isinstance(gop, int) or gop < 1:
        raise ValueError(f"gop must be a positive integer, got {gop!r}")
    if crf is not None and (isinstance(crf, bool) or not isinstance(crf, int) or not 0 <= crf <= 63):
        raise ValueError(f"crf must be an integer in 0..63 or None, got {crf!r}")
    return _Copy(src, dst, _settings(src, vcodec, gop, crf, pix_fmt, preset), fsync, progress)


def check_resumable(dst: str, state: str) -> None:
    """Refuse a DST (in `state`, `writer.session.directory_state`) that is neither new, empty, nor a copy
    begun before (its settings in WORK_DIR)."""
    if state == FILE:
        raise ExistingDirectoryError(f"{dst}: exists and is not a directory")
    others = [e for e in os.listdir(dst) if e not in (WORK_DIR, COPY_LOCK)] if state != ABSENT else []
    if others and not os.path.isfile(os.path.join(dst, WORK_DIR, SETTINGS)):
        raise ExistingDirectoryError(f"{dst}: not empty and not an unfinished copy; choose a new or empty directory")


def _begin(job: _Copy, work: str, result: ReencodeResult) -> None:
    """Start the copy's session, or resume the interrupted one with the same settings."""
    result.resumed = begin_settings(job, work)
    for p in temp_files(job.dst):
        os.unlink(p)
        result.temp_files_removed.append(os.path.relpath(p, job.dst))


def begin_settings(job: _Copy, work: str) -> bool:
    """Record the copy's settings in `work`, or check them against those an earlier run (or another unit of a
    split copy) recorded; True when they were there."""
    path = os.path.join(work, SETTINGS)
    if os.path.isfile(path):
        with open(path, "rb") as f:
            try:
                old = json.loads(f.read())
            except ValueError:
                old = None
        if old != job.settings:
            diff = sorted(k for k in set(job.settings) | set(old or {}) if (old or {}).get(k) != job.settings.get(k))
            raise ExistingDirectoryError(
                f"{job.dst}: an interrupted copy with other settings ({', '.join(diff)}: "
                f"{ {k: (old or {}).get(k) for k in diff} }); run it again with those, or "
                f"delete the directory"
            )
        return True
    atomic_write_bytes(path, json.dumps(job.settings, indent=1).encode(), fsync=job.fsync)
    return False


def _run(job: _Copy, result: ReencodeResult, workers: int | None) -> None:
    job.copy_plain(result)
    rels = sorted(job.cameras, key=lambda r: -os.path.getsize(os.path.join(job.src, r)))  # largest first
    result.bytes_before = sum(os.path.getsize(os.path.join(job.src, r)) for r in rels)
    frames = int(job.meta.episodes.length.sum()) * len(job.meta.info.video_keys)  # each camera's frames, once
    workers = max(1, min(len(rels), workers or runtime.usable_cores())) if rels else 1
    lock = threading.Lock()
    with bar(total=frames, enabled=job.progress, desc="reencode", unit="frame") as pb:

        def tick(n: int) -> None:
            with lock:
                pb.update(n)

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="episodic-reencode") as pool:
            futures = [pool.submit(job.video, rel, tick) for rel in rels]
            try:
                for fut in futures:
                    what, n = fut.result()
                    result.frames += n
                    if what == "encoded":
                        result.files_encoded += 1
                    else:
                        result.files_kept += 1
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
    result.bytes_after = sum(os.path.getsize(os.path.join(job.dst, r)) for r in rels)
