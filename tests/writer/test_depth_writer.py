"""The writer's depth cameras (LeRobot 0.6's layout): info.json says what LeRobot 0.6.1 writes for one (is_depth_map,
depth_unit, the quantisation, HEVC gray12le lossless), the statistics are the distances given in their unit, and bad
depth input is refused naming the episode and the camera."""

from __future__ import annotations

import json

import numpy as np
import pytest

from episodic import DatasetWriter
from episodic.format.errors import WriterInputError

H, W = 16, 64


def _features(info=None, shape=(H, W, 1)):
    return {
        "observation.images.d": {
            "dtype": "video",
            "shape": list(shape),
            "info": {"is_depth_map": True, **(info or {})},
        },
        "action": {"dtype": "float32", "shape": [1]},
    }


@pytest.mark.parametrize("unit", ["m", "mm"])
def test_info_and_stats_of_a_depth_camera(tmp_path, unit):
    info = {"video.use_log": False, "video.depth_max": 3.0} if unit == "m" else {"depth_unit": "mm"}
    depth = np.linspace(0.1, 2.9, 5 * H * W, dtype=np.float32).reshape(5, H, W, 1)
    given = depth if unit == "m" else np.round(depth * 1000).astype(np.uint16)
    with DatasetWriter(tmp_path / "ds", fps=10, features=_features(info), fsync=False) as w:
        w.add_episode({"observation.images.d": given, "action": np.zeros((5, 1), np.float32)}, task="t")
    got = json.loads((tmp_path / "ds" / "meta" / "info.json").read_text())["features"]["observation.images.d"]
    assert got["shape"] == [H, W, 1]
    i = got["info"]
    assert i["is_depth_map"] is True and i["depth_unit"] == unit  # metres unless told
    assert (i["video.codec"], i["video.pix_fmt"], i["video.channels"]) == ("hevc", "gray12le", 1)
    assert i["video.extra_options"] == {"x265-params": "lossless=1"}
    want = {
        "video.depth_min": 0.01,
        "video.depth_max": 3.0 if unit == "m" else 10.0,
        "video.shift": 3.5,
        "video.use_log": unit == "mm",
    }
    assert {k: i[k] for k in want} == want
    stats = json.loads((tmp_path / "ds" / "meta" / "stats.json").read_text())["observation.images.d"]
    assert np.allclose(stats["mean"], [[[given.astype(np.float64).mean()]]])
    assert np.allclose(stats["max"], [[[given.max()]]])


@pytest.mark.parametrize(
    "info,value,match",
    [
        ({}, np.zeros((3, H, W, 1), np.uint16), r"depth_unit 'm' needs float metres"),
        ({"depth_unit": "mm"}, np.zeros((3, H, W, 1), np.float32), r"depth_unit 'mm' needs integer millimetres"),
        ({}, np.zeros((3, H, W, 3), np.float32), r"of shape \(T, 16, 64, 1\)"),
        ({}, np.full((3, H, W), np.nan, np.float32), r"depth values must be finite"),
    ],
)
def test_bad_depth_input_is_refused_naming_episode_and_camera(tmp_path, info, value, match):
    with DatasetWriter(tmp_path / "ds", fps=10, features=_features(info), fsync=False) as w:
        with pytest.raises(WriterInputError, match=rf"episode 0.*observation.images.d.*{match}"):
            w.add_episode({"observation.images.d": value, "action": np.zeros((3, 1), np.float32)}, task="t")
        w.add_episode(
            {
                "observation.images.d": np.ones((3, H, W), np.float32) if not info else np.ones((3, H, W), np.uint16),
                "action": np.zeros((3, 1), np.float32),
            },
            task="t",
        )


def test_a_depth_camera_of_three_channels_is_refused(tmp_path):
    with pytest.raises(
        WriterInputError, match=r"observation.images.d.*a depth camera needs shape \[height, width, 1\]"
    ):
        DatasetWriter(tmp_path / "ds", fps=10, features=_features(shape=(H, W, 3)))
    with pytest.raises(WriterInputError, match=r"or \[height, width, 1\] with info.is_depth_map"):
        DatasetWriter(tmp_path / "ds", fps=10, features={"c": {"dtype": "video", "shape": [H, W, 1]}})
