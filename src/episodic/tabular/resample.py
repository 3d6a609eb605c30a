"""One control rate: a dataset's rows resampled to a target fps, where rows are read (`resample_columns`), and the
episode lengths and global index ranges that go with them (`episode_lengths`, `episode_bounds`).

A resampled episode is new rows: target frame j (``0 <= j < (n - 1) * F // f + 1`` for an episode of n frames
at f fps resampled to F fps, `format.timebase.resampled_lengths`) lies at ``j / F`` seconds, at source position
``x = j * f / F`` (exactly, `format.timebase.resample_grid`). Its values:

- ``timestamp`` = ``j / F`` (float32, as a data file's), ``frame_index`` = j, ``index`` = the episode's first
  resampled index + j (resampled episodes side by side over the whole dataset, from 0: `episode_bounds`),
  ``episode_index`` the episode's; ``task_index`` the nearest source row's.
- every other column by its key's rule (`Resampling.rules`, default ``nearest``):
  ``nearest``: the source row nearest to x, halves up (``floor(x + 1/2)``);
  ``previous``: the last source row at or before x (``floor(x)``, a zero-order hold);
  ``linear``: ``v[lo] + (v[lo + 1] - v[lo]) * (x - lo)`` in float64, cast back to the column's dtype (float
  columns only). Text columns and image features take the nearest row.
- cameras (videos, and images stored in the data file): the frame of the nearest source row. A resampled row's
  camera time (`Columns.frame_times`) is that source row's timestamp, so the decoder looks the frame up at a
  time the video has, within the dataset's ``tolerance_s`` as before; the frame shown for time ``j / F`` is
  then up to half a source frame period (``1 / (2 f)``) away from it, by construction, whatever the tolerance.

Windows (``delta_timestamps``) are then frame offsets on the target grid, so a window means the same duration
and the same number of steps in every dataset of a mixture. The order counts resampled frames. numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..checks import check_number
from ..format.metadata import DatasetMetadata
from ..format.timebase import resample_grid, resampled_lengths, timestamp_column
from .columns import Columns

__all__ = ["RESAMPLE_RULES", "SET_BY_RESAMPLING", "Resampling", "episode_bounds", "episode_lengths", "resample_columns"]

RESAMPLE_RULES = ("nearest", "previous", "linear")
SET_BY_RESAMPLING = ("timestamp", "frame_index", "index", "episode_index", "task_index")
MAX_FPS = 10_000


@dataclass(frozen=True)
class Resampling:
    """Rows resampled to `fps` (an int); `rules`: {column: "nearest" | "previous" | "linear"} (others: nearest).
    Checked when built; `check` checks the rules against a dataset's features."""

    fps: int
    rules: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        check_number("target_fps", self.fps, 1, MAX_FPS, integer=True)
        if not isinstance(self.rules, Mapping):
            raise ValueError(f"resample must map column names to rules, got {self.rules!r}")
        bad = {k: v for k, v in self.rules.items() if not isinstance(k, str) or v not in RESAMPLE_RULES}
        if bad:
            raise ValueError(f"resample: rules must be one of {', '.join(RESAMPLE_RULES)} for column names, got {bad}")
        object.__setattr__(self, "rules", dict(self.rules))

    @classmethod
    def of(cls, target_fps: int | None, rules: Mapping[str, str] | None = None) -> Resampling | None:
        """The resampling a dataset's ``target_fps`` and ``resample`` arguments ask for (None: none)."""
        if target_fps is None:
            if rules:
                raise ValueError(f"resample {dict(rules)} needs a target_fps (the rate rows are resampled to)")
            return None
        return cls(target_fps, rules or {})

    def rule(self, key: str) -> str:
        return self.rules.get(key, "nearest")

    def check(self, features: Mapping, where: str) -> None:
        """ValueError naming every rule that does not apply to `features` (a dataset's, name -> Feature): a key
        it lacks, a camera (always the nearest frame), a column the resampling sets, ``linear`` on a column that
        is not float."""
        problems = []
        for key, rule in self.rules.items():
            f = features.get(key)
            if f is None:
                problems.append(f"{key!r} is not a feature (features: {list(features)})")
            elif f.is_camera:
                problems.append(f"{key!r} is a camera: cameras take the nearest frame")
            elif key in SET_BY_RESAMPLING:
                problems.append(f"{key!r} is set by the resampling itself")
            elif rule == "linear" and not str(f.dtype).startswith("float"):
                problems.append(f"{key!r} is {f.dtype}: 'linear' needs a float column (use 'nearest' or 'previous')")
        if problems:
            raise ValueError(f"{where}: resample: " + "; ".join(problems))


def episode_lengths(meta: DatasetMetadata, target_fps: int | None) -> np.ndarray:
    """Each episode's frames at `target_fps` (its own lengths when None)."""
    if target_fps is None:
        return meta.episodes.length
    return resampled_lengths(meta.episodes.length, meta.fps, target_fps)


def episode_bounds(meta: DatasetMetadata, target_fps: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Each episode's global index range [from, to) at `target_fps`: the metadata's when None, else the resampled
    episodes side by side from 0."""
    if target_fps is None:
        return meta.episodes.dataset_from_index, meta.episodes.dataset_to_index
    to = np.cumsum(episode_lengths(meta, target_fps)).astype(np.int64)
    return to - episode_lengths(meta, target_fps), to


def resample_columns(columns: Columns, fps: int, resampling: Resampling, first_index: np.ndarray) -> Columns:
    """`columns` (whole episodes at `fps`) resampled by `resampling` (see the module docstring); `first_index`:
    each of its episodes' first resampled ``index``."""
    target = resampling.fps
    lengths = np.diff(columns.starts)
    new_lengths = resampled_lengths(lengths, fps, target)
    starts = np.concatenate([[0], np.cumsum(new_lengths)]).astype(np.int64)
    ep = np.repeat(np.arange(len(lengths), dtype=np.int64), new_lengths)
    j = np.arange(int(starts[-1]), dtype=np.int64) - starts[ep]
    lo, num = resample_grid(j, fps, target)
    below = columns.starts[ep] + lo  # the source row at or before each target frame
    nearest = below + (2 * num >= target)  # x - lo >= 1/2: the next row (it exists: x <= n - 1)
    after = np.minimum(below + 1, columns.starts[ep + 1] - 1)
    w = num / target
    rows = {"nearest": nearest, "previous": below}
    arrays = {}
    for name, values in columns.arrays.items():
        if name == "timestamp":
            arrays[name] = timestamp_column(j, target).astype(values.dtype, copy=False)
        elif name == "frame_index":
            arrays[name] = j.astype(values.dtype, copy=False)
        elif name == "index":
            arrays[name] = (np.asarray(first_index, dtype=np.int64)[ep] + j).astype(values.dtype, copy=False)
        elif name in SET_BY_RESAMPLING:  # episode_index, task_index
            arrays[name] = values[nearest]
        elif resampling.rule(name) == "linear":
            a, b = values[below].astype(np.float64), values[after].astype(np.float64)
            ww = w.reshape(-1, *([1] * (a.ndim - 1)))
            arrays[name] = (a + (b - a) * ww).astype(values.dtype)
        else:
            arrays[name] = values[rows[resampling.rule(name)]]
    times = columns.camera_times() if "timestamp" in columns.arrays or columns.frame_times is not None else None
    return Columns(
        episodes=columns.episodes,
        starts=starts,
        arrays=arrays,
        images={n: [v[int(r)] for r in nearest] for n, v in columns.images.items()},
        frame_times=None if times is None else np.asarray(times)[nearest],
    )
