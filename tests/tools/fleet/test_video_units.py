"""Where a video file is cut between episodes (tools/fleet/video_units.py), on packet tables made by hand: every
episode that starts at a key frame is a unit of its own; episodes that share a group of pictures, or whose next
episode starts with pictures that refer back, stay together; packets no episode shows are dropped; units laid
out in a new file keep every frame's time relative to its episode."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from episodic.format.errors import DatasetFormatError
from episodic.tools.fleet.video_units import file_units, place_units
from episodic.writer.remux import PacketTable

FPS = 30
TB = Fraction(1, 15360)
T = 512  # ticks per frame


def table(pts, keys, dts=None) -> PacketTable:
    pts = np.asarray(pts, np.int64)
    return PacketTable(
        pts=pts,
        dts=np.asarray(pts if dts is None else dts, np.int64),
        key=np.isin(np.arange(len(pts)), keys),
        size=np.full(len(pts), 100, np.int64),
        duration=np.full(len(pts), T, np.int64),
        time_base=TB,
        params="p",
    )


def units(t, froms, lengths):
    eps = np.arange(len(froms))
    return file_units(t, "f.mp4", eps, np.asarray(froms, float) / FPS, np.asarray(lengths), FPS, "f.mp4 (camera 'c')")


def test_an_episode_starting_at_a_key_frame_is_a_unit():
    t = table(np.arange(12) * T, keys=[0, 2, 4, 6, 8, 10])
    us = units(t, [0, 4, 8], [4, 4, 4])
    assert [(u.episodes, u.start, u.stop) for u in us] == [([0], 0, 4), ([1], 4, 8), ([2], 8, 12)]
    assert us[1].min_pts == 4 * T and us[1].end_pts == 8 * T and us[1].bytes == 400


def test_episodes_sharing_a_group_of_pictures_stay_together():
    t = table(np.arange(12) * T, keys=[0, 8])  # episode 1 starts at packet 4, inside the group from packet 0
    us = units(t, [0, 4, 8], [4, 4, 4])
    assert [(u.episodes, u.start, u.stop) for u in us] == [([0, 1], 0, 8), ([2], 8, 12)]
    # episode 2's first packet is not a key frame either: its unit starts at the last one before (packet 6),
    # which episode 1 reaches past: one unit
    assert [u.episodes for u in units(table(np.arange(12) * T, keys=[0, 6]), [0, 4, 7], [4, 3, 5])] == [[0, 1, 2]]


def test_a_leading_picture_after_the_key_frame_keeps_the_episodes_together():
    # decode order: ... I(4) B(3) P(5) ...: the B frame after the key frame shows episode 0's last frame
    pts = np.array([0, 1, 2, 4, 3, 5, 6, 7]) * T
    dts = np.arange(8) * T - T
    t = table(pts, keys=[0, 3], dts=dts)
    assert [u.episodes for u in units(t, [0, 4], [4, 4])] == [[0, 1]]


def test_packets_no_episode_shows_are_dropped():
    t = table(np.arange(12) * T, keys=[0, 4, 6, 8])  # packets 4, 5 shown by no episode
    us = units(t, [0, 6], [4, 6])
    assert [(u.episodes, u.start, u.stop) for u in us] == [([0], 0, 4), ([1], 6, 12)]


def test_an_episode_without_frames_is_named():
    t = table(np.arange(8) * T, keys=[0])
    with pytest.raises(DatasetFormatError, match=r"f\.mp4 \(camera 'c'\): episode 1: no frame shown"):
        units(t, [0, 20], [4, 4])


def test_placed_units_follow_each_other_and_keep_their_episodes_times():
    a = units(table(np.arange(12) * T, keys=[0, 4, 8]), [0, 4, 8], [4, 4, 4])
    b = file_units(
        table(np.arange(6) * T + 7, keys=[0], dts=np.arange(6) * T + 7 - T),
        "g.mp4",
        np.array([5]),
        np.array([7 / T / FPS]),
        np.array([6]),
        FPS,
        "g.mp4",
    )  # episode 5, off the grid
    members = [a[2], b[0], a[0]]
    shifts, times = place_units(members)
    assert shifts[0] == -8 * T  # the file's first frame at time 0
    spans = [(u.min_pts + s, u.end_pts + s, u.min_dts + s, u.max_dts + s) for u, s in zip(members, shifts)]
    for (_lo, hi, _dlo, dhi), (lo2, _, dlo2, _) in zip(spans, spans[1:]):
        assert lo2 >= hi and dlo2 > dhi  # presentation and decode times keep increasing
    assert spans[1][0] % T == 0  # a unit's first frame on the frame grid
    for u, s in zip(members, shifts):
        for e, lo in zip(u.episodes, u.from_ts):
            assert times[e][0] == pytest.approx(lo + s * float(TB), abs=1e-12)
    assert times[2][0] == 0.0 and times[2][1] == pytest.approx(4 / FPS)
