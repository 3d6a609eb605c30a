"""The one frame <-> time module: exact agreement with files LeRobot wrote, round trips, and the margins the
decoder and the byte-range planner apply."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from episodic.format import FrameTimestampError
from episodic.format.timebase import (
    END_CLAMP_FRAMES,
    SPAN_FRAMES_AFTER,
    SPAN_FRAMES_BEFORE,
    TIME_EPS_S,
    end_clamp_s,
    frames_to_seconds,
    off_grid,
    seconds_to_frames,
    span_window,
    timestamp_column,
)
from episodic.tabular import delta_offsets
from episodic.video import VideoReader
from episodic.writer.video import VideoFileWriter

from support import FIXTURES

LEROBOT_WRITTEN = ["lerobot-0.4.4", "lerobot_h264", "lerobot_hevc", "lerobot_multifile_av1"]


@pytest.mark.parametrize("name", LEROBOT_WRITTEN)
def test_timestamps_and_episode_spans_equal_lerobots_bit_for_bit(name):
    root = FIXTURES / name / "dataset"
    fps = json.loads((root / "meta/info.json").read_text())["fps"]
    for path in sorted(root.glob("data/*/*.parquet")):
        t = pq.read_table(path, columns=["frame_index", "timestamp"])
        want = t.column("timestamp").to_numpy()
        got = timestamp_column(t.column("frame_index").to_numpy(), fps)
        assert got.dtype == np.float32 and np.array_equal(got, want), path
    for path in sorted(root.glob("meta/episodes/*/*.parquet")):
        for row in pq.read_table(path).to_pylist():
            for key in [k for k in row if k.endswith("/from_timestamp")]:
                to = row[key.replace("from_timestamp", "to_timestamp")]
                assert row[key] + frames_to_seconds(row["length"], fps) == to, (path, row["episode_index"], key)


def test_frames_to_seconds_is_float64_division():
    assert frames_to_seconds(3, 30) == 0.1 and isinstance(frames_to_seconds(3, 30), float)
    n = np.arange(0, 100_000, dtype=np.int64)
    got = frames_to_seconds(n, 30)
    assert got.dtype == np.float64 and np.array_equal(got, n / 30.0)


@pytest.mark.parametrize("fps", [10, 15, 24, 30, 50, 60, 100])
def test_stored_timestamps_round_trip_to_their_frames(fps):
    frame_index = np.arange(0, 500_000, dtype=np.int64)  # hours of frames: float32 timestamps still resolve
    ts = timestamp_column(frame_index, fps).astype(np.float64)
    assert np.array_equal(seconds_to_frames(ts, fps), frame_index)
    assert not off_grid(ts[:1000], frame_index[:1000], fps, 1e-4).any()


def test_seconds_to_frames_and_off_grid():
    s = np.array([-2 / 30, -1 / 30, 0.0, 1 / 30, 0.1, 1.0])
    assert seconds_to_frames(s, 30).tolist() == [-2, -1, 0, 1, 3, 30]
    half = np.array([0.5 / 30, 1 / 30 + 2e-4, 1 / 30 + 5e-5])
    assert off_grid(half, seconds_to_frames(half, 30), 30, 1e-4).tolist() == [True, True, False]


def test_delta_offsets_use_the_timebase():
    offsets = delta_offsets({"action": [-1 / 30, 0, 1 / 30, 0.1]}, 30, 1e-4)
    assert offsets["action"].tolist() == [-1, 0, 1, 3]
    with pytest.raises(ValueError, match="not multiples of 1/fps"):
        delta_offsets({"action": [0.5 / 30]}, 30, 1e-4)


def test_margins():
    assert END_CLAMP_FRAMES == 1 and SPAN_FRAMES_BEFORE >= 1 and SPAN_FRAMES_AFTER > END_CLAMP_FRAMES
    assert end_clamp_s(30, 1e-4) == 1 / 30 + 1e-4
    lo, hi = span_window(1.0, 2.0, 1 / 30)
    assert lo == 1.0 - SPAN_FRAMES_BEFORE / 30 - TIME_EPS_S and hi == 2.0 + SPAN_FRAMES_AFTER / 30 + TIME_EPS_S
    # the samples fetched for an episode reach every time the decoder may clamp onto its last frame
    for fps in (10, 30, 60):
        frame_s = frames_to_seconds(1, fps)
        from_s, n = 4.0, 25
        to_s = from_s + frames_to_seconds(n, fps)
        last_frame = from_s + frames_to_seconds(n - 1, fps)
        assert span_window(from_s, to_s, frame_s)[1] >= last_frame + end_clamp_s(fps, 1e-4)
        assert span_window(from_s, to_s, frame_s)[0] < from_s


def test_decoder_clamps_exactly_the_end_margin(tmp_path):
    fps, n = 30, 6
    path = tmp_path / "v.mp4"
    w = VideoFileWriter(str(path), 64, 48, fps, vcodec="h264")
    assert w.add(np.zeros((n, 48, 64, 3), np.uint8)) == frames_to_seconds(0, fps)
    w.close()
    reader = VideoReader(str(path))
    last = reader.index.times[-1]
    tol = 1e-4
    margin = end_clamp_s(reader.index.fps, tol)
    assert reader.locate(np.array([last + margin * 0.999]), tol).tolist() == [n - 1]
    with pytest.raises(FrameTimestampError):
        reader.locate(np.array([last + margin * 1.001]), tol)
    reader.close()
