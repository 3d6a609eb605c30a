"""Checks of the values in data files, shared by the loader (first problem raises) and `episodic validate`
(every problem collected): each column against its feature in info.json, and the bookkeeping columns
(`index`, `timestamp`, `task_index`, ...) against the episodes metadata. All vectorised (numpy/arrow
compute over whole columns), so loading stays as fast as reading.

A row whose `task_index` names a task the tasks table lacks (metadata drift: a tasks table edited after the data
was written) is refused by `validate` and, with ``on_unknown_task="raise"``, by the loader; by default the loader
goes on (`UnknownTasks`: one warning per dataset) and the item's task is `UNKNOWN_TASK` ("").
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..format.errors import DatasetFormatError, ProblemList, UnknownTaskWarning
from ..format.features import Feature
from ..format.timebase import frames_to_seconds, off_grid

UNKNOWN_TASK = ""  # the task text of an item whose task_index the tasks table lacks
ON_UNKNOWN_TASK = ("warn", "raise")


def _is_list(typ: pa.DataType) -> bool:
    return pa.types.is_fixed_size_list(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ)


def _list_sizes(col: pa.Array, where: str, expected: tuple[int, ...]) -> tuple[int, pa.Array]:
    """The one length every row's list has (ragged lists are an error: flattening them would shift every
    later vector), and the flattened values. `expected`: the lengths info.json allows at this level."""
    typ = col.type
    if pa.types.is_fixed_size_list(typ):
        return typ.list_size, col.flatten()
    lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
    if not len(lengths):
        return (expected or (0,))[0], col.flatten()
    size = int(lengths[0])
    if (lengths != size).any():  # ragged: name the first row that differs from the length info.json expects
        size = next((int(n) for n in expected if (lengths == n).any()), size)
        r = int(np.flatnonzero(lengths != size)[0])
        raise DatasetFormatError(
            f"{where}: ragged lists: row {r} has {int(lengths[r])} values, other rows {size} "
            f"(every row must hold the same number)"
        )
    return size, col.flatten()


def column_values(col: pa.ChunkedArray | pa.Array, feature: Feature, where: str) -> np.ndarray:
    """A data column as a numpy array of its feature's dtype, (N,) for shape [1] else (N, *shape), after
    checking it holds exactly that: no missing values, the same list length in every row, as many values
    per row as the shape says, and a type that converts without loss (an integer feature from a float
    column only when every value is a whole number in range; never from strings). DatasetFormatError
    naming `where` (file and column) otherwise."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    n = len(col)
    shape = feature.shape
    want = math.prod(shape)
    dims: list[int] = []
    try:
        while _is_list(col.type):
            if col.null_count:
                raise DatasetFormatError(f"{where}: {col.null_count} missing values")
            size, col = _list_sizes(col, where, (want, shape[0]) if not dims else ())
            dims.append(size)
        if col.null_count:
            raise DatasetFormatError(f"{where}: {col.null_count} missing values")
        per_row = math.prod(dims)
        if per_row != want or (len(dims) > 1 and dims != list(shape)):
            got = "a scalar" if not dims else f"lists of {'x'.join(map(str, dims))} values"
            raise DatasetFormatError(f"{where}: holds {got} per row, info.json says shape {list(shape)}")
        typ = col.type
        if feature.dtype == "string":
            if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
                raise DatasetFormatError(f"{where}: is {typ}, info.json says string")
            return np.asarray(col.to_pylist(), dtype=object)
        target = np.dtype(feature.dtype)
        values = _converted(col, target, where)
    except (pa.ArrowException, ValueError, TypeError) as e:
        if isinstance(e, DatasetFormatError):
            raise
        raise DatasetFormatError(f"{where}: cannot read as {feature.dtype}{list(shape)} ({e})") from None
    return values if shape == (1,) else values.reshape((n, *shape))


def _converted(col: pa.Array, target: np.dtype, where: str) -> np.ndarray:
    typ = col.type
    numeric = pa.types.is_integer(typ) or pa.types.is_floating(typ)
    if target.kind == "b":
        if pa.types.is_boolean(typ):
            return col.to_numpy(zero_copy_only=False)
        if pa.types.is_integer(typ):
            values = col.to_numpy(zero_copy_only=False)
            if len(values) and ((values != 0) & (values != 1)).any():
                raise DatasetFormatError(f"{where}: is {typ} with values other than 0/1, info.json says bool")
            return values.astype(bool)
        raise DatasetFormatError(f"{where}: is {typ}, info.json says bool")
    if not (numeric or pa.types.is_boolean(typ)):
        raise DatasetFormatError(f"{where}: is {typ}, info.json says {target}")
    values = col.to_numpy(zero_copy_only=False)
    if target.kind in "iu":
        if pa.types.is_floating(typ):
            bad = ~np.isfinite(values) | (values != np.round(values))
            if bad.any():
                r = int(np.flatnonzero(bad)[0])
                raise DatasetFormatError(
                    f"{where}: holds {values[r].item()!r} at row {r}, info.json says {target} "
                    f"(a float is never truncated)"
                )
        if len(values) and values.dtype != bool:
            lo, hi = np.iinfo(target).min, np.iinfo(target).max
            vmin, vmax = values.min(), values.max()
            if vmin < lo or vmax > hi:
                raise DatasetFormatError(f"{where}: values {vmin}..{vmax} do not fit {target} (info.json)")
    return values.astype(target, copy=False)


def check_rows(
    where: str,
    episodes: np.ndarray,
    frame: np.ndarray,
    first_index: np.ndarray,
    values: Mapping[str, np.ndarray],
    num_tasks: int | None,
    problems: ProblemList,
    fps: int | None = None,
    tolerance_s: float = 1e-4,
) -> None:
    """The bookkeeping columns of some rows of one data file against the metadata: `episodes[r]`, `frame[r]`
    (position in its episode) and `first_index[r]` (the episode's dataset_from_index) describe row r.
    Always: `index` is the episode's global index range, `timestamp` is finite, and (unless `num_tasks` is None:
    the loader's `UnknownTasks` deals with them) `task_index` names a task of the tasks table of `num_tasks`.
    With `fps` (`validate`): also `frame_index` counts the frames and `timestamp` is frame_index / fps within
    `tolerance_s`."""

    def report(bad: np.ndarray, column: str, what: str) -> None:
        r = int(np.flatnonzero(bad)[0])
        more = f" (and {int(bad.sum()) - 1} more rows)" if bad.sum() > 1 else ""
        problems.add(
            f"{where}: episode {int(episodes[r])}: column {column!r} at frame {int(frame[r])} is "
            f"{values[column][r].item()!r}{what}{more}"
        )

    if "index" in values:
        bad = values["index"] != first_index + frame
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            report(
                bad,
                "index",
                f", expected {int(first_index[r] + frame[r])} (the episodes metadata's dataset_from_index + frame)",
            )
    if "timestamp" in values:
        bad = ~np.isfinite(values["timestamp"])
        if bad.any():
            report(bad, "timestamp", ", not a finite time")
    if "task_index" in values and num_tasks is not None:
        bad = unknown_task_rows(values["task_index"], num_tasks)
        if bad.any():
            report(bad, "task_index", f": the tasks table has {num_tasks} task(s), 0..{num_tasks - 1}")
    if fps is None:
        return
    if "frame_index" in values:
        bad = values["frame_index"] != frame
        if bad.any():
            report(bad, "frame_index", ", expected the frame's position in its episode")
    if "timestamp" in values:
        ts = values["timestamp"].astype(np.float64)
        bad = np.isfinite(ts) & off_grid(ts, frame, fps, tolerance_s)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            report(bad, "timestamp", f", expected {frames_to_seconds(int(frame[r]), fps):.6f} (frame / fps)")


def unknown_task_rows(task_index: np.ndarray, num_tasks: int) -> np.ndarray:
    """True where a `task_index` value names no task of a tasks table of `num_tasks` tasks (0..num_tasks-1)."""
    t = np.asarray(task_index)
    return (t < 0) | (t >= num_tasks)


class UnknownTasks:
    """The rows of one dataset whose `task_index` its tasks table (`num_tasks` tasks) lacks, as its rows are read;
    one per dataset object (a mixture: per entry). `policy` (``on_unknown_task``): ``"warn"`` (default): the loader
    goes on, those items' task is `UNKNOWN_TASK` (""), and `report()` warns once (`UnknownTaskWarning`), naming
    the episodes and task indices found by then, `where` (the dataset) first; ``"raise"``: the loader raises the
    `check_rows` error (file, episode, frame, value) instead. Small, picklable: it travels to DataLoader workers
    with its dataset (each process warns at most once)."""

    def __init__(self, where: str, num_tasks: int, policy: str = "warn"):
        if policy not in ON_UNKNOWN_TASK:
            raise ValueError(f"on_unknown_task must be one of {', '.join(ON_UNKNOWN_TASK)}, got {policy!r}")
        self.where, self.num_tasks, self.policy = where, int(num_tasks), policy
        self.found: dict[int, set[int]] = {}  # episode -> task indices the tasks table lacks (until warned)
        self.warned = False

    @property
    def tolerant(self) -> bool:
        return self.policy == "warn"

    def add(self, episodes: np.ndarray, task_index: np.ndarray) -> None:
        """Note the rows (`episodes[r]`, `task_index[r]`) whose task index the tasks table lacks."""
        if self.warned:
            return
        bad = unknown_task_rows(task_index, self.num_tasks)
        if bad.any():
            pairs = np.unique(
                np.stack([np.asarray(episodes)[bad], np.asarray(task_index)[bad]]).astype(np.int64), axis=1
            )
            for e, t in pairs.T.tolist():
                self.found.setdefault(e, set()).add(t)

    def report(self) -> None:
        """Warn about what `add` found, the first time something was found (never again for this object)."""
        if self.warned or not self.found:
            return
        self.warned = True
        eps = sorted(self.found)
        tasks = sorted(set().union(*self.found.values()))
        listed = ", ".join(f"{e} ({', '.join(map(str, sorted(self.found[e])[:5]))})" for e in eps[:10])
        more = f" and {len(eps) - 10} more" if len(eps) > 10 else ""
        self.found = {}
        warnings.warn(
            f"{self.where}: {len(eps)} episode(s) name task indices the tasks table lacks (it has "
            f"{self.num_tasks} task(s), 0..{self.num_tasks - 1}): episode (task_index): {listed}{more}; "
            f"task indices {tasks[:10]}; their items' task is {UNKNOWN_TASK!r} (warned once per dataset; "
            f"`episodic validate` lists every row; on_unknown_task='raise' refuses such a dataset)",
            UnknownTaskWarning,
            stacklevel=2,
        )
