"""Checks of option values, shared by every options dataclass: the error names the option and its range."""

from __future__ import annotations

from typing import Any

__all__ = ["check_number"]


def check_number(name: str, value: Any, lo: float, hi: float = float("inf"), integer: bool = False,
                 lo_open: bool = False) -> None:
    """Raise ValueError unless `value` is an int (`integer`) or a number in [lo, hi] ((lo, hi] with
    `lo_open`); bools are refused. The message states the allowed range."""
    kind = "an int" if integer else "a number"
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    ok = ok_type and not isinstance(value, bool) and (lo < value if lo_open else lo <= value) and value <= hi
    if not ok:
        raise ValueError(f"{name} must be {kind} in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {value!r}")
