"""`episodic validate`: check everything the loader relies on, in every file, and report all problems at once.

The default is fast and still opens every file: the metadata with every check the loader makes (collected,
not stopping at the first), every data file read whole (schema, each column against its feature: dtype,
shape, ragged lists; the bookkeeping columns against the episodes metadata: index, frame_index, timestamp
on the frame grid, task_index), and every mp4 opened (container, stream size and codec against info.json,
the frame index covering each episode's time span, the first and last frame of each episode decoded).
`full=True` (`--full`) also verifies parquet page checksums where the writer stored them and decodes every
frame of every video (corrupted bytes in the middle of a file). Nothing here raises: an unexpected
exception becomes a problem naming the file.
"""

from __future__ import annotations

import io
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..format.errors import DatasetFormatError, EpisodicError, MissingFileError, ProblemList
from ..format.metadata import DatasetMetadata
from ..format.timebase import TIME_EPS_S, end_clamp_s, frames_to_seconds
from ..progress import bar
from ..storage.source import Source, open_source
from ..tabular.values import check_rows, column_values
from ..video import VideoReader
from ..video.image import decode_image

FULL_BLOCK = 64  # frames decoded at once by --full

# what the loader accepts as each info.json codec name (PyAV's decoder names differ)
_CODECS = {
    "av1": {"av1", "libdav1d", "libaom-av1"},
    "h264": {"h264", "libx264"},
    "hevc": {"hevc", "h265", "libx265"},
    "h265": {"hevc", "h265", "libx265"},
}


@dataclass
class Report:
    root: str
    problems: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, msg: str) -> None:
        self.problems.append(msg)

    def count(self, what: str, n: int = 1) -> None:
        self.checked[what] = self.checked.get(what, 0) + n


def validate(
    location: str, progress: bool = True, tolerance_s: float = 1e-4, decode: bool = True, full: bool = False
) -> Report:
    """Check the dataset at `location` (a directory or fsspec URL); never raises. `decode=False` skips
    decoding frames (structure only); `full=True` decodes every frame and verifies page checksums."""
    report = Report(root=str(location))
    try:
        source = open_source(location)
        meta = _metadata(source, report)
        if meta is None:
            return report
        _check_data(meta, source, report, progress, tolerance_s, full)
        if meta.video_keys:
            _check_videos(meta, source, report, progress, tolerance_s, decode, full)
    except EpisodicError as e:
        report.problems.extend(e.problems if isinstance(e, DatasetFormatError) else [str(e)])
    except Exception as e:  # noqa: BLE001 -- never crash: report it
        report.add(f"{location}: unexpected error ({type(e).__name__}: {e})")
    return report


def _metadata(source: Source, report: Report) -> DatasetMetadata | None:
    """The metadata, loaded leniently: every problem of info.json, the episodes and tasks tables goes to
    the report; None when they do not allow checking the files."""
    problems = ProblemList(strict=False)
    try:
        meta = source.load_metadata(problems)
    except DatasetFormatError as e:
        report.problems.extend(problems.items + e.problems)
        return None
    except Exception as e:  # noqa: BLE001
        report.problems.extend(problems.items)
        report.add(f"{source.path('meta')}: unexpected error reading the metadata ({type(e).__name__}: {e})")
        return None
    report.problems.extend(problems.items)
    report.count("episodes", len(meta.episodes))
    return meta


def _bar(items, desc: str, progress: bool):
    return bar(items, enabled=progress, desc=desc, unit="file")


def _each_file(report: Report, path: str, check: Callable[..., object], *args: object) -> None:
    """Run one file's check, `check(*args)`; any exception becomes a problem naming the file."""
    try:
        check(*args)
    except EpisodicError as e:
        report.problems.extend(e.problems if isinstance(e, DatasetFormatError) else [str(e)])
    except Exception as e:  # noqa: BLE001
        report.add(f"{path}: unexpected error ({type(e).__name__}: {e})")


# ---------------------------------------------------------------------------------------------- data files
def _check_data(
    meta: DatasetMetadata, source: Source, report: Report, progress: bool, tolerance_s: float, full: bool
) -> None:
    eps = meta.episodes
    for fid in _bar(range(len(eps.data_files)), "checking data files", progress):
        rel = eps.data_files[fid]
        if not rel:  # its path was unsafe or unrenderable: reported with the metadata
            continue
        path = posixpath.join(meta.root, rel)
        _each_file(report, path, _check_data_file, meta, source, report, fid, path, tolerance_s, full)


def _read_table(source: Source, rel: str, path: str, owners: np.ndarray, full: bool) -> pa.Table:
    try:
        data = source.read_bytes(rel)
    except MissingFileError:
        raise MissingFileError(f"{path}: data file not found (episodes {owners.tolist()[:10]})") from None
    try:
        checksums = {"page_checksum_verification": True} if full else {}  # where the writer stored them
        return pq.ParquetFile(io.BytesIO(data), **checksums).read()
    except (pa.ArrowException, OSError) as e:
        raise DatasetFormatError(f"{path}: not a readable parquet file ({e})") from None


def _check_data_file(
    meta: DatasetMetadata, source: Source, report: Report, fid: int, path: str, tolerance_s: float, full: bool
) -> None:
    eps = meta.episodes
    owners = np.flatnonzero(eps.data_file_id == fid)
    t = _read_table(source, eps.data_files[fid], path, owners, full)
    report.count("data files")
    problems = ProblemList(strict=False)
    try:
        values = _columns(meta, t, path, problems, full)
        if "episode_index" in values:
            _check_episode_rows(meta, values, owners, path, report, problems, tolerance_s)
    finally:
        report.problems.extend(problems.items)


def _columns(meta: DatasetMetadata, t: pa.Table, path: str, problems: ProblemList, full: bool) -> dict[str, np.ndarray]:
    """Every tabular column against its feature (the loader's conversion, problems collected)."""
    feats = meta.info.features
    missing = [c for c in meta.info.tabular_keys if c not in t.column_names]
    if missing:
        problems.add(f"{path}: missing column(s) {missing}")
    values: dict[str, np.ndarray] = {}
    for name in meta.info.tabular_keys:
        if name in missing:
            continue
        if feats[name].is_image:
            _check_images(meta, t.column(name), name, path, problems, full)
            continue
        try:
            values[name] = column_values(t.column(name), feats[name], f"{path}: column {name!r}")
        except DatasetFormatError as e:
            problems.add(str(e))
    return values


def _check_episode_rows(
    meta: DatasetMetadata,
    values: dict[str, np.ndarray],
    owners: np.ndarray,
    path: str,
    report: Report,
    problems: ProblemList,
    tolerance_s: float,
) -> None:
    """The rows of each episode the metadata places in this file: their number, their order, and the
    bookkeeping columns (the loader's checks plus frame_index and the timestamp grid)."""
    eps = meta.episodes
    ep_col = values["episode_index"]
    inside = (ep_col >= 0) & (ep_col < len(eps))
    counts = np.bincount(ep_col[inside], minlength=len(eps))[owners]
    wrong = counts != eps.length[owners]
    for e, have in zip(owners[wrong][:10], counts[wrong]):
        problems.add(f"{path}: episode {int(e)}: {int(have)} rows, metadata length {int(eps.length[e])}")
    stray = np.setdiff1d(np.unique(ep_col), owners)
    if len(stray):
        problems.add(f"{path}: holds rows of episodes {stray.tolist()[:10]} that the metadata places elsewhere")
    good = owners[~wrong]
    lengths = eps.length[good]
    rows = np.flatnonzero(np.isin(ep_col, good))
    if not np.array_equal(ep_col[rows], np.repeat(good, lengths)):
        problems.add(f"{path}: rows of episodes {good.tolist()[:10]} are not in episode order")
        return
    report.count("episodes' rows checked", len(good))
    frame = np.arange(len(rows), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    first = np.repeat(eps.dataset_from_index[good], lengths)
    check_rows(
        path,
        ep_col[rows],
        frame,
        first,
        {k: v[rows] for k, v in values.items()},
        len(meta.tasks),
        problems,
        fps=meta.fps,
        tolerance_s=tolerance_s,
    )


def _check_images(
    meta: DatasetMetadata, col: pa.ChunkedArray, name: str, path: str, problems: ProblemList, full: bool
) -> None:
    col = col.combine_chunks()
    data = col.field("bytes") if pa.types.is_struct(col.type) else col
    rows = range(len(data)) if full else range(min(len(data), 1))
    want = meta.info.camera_hw(name)[:2]
    for r in rows:
        try:
            img = decode_image(data[r].as_py(), f"{path}: column {name!r} row {r}")
        except EpisodicError as e:
            problems.add(str(e))
            return
        if img.shape[:2] != want:
            problems.add(
                f"{path}: column {name!r} row {r}: image is {img.shape[0]}x{img.shape[1]}, info.json says "
                f"{want[0]}x{want[1]}"
            )
            return


# ---------------------------------------------------------------------------------------------- videos
def _check_videos(
    meta: DatasetMetadata, source: Source, report: Report, progress: bool, tolerance_s: float, decode: bool, full: bool
) -> None:
    eps = meta.episodes
    jobs = [(key, fid) for key, cam in eps.cameras.items() for fid in range(len(cam.files))]
    for key, fid in _bar(jobs, "checking videos", progress):
        rel = eps.cameras[key].files[fid]
        if not rel:
            continue
        path = posixpath.join(meta.root, rel)
        _each_file(report, path, _check_video, meta, source, report, key, fid, path, tolerance_s, decode, full)


def _check_video(
    meta: DatasetMetadata,
    source: Source,
    report: Report,
    key: str,
    fid: int,
    path: str,
    tolerance_s: float,
    decode: bool,
    full: bool,
) -> None:
    eps = meta.episodes
    cam = eps.cameras[key]
    owners = np.flatnonzero(cam.file_id == fid)
    try:
        reader = VideoReader(source.local_path(cam.files[fid]))
    except EpisodicError as e:
        report.add(f"{e} (camera {key!r}, episodes {owners.tolist()[:10]})")
        return
    try:
        report.count("video files")
        _check_stream(meta, reader, key, path, report)
        frame_t = frames_to_seconds(1, meta.fps)
        last = reader.index.times[-1]
        ends = []
        for ep in owners:
            lo, hi, n = float(cam.from_ts[ep]), float(cam.to_ts[ep]), int(eps.length[ep])
            if not (np.isfinite(lo) and np.isfinite(hi)):
                continue  # reported with the metadata
            length_s = frames_to_seconds(n, meta.fps)
            if hi - lo < length_s - tolerance_s - TIME_EPS_S or abs((hi - lo) - length_s) > frame_t + tolerance_s:
                report.add(
                    f"{path}: episode {ep}, camera {key!r}: from/to timestamps {lo:.4f}..{hi:.4f}s span "
                    f"{hi - lo:.4f}s but the episode has {n} frames ({length_s:.4f}s)"
                )
            end = lo + frames_to_seconds(max(n - 1, 0), meta.fps)
            if end > last + end_clamp_s(meta.fps, tolerance_s):  # the decoder would not clamp it to the last frame
                report.add(
                    f"{path}: episode {ep}, camera {key!r}: video ends at {last:.4f}s, before the episode's "
                    f"last frame at {end:.4f}s (video shorter than its metadata)"
                )
                continue
            ends.append((ep, lo, end))
        for ep, lo, _end in ends if decode or full else ():
            n = int(eps.length[ep])
            # --full: every frame the loader can ask for (in blocks, one forward pass); else the first and last
            frames = np.arange(n) if full else np.unique([0, max(n - 1, 0)])
            try:
                for block in np.array_split(frames, max(1, len(frames) // FULL_BLOCK)):
                    reader.frames_at(lo + frames_to_seconds(block, meta.fps), tolerance_s)
                    report.count("frames decoded", len(block))
            except EpisodicError as err:
                report.add(
                    f"episode {ep}, camera {key!r}: {'a frame' if full else 'first/last frame'} not decodable: {err}"
                )
    finally:
        reader.close()


def _check_stream(meta: DatasetMetadata, reader: VideoReader, key: str, path: str, report: Report) -> None:
    """The stream's frame size and codec against the camera's feature in info.json."""
    want = meta.info.camera_hw(key)[:2]
    if tuple(reader.shape) != tuple(want):
        report.add(
            f"{path}: camera {key!r}: frames are {reader.shape[0]}x{reader.shape[1]} (height x width) but "
            f"info.json says {want[0]}x{want[1]}"
        )
    codec = meta.info.features[key].info.get("video.codec")
    have = reader.codec_name
    if isinstance(codec, str) and codec in _CODECS and have not in _CODECS[codec]:
        report.add(f"{path}: camera {key!r}: the stream is {have}, info.json says {codec}")
