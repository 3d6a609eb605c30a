"""Frames <-> seconds at a dataset's fps, and the margins every layer applies around frame times.

One home for the arithmetic that the writer (timestamps, episode spans in a video file), the v2.1 loader
(episode spans), the window arithmetic (delta_timestamps -> frame offsets), the video decoder (clamping at
a file's end), the byte-range planner (which samples an episode needs), `episodic validate` and the
resampling to a control rate (`resampled_lengths`, `resample_grid`: integers only) share.
Each function is the exact expression those places used, so results are bit-identical. numpy only.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "END_CLAMP_FRAMES",
    "SPAN_FRAMES_BEFORE",
    "SPAN_FRAMES_AFTER",
    "TIME_EPS_S",
    "frames_to_seconds",
    "seconds_to_frames",
    "timestamp_column",
    "off_grid",
    "end_clamp_s",
    "span_window",
    "resampled_lengths",
    "resample_grid",
]

# A query at most this many frames (plus the tolerance) past a video file's last frame gets the last frame:
# an episode's to_timestamp lies one frame after its last frame, and windows reaching it must not fail.
END_CLAMP_FRAMES = 1
# Frames of slack before an episode's from_timestamp when choosing the mp4 samples to fetch: its first
# frame may sit a rounding error before from_timestamp, and the decoder picks the nearest frame.
SPAN_FRAMES_BEFORE = 1
# Frames of slack after its to_timestamp: the end clamp (END_CLAMP_FRAMES) plus one frame for rounding.
SPAN_FRAMES_AFTER = 2
# Slack when comparing times computed two ways (float32 timestamps against float64 frame times).
TIME_EPS_S = 1e-6


def frames_to_seconds(frames, fps):
    """Seconds of `frames` frames (an int or an array) at `fps`: the time of frame `frames` of an episode,
    or the duration of that many frames. float64 (a Python float for Python numbers)."""
    return frames / fps


def seconds_to_frames(seconds, fps) -> np.ndarray:
    """The nearest whole number of frames to `seconds` at `fps` (float64 array of whole numbers)."""
    return np.round(np.asarray(seconds, dtype=np.float64) * fps)


def timestamp_column(frame_index: np.ndarray, fps) -> np.ndarray:
    """The `timestamp` column of a data file (float32 seconds) for an episode's `frame_index` column."""
    return (frame_index / fps).astype(np.float32)


def off_grid(seconds, frames, fps, tolerance_s: float) -> np.ndarray:
    """True where `seconds` is farther than `tolerance_s` from the time of `frames` at `fps`."""
    return np.abs(seconds - frames_to_seconds(frames, fps)) > tolerance_s


def end_clamp_s(fps, tolerance_s: float) -> float:
    """How far past a video file's last frame a query is still clamped to it (END_CLAMP_FRAMES frames at
    `fps`, the file's frame rate, plus the tolerance)."""
    return END_CLAMP_FRAMES / fps + tolerance_s


def span_window(
    from_s: float, to_s: float, frame_s: float, before: int = SPAN_FRAMES_BEFORE, after: int = SPAN_FRAMES_AFTER
) -> tuple[float, float]:
    """[lo, hi] seconds of the video samples an episode spanning [from_s, to_s] in its file may be decoded
    from (frames of `frame_s` seconds): `before` frames earlier and `after` frames later, plus TIME_EPS_S."""
    return from_s - before * frame_s - TIME_EPS_S, to_s + after * frame_s + TIME_EPS_S


def resampled_lengths(lengths, fps: int, target_fps: int) -> np.ndarray:
    """Frames of episodes of `lengths` frames at `fps` resampled to `target_fps`: target frame j lies at j /
    target_fps, and an episode keeps those up to its last frame's time (n - 1) / fps, so ``(n - 1) * target_fps //
    fps + 1`` frames (0 for an empty episode). Integer arithmetic: no float rounding decides a length."""
    n = np.asarray(lengths, dtype=np.int64)
    return np.where(n > 0, (n - 1) * int(target_fps) // int(fps) + 1, 0).astype(np.int64)


def resample_grid(frames, fps: int, target_fps: int) -> tuple[np.ndarray, np.ndarray]:
    """Where target frames `frames` (frame numbers in an episode at `target_fps`) lie on the episode's own grid of
    `fps`: ``(lo, num)`` with target frame j at source position ``lo + num / target_fps`` (source frame ``lo``, then
    ``num / target_fps`` of a frame towards the next; ``0 <= num < target_fps``), exactly: ``j * fps =
    lo * target_fps + num``."""
    j = np.asarray(frames, dtype=np.int64)
    return np.divmod(j * int(fps), int(target_fps))
