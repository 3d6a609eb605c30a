"""Depth cameras (LeRobot 0.6) in items: float32 (1, H, W) distances in `depth_output_unit`, equal to the dequantised
codes PyAV decodes from the files episodic's writer made; map-style, streaming and inside a mixture; `return_uint8`
and image transforms leave them alone; their statistics in the items' unit; a camera of a kind episodic does not
read, and a mixture role that is a depth camera in one entry and a colour camera in another, refused up front."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from episodic import EpisodicDataset, LeRobotDataset, StreamingLeRobotDataset
from episodic.datasets.mixture import MixtureDataset
from episodic.format.depth import DepthCoding
from episodic.format.errors import DatasetFormatError, MixtureLayoutError
from episodic.mixture import MixtureSpec

from support import DEPTH_CODINGS

DEPTH = "observation.images.depth"
DEPTH_MM = "observation.images.depth_mm"
RGB = "observation.images.rgb"


def _want(root: Path, unit: str) -> dict[str, np.ndarray]:
    """Each depth camera's frames (N, H, W) in `unit`: PyAV's own gray12le decode, dequantised by LeRobot 0.6.1's
    formulas (tests/format/test_depth.py checks `DepthCoding.dequantise` against them)."""
    info = json.loads((root / "meta" / "info.json").read_text())["features"]
    out = {}
    for key in DEPTH_CODINGS:
        (path,) = sorted((root / "videos" / key).rglob("*.mp4"))
        with av.open(str(path)) as c:
            codes = np.stack([f.to_ndarray(format="gray12le") for f in c.decode(video=0)])
        out[key] = np.empty(codes.shape, np.float32)
        DepthCoding.from_info(info[key]["info"], key).dequantise(codes, out[key], unit)
    return out


def _check_depth(item: dict, want: dict, index: int, unit: str) -> None:
    for key in DEPTH_CODINGS:
        v = item[key]
        assert v.dtype == torch.float32 and tuple(v.shape) == (1, 48, 64), (key, v.dtype, v.shape)
        assert torch.equal(v[0], torch.from_numpy(want[key][index])), (key, index)
    if unit == "mm":
        assert float(item[DEPTH].max()) > 100  # millimetres, not metres


@pytest.mark.parametrize("unit", ["mm", "m"])
def test_map_style_items_are_dequantised_distances(depth_root, unit):
    want = _want(depth_root, unit)
    ds = LeRobotDataset("depth", root=depth_root, **({} if unit == "mm" else {"depth_output_unit": unit}))
    assert ds.depth_output_unit == unit and ds.depth_keys == [DEPTH, DEPTH_MM] == ds.meta.depth_keys
    assert ds.camera_keys == [RGB, DEPTH, DEPTH_MM]
    for i in range(len(ds)):
        item = ds[i]
        _check_depth(item, want, int(item["index"]), unit)
        assert item[RGB].shape == (3, 48, 64) and item[RGB].dtype == torch.float32
    batch = ds.get_batch(np.array([0, 20, 33]))
    assert batch[DEPTH].shape == (3, 1, 48, 64) and torch.equal(batch[DEPTH][1, 0], torch.from_numpy(want[DEPTH][20]))


def test_windows_of_a_depth_camera(depth_root):
    want = _want(depth_root, "mm")
    ds = EpisodicDataset(depth_root, delta_timestamps={DEPTH: [-0.2, 0.0, 0.1]})
    item = ds[9]  # episode 1's first frame: its step 0.2 s before is padding
    v = item[DEPTH]
    assert v.shape == (3, 1, 48, 64) and v.dtype == torch.float32
    assert item[f"{DEPTH}_is_pad"].tolist() == [True, False, False]
    for t, row in enumerate([9, 9, 10]):  # padding repeats the episode's first frame, as LeRobot's
        assert torch.equal(v[t, 0], torch.from_numpy(want[DEPTH][row]))


def test_stats_are_in_the_items_unit(depth_root):
    raw = json.loads((depth_root / "meta" / "stats.json").read_text())
    for unit, factor in (("mm", 1000.0), ("m", 1.0)):
        ds = EpisodicDataset(depth_root, depth_output_unit=unit)
        got = ds.meta.stats[DEPTH]
        assert np.allclose(got["mean"], np.asarray(raw[DEPTH]["mean"]) * factor)  # recorded in metres
        assert np.array_equal(got["count"], np.asarray(raw[DEPTH]["count"]))
        mm = ds.meta.stats[DEPTH_MM]  # recorded in millimetres
        assert np.allclose(mm["max"], np.asarray(raw[DEPTH_MM]["max"]) * (1.0 if unit == "mm" else 1e-3))
    assert 1.0 < np.asarray(raw[DEPTH]["mean"]).item() < 12.0  # the writer's stats: the distances given, in metres


def test_return_uint8_and_transforms_leave_depth_alone(depth_root):
    plain = EpisodicDataset(depth_root)
    seen = []

    def transform(x):
        seen.append(tuple(x.shape))
        return x.flip(-1)

    for kwargs in ({"return_uint8": True}, {"image_transforms": transform}):
        ds = EpisodicDataset(depth_root, **kwargs)
        for i in (0, 17):
            item, ref = ds[i], plain[i]
            for key in DEPTH_CODINGS:
                assert item[key].dtype == torch.float32 and torch.equal(item[key], ref[key]), (kwargs, key)
            if "return_uint8" in kwargs:
                assert item[RGB].dtype == torch.uint8
            else:
                assert torch.equal(item[RGB], ref[RGB].flip(-1))
    assert seen and set(seen) == {(3, 48, 64)}  # the transform saw the colour camera only
    loader = torch.utils.data.DataLoader(EpisodicDataset(depth_root, return_uint8=True), batch_size=5, num_workers=0)
    batch = next(iter(loader))
    assert batch[DEPTH].dtype == torch.float32 and torch.equal(batch[DEPTH][3], plain[3][DEPTH])


@pytest.mark.parametrize("unit", ["mm", "m"])
def test_streaming_items_are_dequantised_distances(depth_root, tmp_path, unit):
    want = _want(depth_root, unit)
    ds = StreamingLeRobotDataset(
        "depth",
        root=depth_root,
        cache_dir=tmp_path,
        depth_output_unit=unit,
        return_uint8=True,
        image_transforms=lambda x: x.flip(-1),
    )
    assert ds.depth_keys == [DEPTH, DEPTH_MM]
    seen = set()
    for item in ds:
        index = int(item["index"])
        seen.add(index)
        _check_depth(item, want, index, unit)
        assert item[RGB].dtype == torch.uint8
    assert seen == set(range(34))


def test_mixture_items_and_a_role_of_two_kinds_refused(depth_root, small_root, tmp_path):
    want = _want(depth_root, "m")
    spec = MixtureSpec.from_dict(
        {
            "entries": [
                {
                    "source": str(depth_root),
                    "name": "depth",
                    "roles": {"front": RGB, "depth": DEPTH, "state": "observation.state", "action": "action"},
                },
                {"source": str(small_root), "name": "rgb-only"},
            ]
        }
    )
    ds = MixtureDataset(
        spec,
        image_size=(48, 64),
        cache_dir=tmp_path,
        depth_output_unit="m",
        return_uint8=True,
        image_transforms=lambda x: x.flip(-1),
    )
    key = "observation.images.depth"
    assert ds.depth_keys == [key]
    n_depth = 0
    for i in range(len(ds)):
        item = ds[i]
        v = item[key]
        assert v.dtype == torch.float32 and v.shape == (1, 48, 64)
        if item["dataset_name"] == "depth":
            assert torch.equal(v[0], torch.from_numpy(want[DEPTH][int(item["index"])]))
            n_depth += 1
        else:  # an entry without the camera: zeros, padded
            assert not v.any() and bool(item[f"{key}_is_pad"])
        assert item["observation.images.front"].dtype == torch.uint8
    assert n_depth == 34
    raw = json.loads((depth_root / "meta" / "stats.json").read_text())[DEPTH]  # recorded in metres
    stats = ds.entry_stats()[0][key]
    assert np.allclose(stats["mean"], raw["mean"]) and np.allclose(stats["max"], raw["max"])
    in_mm = MixtureDataset(spec, image_size=(48, 64), cache_dir=tmp_path).entry_stats()[0][key]  # the default unit
    assert np.allclose(in_mm["mean"], np.asarray(raw["mean"]) * 1000)
    mixed = MixtureSpec.from_dict(
        {
            "entries": [
                {"source": str(depth_root), "name": "depth", "roles": {"front": DEPTH}},
                {"source": str(small_root), "name": "rgb-only", "roles": {"front": "observation.images.top"}},
            ]
        }
    )
    with pytest.raises(
        MixtureLayoutError,
        match=r"role 'front' is a depth camera in 1 entry \('depth'\) and a colour "
        r"camera in 1 \('rgb-only'\)",
    ):
        MixtureDataset(mixed, image_size=(48, 64), cache_dir=tmp_path)


def _edited(src: Path, dst: Path, key: str, **changes) -> Path:
    shutil.copytree(src, dst)
    info_path = dst / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["features"][key].update(changes)
    info_path.write_text(json.dumps(info))
    return dst


def test_a_camera_of_a_kind_episodic_does_not_read_is_refused(depth_root, tmp_path):
    four = _edited(depth_root, tmp_path / "four", RGB, shape=[48, 64, 4])  # RGBA: not frames of another shape
    for make in (lambda r: EpisodicDataset(r), lambda r: StreamingLeRobotDataset("x", root=r, cache_dir=tmp_path)):
        with pytest.raises(DatasetFormatError, match=rf"{four}: meta/info.json: camera '{RGB}' has 4 channels"):
            make(four)
    three = _edited(depth_root, tmp_path / "three", DEPTH, shape=[48, 64, 3])
    with pytest.raises(DatasetFormatError, match=rf"depth camera '{DEPTH}' has 3 channels; a depth map has 1"):
        EpisodicDataset(three)
    bad = _edited(depth_root, tmp_path / "bad", DEPTH, info={"is_depth_map": True, "video.use_log": "yes"})
    with pytest.raises(DatasetFormatError, match=rf"feature '{DEPTH}'.*'info.video.use_log' must be true or false"):
        EpisodicDataset(bad)
    with pytest.raises(ValueError, match="depth_output_unit must be one of 'm', 'mm'"):
        EpisodicDataset(depth_root, depth_output_unit="cm")
    ok = EpisodicDataset(depth_root, video_keys=[RGB])  # the depth cameras left out: no depth item
    assert ok.depth_keys == [] and DEPTH not in ok[0]
