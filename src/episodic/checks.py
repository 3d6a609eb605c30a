"""Checks of option values, shared by every options dataclass: the error names the option and its range."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

__all__ = ["check_number", "episode_list", "number_list"]


def check_number(
    name: str, value: Any, lo: float, hi: float = float("inf"), integer: bool = False, lo_open: bool = False
) -> None:
    """Raise ValueError unless `value` is an int (`integer`) or a number in [lo, hi] ((lo, hi] with
    `lo_open`); bools are refused. The message states the allowed range."""
    kind = "an int" if integer else "a number"
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    ok = ok_type and not isinstance(value, bool) and (lo < value if lo_open else lo <= value) and value <= hi
    if not ok:
        raise ValueError(f"{name} must be {kind} in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {value!r}")


def episode_list(episodes: Any, name: str = "episodes") -> np.ndarray:
    """`episodes` (a sequence or array of episode indices) as an int64 array. Every entry must be an
    integer (int, numpy integer, integer 0-d tensor): a float (1.7), a string ('1') or a bool (True) is a
    TypeError naming it, never a silently different episode."""
    if isinstance(episodes, (str, bytes)) or not hasattr(episodes, "__iter__"):
        raise TypeError(f"{name} must be a list of episode indices, got {episodes!r}")
    if isinstance(episodes, np.ndarray) and episodes.dtype.kind in "iu":
        return episodes.astype(np.int64, copy=False).reshape(-1)
    values = list(episodes)
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        dtype = getattr(v, "dtype", None)
        if (
            isinstance(v, (bool, np.bool_))
            or str(dtype) in ("bool", "torch.bool")
            or getattr(dtype, "is_floating_point", False)
        ):
            raise TypeError(f"{name}[{i}] must be an integer episode index, got {v!r}")
        try:
            out[i] = operator.index(v)
        except (TypeError, ValueError, OverflowError):
            raise TypeError(f"{name}[{i}] must be an integer episode index, got {v!r}") from None
    return out


def number_list(values: Any, name: str) -> np.ndarray:
    """A non-empty 1-d list of finite real numbers (not bools or strings) as float64; ValueError naming the
    option and the bad value otherwise."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name} must be a non-empty list of numbers, got {values!r}")
    items = list(values)
    for v in items:
        if isinstance(v, (bool, np.bool_, str, bytes)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise ValueError(f"{name} must hold numbers, got {v!r}")
    out = np.asarray(items, dtype=np.float64)
    if out.ndim != 1 or not len(out):
        raise ValueError(f"{name} must be a non-empty list of numbers, got {values!r}")
    if not np.isfinite(out).all():
        raise ValueError(f"{name} must hold finite numbers, got {out[~np.isfinite(out)].tolist()}")
    return out
