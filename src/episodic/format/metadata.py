"""Dataset metadata (info, episodes, tasks, stats) for the v3.0 and v2.x layouts, in one compact model.

Everything here reads through an fsspec filesystem and a root path, so local directories and remote URLs
load the same way. Files are read with a `read(rel) -> bytes` function: by default a plain read of
`fs`; `episodic.storage` passes one that retries remote reads under its fetch policy (`Source.load_metadata`)
(this layer does not import storage). Episodes are held as numpy columns (one entry per episode), never as
a dict per episode.

`load_metadata` and the model (`DatasetMetadata`) live here; the files of `meta/` are read by `meta_files`, the
episodes table is `episode_table`, each layout's loader is `layout_v30` / `layout_v21`.
"""

from __future__ import annotations

import posixpath
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .depth import check_unit, rescale_stats
from .episode_table import CameraFiles, EpisodeTable
from .errors import ProblemList
from .info import DatasetInfo
from .layout_v21 import load_v21
from .layout_v30 import load_v30, read_v30_episode_tables
from .meta_files import (
    EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    V21_EPISODE_STATS,
    V21_EPISODES,
    V21_TASKS,
    Reader,
    plain_reader,
    read_bytes,
    read_jsonl,
    read_meta,
    read_parquet,
)
from .paths import dataset_path
from .stats import Stats, stats_from_json

__all__ = [
    "EPISODES_PATH",
    "INFO_PATH",
    "STATS_PATH",
    "TASKS_PATH",
    "V21_EPISODES",
    "V21_EPISODE_STATS",
    "V21_TASKS",
    "CameraFiles",
    "DatasetMetadata",
    "EpisodeTable",
    "Reader",
    "load_metadata",
    "plain_reader",
    "read_bytes",
    "read_jsonl",
    "read_parquet",
]


# LeRobot 0.6's language columns (`lerobot.datasets.language.LANGUAGE_COLUMNS`)
LANGUAGE_COLUMNS = ("language_persistent", "language_events")


@dataclass
class DatasetMetadata:
    """info.json + episodes + tasks + stats of one dataset, loaded through an fsspec filesystem."""

    fs: Any
    root: str
    info: DatasetInfo
    episodes: EpisodeTable
    tasks: list[str]
    stats: Stats
    problems: list[str] = field(default_factory=list)  # found by a lenient load (`episodic validate`)

    # LeRobot-compatible views -------------------------------------------------
    @property
    def fps(self) -> int:
        return self.info.fps

    @property
    def features(self) -> dict[str, dict]:
        return {k: f.to_json() for k, f in self.info.features.items()}

    @property
    def video_keys(self) -> list[str]:
        return self.info.video_keys

    @property
    def image_keys(self) -> list[str]:
        return self.info.image_keys

    @property
    def camera_keys(self) -> list[str]:
        return self.info.camera_keys

    @property
    def depth_keys(self) -> list[str]:
        """The depth cameras (LeRobot 0.6's ``depth_keys`` of its metadata)."""
        return self.info.depth_keys

    @property
    def has_language_columns(self) -> bool:
        """Whether the dataset declares one of LeRobot 0.6's language columns (``language_persistent``,
        ``language_events``): its ``has_language_columns``, which picks the training script's collate function."""
        return any(key in self.info.features for key in LANGUAGE_COLUMNS)

    def rescale_depth_stats(self, output_unit: str) -> None:
        """The depth cameras' statistics, recorded in their ``depth_unit``, brought to `output_unit` ("m" or "mm")
        in place: the unit items hand depth out in (LeRobot 0.6's ``rescale_depth_stats``; a camera without a
        recorded unit is left as it is, with a warning)."""
        check_unit(output_unit)
        unknown = [k for k in self.depth_keys if self.info.features[k].depth_coding.unit is None]
        if unknown:
            warnings.warn(
                f"{self.root}: depth camera(s) {unknown} have no 'depth_unit' in meta/info.json: their "
                f"statistics are left in the unit they were recorded in, not converted to "
                f"{output_unit!r}",
                stacklevel=2,
            )
        for key in self.depth_keys:
            rescale_stats(self.stats, key, self.info.features[key].depth_coding.unit, output_unit)

    @property
    def total_episodes(self) -> int:
        return len(self.episodes)

    @property
    def total_frames(self) -> int:
        return self.info.total_frames

    @property
    def total_tasks(self) -> int:
        return len(self.tasks)

    @property
    def robot_type(self) -> str | None:
        return self.info.robot_type

    def path(self, rel: str) -> str:
        """`root/rel`, checked to stay inside the root (format.paths.dataset_path), once per path (a copy made
        with `dataclasses.replace`, e.g. for another root, checks afresh)."""
        checked = self.__dict__.setdefault("_checked_paths", {})
        path = checked.get(rel)
        if path is None:
            path = checked[rel] = dataset_path(self.fs, self.root, rel)
        return path

    def data_file_of(self, episode: int) -> str:
        return self.episodes.data_files[self.episodes.data_file_id[episode]]

    def video_file_of(self, episode: int, key: str) -> str:
        cam = self.episodes.cameras[key]
        return cam.files[cam.file_id[episode]]

    def episode_stats(self, episode: int, read: Reader | None = None) -> Stats:
        """Per-episode stats, read on demand (they are not kept in memory) with `read` (default: a plain
        read of `fs`)."""
        read = read or plain_reader(self.fs, self.root)
        if self.info.is_v21:
            for row in read_jsonl(read, self.root, V21_EPISODE_STATS):
                if int(row.get("episode_index", -1)) == episode:
                    return stats_from_json(row.get("stats", {}))
            return {}
        table = read_v30_episode_tables(read, self.root, self.info, stats=True)
        row = table.slice(episode, 1).to_pylist()[0]
        out: Stats = {}
        for name, value in row.items():
            if name.startswith("stats/"):
                _, feat, stat = name.split("/", 2)
                out.setdefault(feat, {})[stat] = np.asarray(value)
        return out


def load_metadata(fs, root: str, read: Reader | None = None, problems: ProblemList | None = None) -> DatasetMetadata:
    """The metadata of the dataset at `root` on `fs`. `read(rel) -> bytes` reads one file of it (default: a
    plain read of `fs`; `Source.load_metadata` passes one that retries remote reads); it must raise
    MissingFileError for a file that does not exist.

    Every value that decides what an item contains is checked here, vectorised (lengths and index ranges,
    file indices, video times, task indices), and every path it names is checked to stay inside the root
    (format.paths): the first problem raises a DatasetFormatError naming the file, the episode and the
    field. With a lenient `problems` (ProblemList(strict=False), as `episodic validate` passes) problems are
    collected there instead and loading goes on as far as the files allow (they are also in
    `metadata.problems`)."""
    root = root.rstrip("/") or "/"
    read = read or plain_reader(fs, root)
    problems = problems if problems is not None else ProblemList()
    info = DatasetInfo.from_json(read_meta(read, root, INFO_PATH), source=posixpath.join(root, INFO_PATH))
    if info.is_v21:
        episodes, tasks, stats = load_v21(read, root, info, problems)
    else:
        episodes, tasks, stats = load_v30(read, root, info, problems)
    _unknown_tasks(episodes, tasks, posixpath.join(root, "meta"), problems)
    return DatasetMetadata(
        fs=fs, root=root, info=info, episodes=episodes, tasks=tasks, stats=stats, problems=problems.items
    )


def _unknown_tasks(episodes: EpisodeTable, tasks: list[str], source: str, problems: ProblemList) -> None:
    """Task labels of the episodes table that the tasks table lacks: a warning for the loader (items use
    the data's task_index, checked on its own), a problem for `validate`."""
    known = set(tasks)
    missing = sorted({t for ts in episodes.tasks for t in (ts or []) if t not in known})
    if missing:
        message = (
            f"{source}: {len(missing)} task label(s) named by episodes are not in the tasks table and are "
            f"skipped: {missing[:5]}"
        )
        if problems.strict:
            warnings.warn(message, stacklevel=3)
        else:
            problems.add(message)
