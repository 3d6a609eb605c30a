"""`episodic validate`: check every file of a dataset and report all problems at once."""

from __future__ import annotations

import io
import posixpath
from dataclasses import dataclass, field

import numpy as np
import pyarrow.parquet as pq

from ..format.errors import EpisodicError
from ..format.metadata import DatasetMetadata
from ..format.timebase import TIME_EPS_S, end_clamp_s, frames_to_seconds, off_grid
from ..storage.source import Source, open_source
from ..progress import bar
from ..video import DecoderCache


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


def validate(location: str, progress: bool = True, tolerance_s: float = 1e-4, decode: bool = True) -> Report:
    report = Report(root=str(location))
    try:
        source = open_source(location)
        meta = source.load_metadata()
    except EpisodicError as e:
        report.add(str(e))
        return report
    _check_data(meta, report, progress, tolerance_s)
    if meta.video_keys:
        _check_videos(meta, source, report, progress, tolerance_s, decode)
    return report


def _bar(items, desc: str, progress: bool):
    return bar(items, enabled=progress, desc=desc, unit="file")


def _check_data(meta: DatasetMetadata, report: Report, progress: bool, tolerance_s: float) -> None:
    eps, fps = meta.episodes, meta.fps
    needed = ["index", "episode_index", "frame_index", "timestamp"]
    for fid in _bar(range(len(eps.data_files)), "checking data files", progress):
        rel = eps.data_files[fid]
        path = posixpath.join(meta.root, rel)
        owners = np.flatnonzero(eps.data_file_id == fid)
        try:
            with meta.fs.open(path, "rb") as f:
                pf = pq.ParquetFile(io.BytesIO(f.read()))
            missing = [c for c in meta.info.tabular_keys if c not in pf.schema_arrow.names]
            if missing:
                report.add(f"{path}: missing column(s) {missing}")
            t = pf.read(columns=[c for c in needed if c in pf.schema_arrow.names])
        except FileNotFoundError:
            report.add(f"{path}: data file not found (episodes {owners.tolist()[:10]})")
            continue
        except Exception as e:  # a truncated or corrupt file: report it, go on
            report.add(f"{path}: not a readable parquet file ({e})")
            continue
        report.count("data files")
        if any(c not in t.column_names for c in needed):
            continue
        ep_col = t.column("episode_index").to_numpy()
        index = t.column("index").to_numpy()
        frame_index = t.column("frame_index").to_numpy()
        ts = t.column("timestamp").to_numpy().astype(np.float64)
        for e in owners:
            rows = np.flatnonzero(ep_col == e)
            n, lo, hi = int(eps.length[e]), int(eps.dataset_from_index[e]), int(eps.dataset_to_index[e])
            report.count("episodes")
            if len(rows) != n:
                report.add(f"{path}: episode {e}: {len(rows)} rows, metadata length {n}")
                continue
            if not np.array_equal(index[rows], np.arange(lo, hi)):
                report.add(f"{path}: episode {e}: column 'index' is not the contiguous range {lo}..{hi - 1}")
            if not np.array_equal(frame_index[rows], np.arange(n)):
                report.add(f"{path}: episode {e}: column 'frame_index' does not run 0..{n - 1}")
            bad = off_grid(ts[rows], np.arange(n), fps, tolerance_s)
            if bad.any():
                r = int(np.flatnonzero(bad)[0])
                report.add(f"{path}: episode {e}: column 'timestamp' at frame {r} is {ts[rows][r]:.6f}, "
                           f"expected {frames_to_seconds(r, fps):.6f}")
        stray = np.setdiff1d(np.unique(ep_col), owners)
        if len(stray):
            report.add(f"{path}: holds rows of episodes {stray.tolist()[:10]} that the metadata places elsewhere")


def _check_videos(meta: DatasetMetadata, source: Source, report: Report, progress: bool, tolerance_s: float, decode: bool) -> None:
    eps = meta.episodes
    cache = DecoderCache(max_open=2)
    jobs = [(key, fid) for key, cam in eps.cameras.items() for fid in range(len(cam.files))]
    for key, fid in _bar(jobs, "checking videos", progress):
        cam = eps.cameras[key]
        path = posixpath.join(meta.root, cam.files[fid])
        owners = np.flatnonzero(cam.file_id == fid)
        try:
            reader = cache.get(source.local_path(cam.files[fid]))
        except EpisodicError as e:
            report.add(f"{e} (camera {key!r}, episodes {owners.tolist()[:10]})")
            continue
        report.count("video files")
        frame_t = frames_to_seconds(1, meta.fps)
        last = reader.index.times[-1]
        for e in owners:
            lo, hi, n = float(cam.from_ts[e]), float(cam.to_ts[e]), int(eps.length[e])
            length_s = frames_to_seconds(n, meta.fps)
            if hi - lo < length_s - tolerance_s - TIME_EPS_S or abs((hi - lo) - length_s) > frame_t + tolerance_s:
                report.add(f"{path}: episode {e}, camera {key!r}: from/to timestamps {lo:.4f}..{hi:.4f}s span "
                           f"{hi - lo:.4f}s but the episode has {n} frames ({length_s:.4f}s)")
            end = lo + frames_to_seconds(n - 1, meta.fps)
            if end > last + end_clamp_s(meta.fps, tolerance_s):  # the decoder would not clamp it to the last frame
                report.add(f"{path}: episode {e}, camera {key!r}: video ends at {last:.4f}s, before the episode's "
                           f"last frame at {end:.4f}s (video shorter than its metadata)")
                continue
            if decode:
                try:
                    reader.frames_at(np.array([lo, end]), tolerance_s)
                    report.count("frames decoded", 2)
                except EpisodicError as err:
                    report.add(f"episode {e}, camera {key!r}: first/last frame not decodable: {err}")
    cache.clear()
