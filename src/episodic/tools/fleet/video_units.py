"""Where a video file can be cut between episodes, and the times of the pieces once joined into a new file (pure:
packet tables in, numbers out).

A *unit* is a run of consecutive episodes of one source file (in time order) whose packets can be copied on their
own and decode to the same frames: a contiguous range of packets in decode order that starts at a key frame
after which no packet shows a time before it (no leading pictures that refer to the frames before), and that no
packet of another unit falls into. Files that LeRobot's or episodic's writer made start every episode at a key
frame, so each episode is a unit; a file whose episodes share a group of pictures keeps them together. An
episode's packets are those shown within half a frame of its frame times ``from_ts + i / fps``, ``i <
length`` -- exactly the frames the loaders ask for. Packets between two units (shown by no episode) are dropped;
packets inside a unit's range are copied whatever time they show.

`place_units` lays units out one after another in an output file: each unit's times move by a whole number of
ticks (`shift`) so that presentation and decode times keep increasing and the unit starts on the frame grid;
its episodes' ``from_timestamp``/``to_timestamp`` move by the same amount, so every frame keeps its time
relative to its episode and the loaders pick the same frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ...format.errors import DatasetFormatError
from ...format.timebase import frames_to_seconds
from ...writer.remux import PacketTable

__all__ = ["Unit", "file_units", "place_units"]

TIME_EPS = 1e-9
GRID_EPS = 1e-9  # a time this close to the frame grid is put on it


@dataclass
class Unit:
    """A run of episodes of one source video file (see the module docstring)."""

    source: str  # the source file, relative to its dataset
    episodes: list[int]  # in time order
    from_ts: list[float]  # the episodes' times in the source file
    to_ts: list[float]
    start: int  # packets [start, stop), decode order
    stop: int
    min_pts: int
    end_pts: int  # after the last frame shown (its time plus its duration)
    min_dts: int
    max_dts: int
    bytes: int
    params: str  # `writer.remux.params_key`: units of equal params can share a file
    time_base: Fraction
    fps: int

    @property
    def frame_ticks(self) -> Fraction:
        return Fraction(1, self.fps) / self.time_base


def _last_key(keys: np.ndarray, q: int) -> int | None:
    """The last key-frame packet at or before packet `q`."""
    i = int(np.searchsorted(keys, q, side="right")) - 1
    return int(keys[i]) if i >= 0 else None


def file_units(
    table: PacketTable,
    source: str,
    episodes: np.ndarray,
    from_ts: np.ndarray,
    lengths: np.ndarray,
    fps: int,
    where: str,
) -> list[Unit]:
    """The units of one source file holding `episodes` (their times `from_ts` and `lengths` in frames); `where`
    names the file and camera in errors."""
    order = np.argsort(from_ts, kind="stable")
    eps, starts, lens = episodes[order], from_ts[order].astype(np.float64), lengths[order].astype(np.int64)
    t = table.times
    half = 0.5 / fps
    first = np.empty(len(eps), np.int64)
    last = np.empty(len(eps), np.int64)
    for i, (e, lo, n) in enumerate(zip(eps.tolist(), starts.tolist(), lens.tolist())):
        hi = lo + (n - 0.5) / fps
        idx = np.flatnonzero((t >= lo - half - TIME_EPS) & (t < hi - TIME_EPS))
        if n <= 0 or not len(idx):
            raise DatasetFormatError(
                f"{where}: episode {e}: no frame shown in {lo:.4f}..{lo + n / fps:.4f} s "
                f"({n} frames); the file's frames run {t.min():.4f}..{t.max():.4f} s"
            )
        first[i], last[i] = idx.min(), idx.max() + 1
    keys = np.flatnonzero(table.key)
    shown_after = np.minimum.accumulate(t[::-1])[::-1]  # the earliest time shown from each packet on
    upto = np.maximum.accumulate(last)  # packets the episodes so far reach
    after = np.minimum.accumulate(first[::-1])[::-1]  # the first packet of the episodes from here on

    def clean_start(q: int) -> int | None:
        s = _last_key(keys, q)
        return s if s is not None and shown_after[s] >= t[s] - TIME_EPS else None

    bounds = [clean_start(int(after[0])) or 0]
    cuts = [0]
    for j in range(1, len(eps)):
        s = clean_start(int(after[j]))
        if s is not None and upto[j - 1] <= s:
            cuts.append(j)
            bounds.append(s)
    units = []
    for u, j in enumerate(cuts):
        k = cuts[u + 1] if u + 1 < len(cuts) else len(eps)
        a, b = bounds[u], int(upto[k - 1])
        dur = np.maximum(table.duration[a:b], 1)
        units.append(
            Unit(
                source=source,
                episodes=[int(e) for e in eps[j:k]],
                from_ts=[float(x) for x in starts[j:k]],
                to_ts=[float(x + n / fps) for x, n in zip(starts[j:k], lens[j:k])],
                start=a,
                stop=b,
                min_pts=int(table.pts[a:b].min()),
                end_pts=int((table.pts[a:b] + dur).max()),
                min_dts=int(table.dts[a:b].min()),
                max_dts=int(table.dts[a:b].max()),
                bytes=int(table.size[a:b].sum()),
                params=table.params,
                time_base=table.time_base,
                fps=fps,
            )
        )
    return units


def _on_grid(seconds: float, fps: int) -> float:
    """`seconds`, as the writer computes a time of the frame grid (`frames_to_seconds`) when within a rounding
    error of one (never a time of -1e-16 for the first frame of a file)."""
    k = round(seconds * fps)
    exact = frames_to_seconds(k, fps)
    return max(exact, 0.0) if abs(seconds - exact) < GRID_EPS else seconds


def place_units(units: list[Unit]) -> tuple[list[int], dict[int, tuple[float, float]]]:
    """Shifts (ticks) of `units` laid out in this order in one file, and each episode's (from, to) times there."""
    shifts: list[int] = []
    times: dict[int, tuple[float, float]] = {}
    end_pts, last_dts = 0, None
    for u in units:
        tb = u.time_base
        if last_dts is None:
            # a file's first frame at time 0 exactly: the mp4 muxer would record a later start in its edit list,
            # rounded to milliseconds, and every frame would read back that rounding off
            need = -u.min_pts
        else:  # after the previous unit, its first frame on the frame grid of the new file
            need = max(end_pts - u.min_pts, last_dts + 1 - u.min_dts)
            ft = u.frame_ticks
            if ft.denominator == 1 and ft > 0:
                grid = int(ft)
                need = -(-(u.min_pts + need) // grid) * grid - u.min_pts
        shifts.append(int(need))
        moved = float(need * tb)
        for e, lo, hi in zip(u.episodes, u.from_ts, u.to_ts):
            # an episode whose first frame lies (within the tolerance) after its from_timestamp, first in a file:
            # from 0, its first frame's time
            times[e] = (max(_on_grid(lo + moved, u.fps), 0.0), _on_grid(hi + moved, u.fps))
        end_pts = u.end_pts + need
        last_dts = u.max_dts + need
    return shifts, times
