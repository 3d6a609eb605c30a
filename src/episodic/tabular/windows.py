"""Window arithmetic shared by every dataset mode: delta_timestamps -> frame offsets -> clamped rows + pad masks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..checks import number_list
from ..format.timebase import off_grid, seconds_to_frames


def delta_offsets(
    delta_timestamps: Mapping[str, Sequence[float]] | None,
    fps: int,
    tolerance_s: float,
    known_keys: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Seconds -> integer frame offsets (round(s * fps)), after checking every value is a multiple of 1/fps
    within `tolerance_s` (LeRobot's rule). Raises ValueError naming the key and the bad values."""
    if not delta_timestamps:
        return {}
    out: dict[str, np.ndarray] = {}
    for key, seconds in delta_timestamps.items():
        if known_keys is not None and key not in known_keys:
            raise ValueError(
                f"delta_timestamps: {key!r} is not a feature of this dataset (features: {list(known_keys)})"
            )
        s = number_list(seconds, f"delta_timestamps[{key!r}]")  # finite numbers: NaN/inf are errors, not huge offsets
        if np.abs(s).max() * fps >= 2**31:
            raise ValueError(f"delta_timestamps[{key!r}]: {s[np.argmax(np.abs(s))]} s is out of range")
        off = seconds_to_frames(s, fps)
        bad = off_grid(s, off, fps, tolerance_s)
        if bad.any():
            raise ValueError(
                f"delta_timestamps[{key!r}]: {s[bad].tolist()} are not multiples of 1/fps (fps={fps}) within "
                f"tolerance_s={tolerance_s}"
            )
        out[key] = off.astype(np.int64)
    return out


def window_rows(
    rows: np.ndarray, start: np.ndarray, end: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For rows (B,) of episodes spanning [start, end) (B,), the rows of each offset (B, T), clamped into the
    episode (the edge frame repeats), and the (B, T) mask of offsets that fell outside it. `offsets`: (T,) for
    every row, or (B, T), each row its own (a mixture's rows, each on its entry's fps grid)."""
    q = rows[:, None] + (offsets if offsets.ndim == 2 else offsets[None, :])
    lo, hi = start[:, None], end[:, None]
    pad = (q < lo) | (q >= hi)
    return np.minimum(np.maximum(q, lo), hi - 1), pad  # ufuncs: np.clip's Python wrapper costs more on small batches
