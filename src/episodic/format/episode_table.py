"""The episodes of a dataset as numpy columns (one entry per episode), and where each camera's frames are."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from .errors import DatasetFormatError, EpisodeIndexError, ProblemList


def require_episodes(count: int, source: str, announced: int | None) -> None:
    """A dataset of no episode is refused, by every loader (map-style, streaming, `episodic validate`) alike:
    LeRobot cannot load one, episodic's writer refuses to finalize one and `episodic repair` removes a session
    without a complete episode instead of finalizing it."""
    if count == 0:
        raise DatasetFormatError(
            f"{source}: the dataset has no episode (info.json total_episodes is {announced}); a "
            f"dataset needs at least one"
        )


@dataclass
class CameraFiles:
    """Where each episode's frames of one camera live: a file id per episode and the time range inside it."""

    files: list[str]  # relative paths, indexed by file_id
    file_id: np.ndarray  # (E,) int32
    from_ts: np.ndarray  # (E,) float64, seconds inside the file
    to_ts: np.ndarray  # (E,) float64


@dataclass
class EpisodeTable:
    """One row per episode of the dataset, as numpy columns. Row i is episode i."""

    length: np.ndarray  # int64
    dataset_from_index: np.ndarray  # int64, global `index` range, end exclusive
    dataset_to_index: np.ndarray
    tasks: list[list[str]]
    data_files: list[str]
    data_file_id: np.ndarray  # int32 into data_files
    cameras: dict[str, CameraFiles] = field(default_factory=dict)
    extra: pa.Table | None = None  # other columns of the episodes files, for `episodes["column"]` look-ups

    def __len__(self) -> int:
        return len(self.length)

    @property
    def episode_index(self) -> np.ndarray:
        return np.arange(len(self.length), dtype=np.int64)

    def first_tasks(self, episodes: np.ndarray) -> list[str]:
        """The first task of each of `episodes` ("" for an episode without one): what an eval split stratifies
        by (`order.eval_split`), as LeRobot 0.6's ``make_train_eval_datasets``."""
        return [
            str(t[0]) if t is not None and len(t) else ""
            for t in (self.tasks[int(e)] for e in np.asarray(episodes).reshape(-1))
        ]

    def columns(self) -> dict[str, Any]:
        cols: dict[str, Any] = {
            "episode_index": self.episode_index,
            "tasks": self.tasks,
            "length": self.length,
            "dataset_from_index": self.dataset_from_index,
            "dataset_to_index": self.dataset_to_index,
        }
        for key, cam in self.cameras.items():
            cols[f"videos/{key}/from_timestamp"] = cam.from_ts
            cols[f"videos/{key}/to_timestamp"] = cam.to_ts
        return cols

    def __getitem__(self, key: str | int):
        """`episodes["dataset_from_index"]` gives a column; `episodes[i]` gives episode i as a dict."""
        if isinstance(key, str):
            cols = self.columns()
            if key in cols:
                return cols[key]
            if self.extra is not None and key in self.extra.column_names:
                return self.extra.column(key).to_numpy(zero_copy_only=False)
            raise KeyError(key)
        try:  # a float (1.7) or a bool is a TypeError, never episode 1
            i = operator.index(key) if not isinstance(key, (bool, np.bool_)) else None
        except TypeError:
            i = None
        if i is None:
            raise TypeError(f"episode index must be an integer, got {key!r}")
        if not -len(self) <= i < len(self):
            raise EpisodeIndexError(f"episode {key} out of range: the dataset has {len(self)} episodes")
        i %= len(self)
        row = {k: (v[i].item() if isinstance(v, np.ndarray) else v[i]) for k, v in self.columns().items()}
        if self.extra is not None:
            row.update({k: v[0] for k, v in self.extra.slice(i, 1).to_pydict().items()})
        return row

    def check(self, source: str, total_frames: int | None, problems: ProblemList | None = None) -> None:
        """Lengths and global index ranges: non-negative lengths, from/to matching them, contiguous, ending
        at info.json's total_frames (problems named by episode; the first raises unless lenient)."""
        problems = problems if problems is not None else ProblemList()
        if not len(self):
            return
        bad = np.flatnonzero((self.length < 0) | (self.dataset_to_index - self.dataset_from_index != self.length))
        if len(bad):
            e = int(bad[0])
            problems.add(
                f"{source}: episode {e}: dataset_from_index/dataset_to_index ({self.dataset_from_index[e]}, "
                f"{self.dataset_to_index[e]}) do not match length {self.length[e]}"
            )
        if self.dataset_from_index[0] != 0:
            problems.add(f"{source}: episode 0: dataset_from_index is {self.dataset_from_index[0]}, not 0")
        gaps = np.flatnonzero(self.dataset_from_index[1:] != self.dataset_to_index[:-1])
        if len(gaps):
            e = int(gaps[0]) + 1
            problems.add(f"{source}: episode {e}: dataset_from_index is not contiguous with episode {e - 1}")
        if total_frames is not None and int(self.dataset_to_index[-1]) != total_frames:
            problems.add(
                f"{source}: episodes end at index {int(self.dataset_to_index[-1])} but info.json "
                f"total_frames is {total_frames}"
            )
