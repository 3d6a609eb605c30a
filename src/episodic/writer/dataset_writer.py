"""Write LeRobot v3.0 datasets episode by episode, crash-safe: every episode is on disk once `add_episode`
returns, and an interrupted session can be resumed or finalized (`episodic repair`). The layout on disk while
writing is described in writer/session.py."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..format.depth import PIX_FMT as DEPTH_PIX_FMT
from ..format.errors import WriterError, WriterSessionError
from ..format.stats import array_stats, image_stats_sample
from ..format.timebase import frames_to_seconds, timestamp_column
from ..storage.atomic import temp_files
from .data_files import concat_parquet, data_schema, episode_table, write_segment
from .groups import Group, Series
from .inputs import check_episode, check_features, check_tasks
from .meta import write_metadata
from .recovery import Recovery
from .remux import concat_mp4
from .session import SESSION_DIR, Session, read_settings, segment_episode
from .video import INFO_CODEC, check_gop, encode_file, encoder_name, probe_encoder

log = logging.getLogger(__name__)

MB = 1024 * 1024


class DatasetWriter:
    """Create a LeRobot v3.0 dataset episode by episode.

    >>> w = DatasetWriter("out", fps=30, features={"observation.state": {"dtype": "float32", "shape": [6]},
    ...                                          "observation.images.top": {"dtype": "video", "shape": [96, 128, 3]}})
    >>> w.add_episode({"observation.state": states, "observation.images.top": frames}, task="pick")  # doctest: +SKIP
    >>> w.finalize()  # doctest: +SKIP

    - Durable episodes: when `add_episode` returns, the episode's rows, its encoded frames and its metadata
      row are on disk (flushed with `fsync=True`, the default, so a power loss keeps them too). After a crash,
      `DatasetWriter.reopen(root)` continues the session and `episodic repair ROOT` finalizes it: every
      episode whose `add_episode` returned is kept.
    - One writer per directory: a second one (another process, or this one) gets `WriterLockedError`; a lock
      left by a dead process is taken over.
    - Checked input: features, episodes and task strings are validated before anything is written
      (`WriterInputError`, naming the episode and the field); a failed `add_episode` adds nothing.
    - Errors (a full disk, ...) are raised as they are; no temporary file stays behind; the episodes already
      added stay recoverable, and `finalize` can be called again once the cause is fixed.
    - An encoder error does not lose the episode: its frames are still in memory during `add_episode`, so a
      camera whose encoder fails is encoded again by a fresh encoder (3 attempts, each logged); only when
      every attempt fails does `add_episode` raise `EncoderError`, the episode not added (add it again).
    - `overwrite=True` replaces a dataset (or an interrupted session), never a directory that is neither.
    - No empty dataset: `finalize` refuses a writer without any episode (`WriterError`); used as a context
      manager, such a writer removes its session and raises it. `episodic repair` likewise removes a session
      without a complete episode, and the loaders refuse a dataset of no episode (`DatasetFormatError`).

    Finalize joins the episodes' segments of the last, still open, data and video files (at most one data
    file and one video file per camera: the others were joined when they filled up, in `add_episode`) by
    copying them once (no re-encoding), then writes the metadata; meta/info.json comes last.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        fps: int,
        features: Mapping[str, Mapping[str, Any]],
        robot_type: str | None = None,
        vcodec: str = "av1",
        gop: int = 2,
        crf: int | None = 30,
        pix_fmt: str = "yuv420p",
        preset: int | str | None = None,
        data_files_size_in_mb: float = 100,
        video_files_size_in_mb: float = 200,
        chunks_size: int = 1000,
        overwrite: bool = False,
        resume: bool = False,
        fsync: bool = True,
    ):
        self.root = os.path.abspath(os.fspath(root))
        if overwrite and resume:
            raise ValueError("overwrite=True and resume=True exclude each other")
        if isinstance(fps, bool) or not isinstance(fps, (int, np.integer)) or fps <= 0:
            raise ValueError(f"fps must be a positive integer, got {fps!r}")
        for name, value in (
            ("data_files_size_in_mb", data_files_size_in_mb),
            ("video_files_size_in_mb", video_files_size_in_mb),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if isinstance(chunks_size, bool) or not isinstance(chunks_size, int) or chunks_size < 1:
            raise ValueError(f"chunks_size must be a positive integer, got {chunks_size!r}")
        self.fps = int(fps)
        self.features = check_features(features)
        self.video_keys = [k for k, f in self.features.items() if f.is_video]
        self.data_keys = [k for k, f in self.features.items() if not f.is_video]
        self.robot_type = robot_type
        self.video_opts: dict[str, Any] = dict(vcodec=vcodec, gop=gop, crf=crf, pix_fmt=pix_fmt, preset=preset)
        name = encoder_name(vcodec)
        if self.video_keys:
            check_gop(name, gop)
        for k in self.video_keys:
            h, w, _ = self.features[k].shape
            probe_encoder(k, w, h, self.fps, **self.camera_opts(k))
        self.sizes = (data_files_size_in_mb, video_files_size_in_mb)
        self.chunks_size = chunks_size
        self.fsync = fsync
        self.tasks: dict[str, int] = {}
        self.episodes: list[dict[str, Any]] = []
        self.episode_stats: list[dict[str, dict[str, list]]] = []
        self.total_frames = 0
        self._schema = data_schema(self.features, self.data_keys)
        self._data = Series(None, data_files_size_in_mb * MB, chunks_size)
        self._videos = {k: Series(k, video_files_size_in_mb * MB, chunks_size) for k in self.video_keys}
        self._finalized = self._closed = False
        #: What reopening an interrupted session found (`Recovery`), or None for a new session.
        self.recovery: Recovery | None = None
        self._session = Session.open(self.root, self._settings(), overwrite=overwrite, resume=resume, fsync=fsync)
        if self._session.resumed:
            try:
                self.recovery = self._recover()
            except BaseException:
                self._session.release()
                self._closed = True
                raise

    def camera_opts(self, key: str) -> dict[str, Any]:
        """The encoder settings of camera `key`: the writer's; a depth camera's (`format.depth`) are its 12-bit codes
        in lossless HEVC (``gray12le``), at the writer's gop."""
        if self.features[key].is_depth:
            return dict(
                vcodec="hevc", gop=self.video_opts["gop"], crf=None, pix_fmt=DEPTH_PIX_FMT, preset=None, lossless=True
            )
        return self.video_opts

    @classmethod
    def reopen(cls, root: str | os.PathLike, fsync: bool = True) -> DatasetWriter:
        """Continue the interrupted session in `root` with its own settings: `add_episode` goes on after its
        last complete episode. `.recovery` says what was kept and what was dropped."""
        settings = read_settings(os.path.abspath(os.fspath(root)))
        args = {k: v for k, v in settings.items() if k != "session_format"}
        return cls(root, resume=True, fsync=fsync, **args)

    def _settings(self) -> dict[str, Any]:
        s = {
            "session_format": 1,
            "fps": self.fps,
            "features": {k: f.to_json() for k, f in self.features.items()},
            "robot_type": self.robot_type,
            **self.video_opts,
            "data_files_size_in_mb": self.sizes[0],
            "video_files_size_in_mb": self.sizes[1],
            "chunks_size": self.chunks_size,
        }
        return json.loads(json.dumps(s))  # as read back from the file (lists, not tuples)

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    # ------------------------------------------------------------------ api
    def add_episode(self, frames: Mapping[str, np.ndarray], task: str | Sequence[str]) -> int:
        """Append one episode. `frames` maps each user feature to an array with one row per frame (cameras:
        (T, H, W, 3) uint8). `task` is one string, or one string per frame. Returns the episode index.

        Everything is checked before anything is written. When this returns, the episode is on disk; when it
        raises, the episode was not added (and nothing of it is left) and the writer can go on."""
        self._check_usable()
        ep = len(self.episodes)
        n, arrays = check_episode(ep, frames, self.features)
        tasks = check_tasks(ep, task, n)
        self._join_pending()
        task_ids = dict(self.tasks)
        for t in tasks:
            task_ids.setdefault(t, len(task_ids))
        frame_index = np.arange(n, dtype=np.int64)
        columns = {k: arrays[k] for k in self.data_keys if k in arrays}
        columns.update(
            timestamp=timestamp_column(frame_index, self.fps),
            frame_index=frame_index,
            episode_index=np.full(n, ep, np.int64),
            index=np.arange(self.total_frames, self.total_frames + n, dtype=np.int64),
            task_index=np.array([task_ids[t] for t in tasks], dtype=np.int64),
        )
        stats = {k: array_stats(columns[k]) for k in self.data_keys if self.features[k].dtype not in ("string", "bool")}
        for k in self.video_keys:  # a depth camera's in its depth_unit (LeRobot 0.6), RGB in [0, 1]
            stats[k] = array_stats(
                image_stats_sample(arrays[k]),
                image=True,
                scale=1.0 if self.features[k].is_depth else 255.0,
            )
        stats_json = {k: {s: np.asarray(v).tolist() for s, v in d.items()} for k, d in stats.items()}

        row: dict[str, Any] = {"episode_index": ep, "tasks": list(dict.fromkeys(tasks)), "length": n}
        sizes: dict[str, Any] = {"data": 0, "videos": {}}
        written: list[str] = []
        try:
            g = self._data.open
            path = self._session.segment_path(g, ep)
            sizes["data"] = write_segment(episode_table(columns, self.features, self._schema), path, fsync=self.fsync)
            written.append(path)
            row.update(
                {
                    "data/chunk_index": g.chunk,
                    "data/file_index": g.file,
                    "dataset_from_index": self.total_frames,
                    "dataset_to_index": self.total_frames + n,
                }
            )
            for k in self.video_keys:
                vg = self._videos[k].open
                path = self._session.segment_path(vg, ep)
                f = self.features[k]
                pixels = f.depth_coding.quantise(arrays[k], f.depth_coding.unit or "m") if f.is_depth else arrays[k]
                sizes["videos"][k] = encode_file(
                    path,
                    pixels,
                    self.fps,
                    fsync=self.fsync,
                    label=f"{self.root}: episode {ep}: camera {k!r}",
                    **self.camera_opts(k),
                )
                written.append(path)
                start = frames_to_seconds(vg.frames, self.fps)
                row.update(
                    {
                        f"videos/{k}/chunk_index": vg.chunk,
                        f"videos/{k}/file_index": vg.file,
                        f"videos/{k}/from_timestamp": start,
                        f"videos/{k}/to_timestamp": start + frames_to_seconds(n, self.fps),
                    }
                )
            self._session.append({"episode": row, "stats": stats_json, "bytes": sizes})
        except BaseException:
            for p in written:
                _unlink_quietly(p)
            raise
        self._commit(row, stats_json, sizes)
        return ep

    def finalize(self) -> str:
        """Join the open files, write the metadata (meta/info.json last) and end the session; returns the root.
        When this raises (e.g. a full disk), every episode stays on disk and `finalize` can be called again.

        A writer without any episode refuses (`WriterError`, nothing changed; the writer goes on): a dataset of
        no episode is not one LeRobot or episodic loads."""
        if self._finalized:
            return self.root
        self._check_usable()
        if not self.episodes:
            raise WriterError(
                f"{self.root}: no episode was added, and a dataset of no episode is not written (no "
                f"loader takes one): add an episode, or end the session with abort(discard=True)"
            )
        self._join_pending()
        for series in (self._data, *self._videos.values()):
            if series.open.episodes:
                self._join(series.open)
                series.joined(series.open)
        codec = INFO_CODEC[encoder_name(self.video_opts["vcodec"])]
        write_metadata(
            self.root,
            fps=self.fps,
            features=self.features,
            video_info={
                "video.codec": codec,
                "video.pix_fmt": self.video_opts["pix_fmt"],
                "video.g": self.video_opts["gop"],
                "video.crf": self.video_opts["crf"],
            },
            episodes=self.episodes,
            episode_stats=self.episode_stats,
            tasks=list(self.tasks),
            total_frames=self.total_frames,
            chunks_size=self.chunks_size,
            sizes_mb=self.sizes,
            robot_type=self.robot_type,
            fsync=self.fsync,
        )
        self._session.finish()
        self._finalized = self._closed = True
        return self.root

    def abort(self, discard: bool = False) -> None:
        """Stop writing and give the directory back. The complete episodes stay on disk, ready for
        `DatasetWriter.reopen` or `episodic repair`; `discard=True` deletes everything this session wrote
        (the directory itself stays, empty).
        Never raises (a problem while cleaning up is logged), so it never hides the error that led here."""
        if self._closed:
            return
        self._closed = True
        try:
            if discard:
                self._session.wipe()
                self._session.finish()
            else:
                self._session.release()
        except Exception as e:  # noqa: BLE001  see the docstring
            log.warning("%s: cleaning up after abort failed: %s", self.root, e)

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self.finalize()
            except BaseException:
                # the episodes stay on disk for `episodic repair` (a session without any is removed); the error goes on
                self.abort(discard=not self.episodes)
                raise
            return
        self.abort()
        if self.episodes:
            log.warning(
                "%s: writing stopped by %s; its %d complete episode(s) are kept: finalize them with "
                "`episodic repair %s` or continue with DatasetWriter.reopen()",
                self.root,
                exc_type.__name__,
                len(self.episodes),
                self.root,
            )

    # ------------------------------------------------------------------ internals
    def _check_usable(self) -> None:
        if self._finalized:
            raise WriterError(f"{self.root}: dataset already finalized")
        if self._closed:
            raise WriterError(f"{self.root}: writer aborted; reopen the session with DatasetWriter.reopen()")

    def _commit(self, row: dict[str, Any], stats: dict, sizes: dict[str, Any]) -> None:
        """Account for a complete episode (just added, or replayed from the journal)."""
        for t in row["tasks"]:
            self.tasks.setdefault(t, len(self.tasks))
        n = row["length"]
        self.episodes.append(row)
        self.episode_stats.append(stats)
        self.total_frames += n
        self._data.add(row["episode_index"], n, sizes["data"])
        for k in self.video_keys:
            self._videos[k].add(row["episode_index"], n, sizes["videos"][k])

    def _join_pending(self) -> None:
        for series in (self._data, *self._videos.values()):
            for g in list(series.pending):
                self._join(g)
                series.joined(g)

    def _join(self, g: Group) -> None:
        """Write `g`'s final file from its segments (unless a previous run did), then delete the segments."""
        final = os.path.join(self.root, g.rel)
        if not os.path.exists(final):
            segments = [self._session.segment_path(g, e) for e in g.episodes]
            if g.camera is None:
                got = concat_parquet(segments, final, self._schema, fsync=self.fsync)
            else:
                got = concat_mp4(segments, final, self.fps, fsync=self.fsync)
            if got != g.frames:
                os.unlink(final)
                raise WriterSessionError(
                    f"{final}: joined {got} frames from {len(segments)} segments, expected {g.frames}"
                )
        self._session.remove_group(g)

    def _recover(self) -> Recovery:
        """Rebuild the state from the journal; drop what no complete episode owns."""
        records, torn = self._session.read_journal()
        for i, rec in enumerate(records):
            row = rec["episode"]
            where = f"{self._session.journal}:{i + 1}"
            try:
                ok = (
                    row["episode_index"] == i
                    and row["dataset_from_index"] == self.total_frames
                    and (row["data/chunk_index"], row["data/file_index"])
                    == (self._data.open.chunk, self._data.open.file)
                    and all(
                        (
                            row[f"videos/{k}/chunk_index"],
                            row[f"videos/{k}/file_index"],
                            row[f"videos/{k}/from_timestamp"],
                        )
                        == (s.open.chunk, s.open.file, frames_to_seconds(s.open.frames, self.fps))
                        for k, s in self._videos.items()
                    )
                )
                if ok:
                    self._commit(row, rec["stats"], rec["bytes"])
            except (KeyError, TypeError) as e:
                raise WriterSessionError(f"{where}: episode record lacks a field ({e})") from None
            if not ok:
                raise WriterSessionError(
                    f"{where}: episode {row.get('episode_index')!r} does not continue the episodes before it"
                )
        keep: set[str] = set()
        for series in (self._data, *self._videos.values()):
            last = series.open
            if last.episodes and os.path.exists(os.path.join(self.root, last.rel)):
                series.close_open()  # finalize joined it before the interruption: new episodes go to the next file
            for g in [*series.pending, series.open]:
                if os.path.exists(os.path.join(self.root, g.rel)):
                    continue
                for ep in g.episodes:
                    path = self._session.segment_path(g, ep)
                    if not os.path.isfile(path):
                        raise WriterSessionError(
                            f"{path}: segment of complete episode {ep} is missing; the session "
                            f"cannot be finalized with it"
                        )
                    keep.add(path)
        temps = temp_files(self.root)
        for p in temps:
            _unlink_quietly(p)
        dropped = [os.path.relpath(p, self.root) for p in self._session.remove_orphans(keep)]
        n = len(self.episodes)
        recovery = Recovery(
            episodes=n,
            frames=self.total_frames,
            torn_bytes=torn,
            partial_files=[p for p in dropped if segment_episode(p) >= n],
            joined_files=[p for p in dropped if segment_episode(p) < n],
            temp_files=[os.path.relpath(p, self.root) for p in temps],
        )
        log.info("%s: reopened: %s", self.root, recovery.summary())
        return recovery


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError as e:
        if not isinstance(e, FileNotFoundError):
            log.warning("%s: could not remove (%s)", path, e)


__all__ = ["DatasetWriter", "Recovery", "SESSION_DIR"]
