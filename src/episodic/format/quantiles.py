"""Quantiles of sorted columns, exactly as numpy computes them, and quantile sketches: a column's values at
evenly spaced ranks, merged into the quantiles of pooled data (several datasets' columns) with a stated rank
tolerance. numpy only.

Exact (`sorted_quantiles`): numpy's default method (``linear``, type 7): the value at position ``q * (n - 1)``
of the sorted column, interpolated between its two neighbours with numpy's own formula, so the result equals
``np.quantile(column, q)``.

Sketch (`sketch_of_sorted`): the column itself (sorted) when it has at most ``SKETCH_SIZE + 1`` values, else its
exact quantiles at the ``SKETCH_SIZE + 1`` levels ``0, 1/K, ..., 1`` (``K = SKETCH_SIZE``).

Pooled (`pooled_quantiles`): every part's sketch as weighted points (an exact part: each value weight 1; a
summarised part of n values: weight n/K per point, n/(2K) at the two ends -- the trapezoid rule, so a value
between two points counts half of the cell's values), sorted by value; a point's position is the number of
values before it plus half its own weight less 1/2 (for unit weights: its 0-based rank, numpy's positions), and
quantile q is the value at position ``q * (N - 1)``, interpolated between points.

Tolerance: when every part is exact the pooled quantiles equal ``np.quantile`` of the concatenated data. A
summarised part of n values puts at most n/(2K) + 1 values on the wrong side of any value, so the pooled
estimate of quantile q lies between the exact quantiles of the concatenated data at ``q - 1/K`` and
``q + 1/K`` (``QUANTILE_RANK_TOLERANCE``; clipped to [0, 1]). With K = 512 that is 0.2% of the values
(tests/format/test_quantiles.py checks it against numpy on pooled data).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["QUANTILE_RANK_TOLERANCE", "SKETCH_SIZE", "pooled_quantiles", "sketch_of_sorted", "sorted_quantiles"]

SKETCH_SIZE = 512  # K: a summarised column keeps K + 1 values
QUANTILE_RANK_TOLERANCE = 1.0 / SKETCH_SIZE


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """numpy's interpolation between neighbours (`numpy.lib._function_base_impl._lerp`): exact at both ends."""
    diff = b - a
    out = a + diff * t
    return np.where(t >= 0.5, b - diff * (1 - t), out)


def sorted_quantiles(rows: np.ndarray, levels: ArrayLike) -> np.ndarray:
    """`np.quantile(x, levels)` (method ``linear``) of each row of `rows` (shape (D, n), each row sorted
    ascending, float64, n >= 1): shape (len(levels), D)."""
    rows = np.asarray(rows, dtype=np.float64)
    n = rows.shape[1]
    q = np.asarray(levels, dtype=np.float64)
    virtual = q * (n - 1)
    lo = np.floor(virtual).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    t = virtual - lo
    a, b = rows[:, lo].T, rows[:, hi].T  # (L, D)
    return _lerp(a, b, t[:, None])


def sketch_of_sorted(rows: np.ndarray, size: int = SKETCH_SIZE) -> np.ndarray:
    """The sketch of each row of `rows` ((D, n), rows sorted): the rows themselves when n <= size + 1, else their
    exact quantiles at levels j / size, j = 0..size: shape (D, min(n, size + 1))."""
    rows = np.asarray(rows, dtype=np.float64)
    if rows.shape[1] <= size + 1:
        return rows.copy()
    return sorted_quantiles(rows, np.arange(size + 1) / size).T.copy()


def _weights(count: int, points: int, size: int) -> np.ndarray:
    if points == count:  # exact: every value once
        return np.ones(points)
    if points != size + 1:
        raise ValueError(f"a sketch of {count} values has {points} points: expected {count} (exact) or {size + 1}")
    w = np.full(points, count / size)
    w[[0, -1]] /= 2
    return w


def pooled_quantiles(
    parts: Sequence[tuple[int, np.ndarray]], levels: Sequence[float], size: int = SKETCH_SIZE
) -> np.ndarray:
    """Quantiles at `levels` of the pooled data of `parts` (each ``(count, sketch)``, sketch of shape (D, m) from
    `sketch_of_sorted` with the same `size`): shape (len(levels), D), by the rule and within the tolerance of
    the module docstring."""
    parts = [(int(n), np.asarray(s, dtype=np.float64)) for n, s in parts if int(n) > 0]
    if not parts:
        raise ValueError("pooled_quantiles: no values")
    dims = {s.shape[0] for _, s in parts}
    if len(dims) != 1:
        raise ValueError(f"pooled_quantiles: parts of different dimensions {sorted(dims)}")
    values = np.concatenate([s for _, s in parts], axis=1)  # (D, P)
    if all(s.shape[1] == n for n, s in parts):  # every value at hand: numpy's own rule
        return sorted_quantiles(np.sort(values, axis=1), levels)
    weights = np.concatenate([_weights(n, s.shape[1], size) for n, s in parts])  # (P,)
    total = sum(n for n, _ in parts)
    target = np.asarray(levels, dtype=np.float64) * (total - 1)
    order = np.argsort(values, axis=1, kind="stable")
    out = np.empty((len(target), values.shape[0]))
    for d in range(values.shape[0]):
        w = weights[order[d]]
        position = np.cumsum(w) - w / 2 - 0.5
        out[:, d] = np.interp(target, position, values[d, order[d]])
    return out
