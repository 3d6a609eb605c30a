"""Window arithmetic: offsets, clamping at episode edges and pad masks (the contract's pinned examples)."""

import numpy as np
import pytest

from episodic.tabular import delta_offsets, window_rows


def test_pinned_example_fps10_five_frame_episodes():
    off = delta_offsets({"x": [-0.2, -0.1, 0, 0.1, 0.2]}, fps=10, tolerance_s=1e-4)["x"]
    assert off.tolist() == [-2, -1, 0, 1, 2]
    start, end = np.array([5, 5]), np.array([10, 10])
    q, pad = window_rows(np.array([5, 9]), start, end, off)
    assert pad[0].tolist() == [True, True, False, False, False]
    assert pad[1].tolist() == [False, False, False, True, True]
    assert q[0].tolist() == [5, 5, 5, 6, 7]  # edge frame repeated
    assert q[1].tolist() == [7, 8, 9, 9, 9]


def test_window_inside_episode_has_no_padding():
    q, pad = window_rows(np.array([12]), np.array([10]), np.array([20]), np.array([-2, 0, 3]))
    assert q.tolist() == [[10, 12, 15]] and not pad.any()


def test_single_frame_episode_every_offset_but_zero_is_pad():
    q, pad = window_rows(np.array([4]), np.array([4]), np.array([5]), np.array([-1, 0, 1]))
    assert q.tolist() == [[4, 4, 4]] and pad.tolist() == [[True, False, True]]


def test_non_multiple_of_frame_period_is_rejected_with_key_and_values():
    with pytest.raises(ValueError, match=r"action.*0\.05"):
        delta_offsets({"action": [0.0, 0.05]}, fps=10, tolerance_s=1e-4)


def test_unknown_key_is_rejected():
    with pytest.raises(ValueError, match="nope"):
        delta_offsets({"nope": [0.0]}, fps=10, tolerance_s=1e-4, known_keys=["action"])


def test_within_tolerance_rounds_to_nearest_frame():
    assert delta_offsets({"a": [0.03333, -0.0666667]}, fps=30, tolerance_s=1e-4)["a"].tolist() == [1, -2]


def test_window_rows_equals_a_row_by_row_reference_on_random_episodes():
    rng = np.random.default_rng(0)
    for _ in range(50):
        lengths = rng.integers(1, 8, size=6)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        ep = rng.integers(0, 6, size=20)
        rows = starts[ep] + rng.integers(0, lengths[ep])
        offsets = np.sort(rng.integers(-5, 6, size=4))
        q, pad = window_rows(rows, starts[ep], ends[ep], offsets)
        for b, r in enumerate(rows):
            for t, o in enumerate(offsets):
                lo, hi = starts[ep[b]], ends[ep[b]] - 1
                assert q[b, t] == min(max(r + o, lo), hi)
                assert pad[b, t] == (not lo <= r + o <= hi)


def test_window_rows_with_each_rows_own_offsets_equals_one_row_at_a_time():
    """(B, T) offsets (a mixture's rows, each on its entry's fps grid): row b's window is the one of its offsets."""
    rng = np.random.default_rng(1)
    for _ in range(30):
        lengths = rng.integers(1, 9, size=5)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        ep = rng.integers(0, 5, size=12)
        rows = starts[ep] + rng.integers(0, lengths[ep])
        offsets = np.sort(rng.integers(-6, 7, size=(12, 3)), axis=1)
        q, pad = window_rows(rows, starts[ep], ends[ep], offsets)
        for b in range(12):
            qb, pb = window_rows(rows[b : b + 1], starts[ep][b : b + 1], ends[ep][b : b + 1], offsets[b])
            assert q[b].tolist() == qb[0].tolist() and pad[b].tolist() == pb[0].tolist()
