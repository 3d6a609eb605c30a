"""`tabular.resample.resample_columns` and the grid arithmetic of `format.timebase` against exact fractions: lengths,
every rule, text and image columns (nearest row), the camera times (the nearest source row's timestamp, kept
through a second resampling and through `Columns.episode`)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from episodic.format.timebase import resample_grid, resampled_lengths
from episodic.tabular import Columns
from episodic.tabular.resample import Resampling, resample_columns


@pytest.mark.parametrize("fps", [1, 7, 10, 15, 30, 50, 60])
@pytest.mark.parametrize("target", [1, 5, 10, 20, 30, 50, 120])
def test_lengths_and_grid_are_exact(fps, target):
    for n in (0, 1, 2, 3, 17, 101):
        want = sum(1 for j in range(n * target + 2) if Fraction(j, target) <= Fraction(n - 1, fps)) if n else 0
        assert int(resampled_lengths([n], fps, target)[0]) == want, (n, fps, target)
    j = np.arange(200)
    lo, num = resample_grid(j, fps, target)
    for jj, a, b in zip(j.tolist(), lo.tolist(), num.tolist()):
        x = Fraction(jj * fps, target)
        assert a == math.floor(x) and Fraction(b, target) == x - a


def _columns() -> Columns:
    """Two episodes of 5 and 4 rows at 10 fps: numbers, text, images and the bookkeeping columns."""
    lengths = [5, 4]
    frame = np.concatenate([np.arange(n) for n in lengths])
    return Columns(
        episodes=np.asarray([3, 8]),
        starts=np.asarray([0, 5, 9]),
        arrays={
            "timestamp": (frame / 10).astype(np.float32),
            "frame_index": frame,
            "index": np.arange(9) + 100,
            "episode_index": np.repeat([3, 8], lengths),
            "task_index": np.asarray([0, 0, 1, 1, 1, 2, 2, 2, 2]),
            "x": np.arange(9, dtype=np.float32)[:, None] * np.asarray([[1.0, -2.0]], np.float32),
            "k": np.arange(9, dtype=np.int64) * 10,
            "text": np.asarray([f"t{i}" for i in range(9)], dtype=object),
        },
        images={"img": [bytes([i]) for i in range(9)]},
    )


def test_every_rule_against_fractions():
    cols = _columns()
    out = resample_columns(cols, 10, Resampling(15, {"x": "linear", "k": "previous"}), np.asarray([0, 7]))
    assert out.starts.tolist() == [0, 7, 12]  # (5-1)*15//10+1 = 7, (4-1)*15//10+1 = 5
    for r in range(len(out)):
        e = int(np.searchsorted(out.starts, r, side="right") - 1)
        j = r - int(out.starts[e])
        x = Fraction(j * 10, 15)
        src = int(cols.starts[e])
        near, prev = src + math.floor(x + Fraction(1, 2)), src + math.floor(x)
        assert out.arrays["timestamp"][r] == np.float32(j / 15) and out.arrays["frame_index"][r] == j
        assert out.arrays["index"][r] == [0, 7][e] + j and out.arrays["episode_index"][r] == [3, 8][e]
        assert out.arrays["task_index"][r] == cols.arrays["task_index"][near]
        assert out.arrays["k"][r] == cols.arrays["k"][prev]
        assert out.arrays["text"][r] == cols.arrays["text"][near] and out.images["img"][r] == cols.images["img"][near]
        want = np.interp(j / 15, np.arange(4 + (e == 0)) / 10, cols.arrays["x"][src : src + 4 + (e == 0), 0])
        assert abs(out.arrays["x"][r, 0] - want) < 1e-6 and out.arrays["x"][r, 1] == np.float32(
            -2 * out.arrays["x"][r, 0]
        )
        assert out.frame_times[r] == cols.arrays["timestamp"][near]
    assert out.arrays["x"].dtype == np.float32 and out.arrays["k"].dtype == np.int64


def test_camera_times_survive_an_episode_split_and_a_second_resampling():
    out = resample_columns(_columns(), 10, Resampling(30), np.asarray([0, 13]))
    parts = [out.episode(i) for i in range(2)]
    assert np.array_equal(np.concatenate([p.camera_times() for p in parts]), out.frame_times)
    assert np.array_equal(parts[1].camera_times(), out.frame_times[13:])
    again = resample_columns(out, 30, Resampling(10), np.asarray([0, 5]))
    assert np.array_equal(again.frame_times, _columns().arrays["timestamp"])  # back on the source frames
