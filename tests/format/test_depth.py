"""format/depth.py: LeRobot 0.6.1's depth quantisation, against a reference written here from its formulas
(``lerobot/datasets/depth_utils.py``: ``quantize_depth`` in numpy, ``dequantize_depth``'s torch path, the one its
reader takes), and the checks of a depth feature's ``info``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from episodic.format.depth import QMAX, DepthCoding, is_depth_map, rescale_stats
from episodic.format.errors import DatasetFormatError
from episodic.format.features import Feature

CODINGS = {
    "log": DepthCoding(),  # LeRobot's defaults: 0.01 .. 10 m, shift 3.5, logarithmic
    "linear": DepthCoding(depth_min=0.2, depth_max=4.0, use_log=False),
    "log_narrow": DepthCoding(depth_min=0.05, depth_max=2.5, shift=0.5),
}


def reference_dequantize(codes: np.ndarray, c: DepthCoding, unit: str) -> np.ndarray:
    """LeRobot 0.6.1's ``dequantize_depth`` on a torch tensor of codes (its reader's path), written out."""
    if c.use_log:
        log_min, log_max = math.log(c.depth_min + c.shift), math.log(c.depth_max + c.shift)
        scale, offset = (log_max - log_min) / 4095, log_min
    else:
        scale, offset = (c.depth_max - c.depth_min) / 4095, c.depth_min
    buf = torch.from_numpy(codes.astype(np.int32)).to(torch.float32)
    buf.mul_(scale).add_(offset)
    if c.use_log:
        buf.exp_().sub_(c.shift)
    buf.clamp_(c.depth_min, c.depth_max)
    if unit == "mm":
        buf.mul_(1000.0).round_().clamp_(0.0, 65535)
    return buf.numpy()


def reference_quantize(depth: np.ndarray, c: DepthCoding, unit: str) -> np.ndarray:
    """LeRobot 0.6.1's ``quantize_depth`` (numpy, in the input's unit)."""
    k = 1.0 if unit == "m" else 1000.0
    d = depth.astype(np.float32)
    lo, hi, shift = np.float32(c.depth_min * k), np.float32(c.depth_max * k), np.float32(c.shift * k)
    if c.use_log:
        log_min, log_max = math.log(float(lo + shift)), math.log(float(hi + shift))
        norm = (np.log(d + shift) - log_min) / (log_max - log_min)
    else:
        norm = (d - lo) / (hi - lo)
    return np.rint(norm * 4095).clip(0, 4095).astype(np.uint16)


@pytest.mark.parametrize("unit", ["m", "mm"])
@pytest.mark.parametrize("name", list(CODINGS))
def test_dequantise_every_code_as_lerobot_061(name, unit):
    c = CODINGS[name]
    codes = np.arange(QMAX + 1, dtype=np.uint16).reshape(64, 64)
    got = np.full(codes.shape, np.nan, np.float32)
    c.dequantise(codes, got, unit)
    want = reference_dequantize(codes, c, unit)
    assert got.dtype == np.float32
    if unit == "mm":  # whole millimetres; a float32 ulp before rounding may move a tie by one
        assert np.array_equal(got, np.round(got))
        assert np.abs(got - want).max() <= 1 and np.mean(got != want) < 1e-3
    else:
        # float32 rounding: exp() is near depth + shift before the shift is taken off
        np.testing.assert_allclose(got, want, rtol=0, atol=4 * np.finfo(np.float32).eps * (c.depth_max + c.shift))
    lo, hi = (c.depth_min, c.depth_max) if unit == "m" else (round(c.depth_min * 1000), round(c.depth_max * 1000))
    assert got.min() == pytest.approx(lo, rel=1e-6) and got.max() == pytest.approx(hi, rel=1e-6)
    assert np.all(np.diff(got.ravel()) >= 0)  # monotonic in the code


@pytest.mark.parametrize("unit", ["m", "mm"])
@pytest.mark.parametrize("name", list(CODINGS))
def test_quantise_as_lerobot_061_and_back_within_a_step(name, unit):
    c = CODINGS[name]
    rng = np.random.default_rng(3)
    metres = rng.uniform(0.0, 12.0, size=(40, 50)).astype(np.float32)  # beyond the range on both sides: clipped
    depth = metres if unit == "m" else np.round(metres * 1000).astype(np.uint16)
    codes = c.quantise(depth, unit)
    assert codes.dtype == np.uint16 and codes.max() <= QMAX
    assert np.array_equal(codes, reference_quantize(depth, c, unit))
    back = np.empty(codes.shape, np.float32)
    c.dequantise(codes, back, "m")
    inside = (metres > c.depth_min) & (metres < c.depth_max)
    lo = np.empty(codes.shape, np.float32)
    hi = np.empty(codes.shape, np.float32)
    c.dequantise(np.maximum(codes.astype(np.int32) - 1, 0), lo, "m")
    c.dequantise(np.minimum(codes.astype(np.int32) + 1, QMAX), hi, "m")
    assert np.all((metres[inside] >= lo[inside] - 1e-3) & (metres[inside] <= hi[inside] + 1e-3))  # one step
    np.testing.assert_allclose(back[metres <= c.depth_min], c.depth_min, rtol=1e-5)


def test_info_fields_defaults_and_errors_name_the_field():
    assert DepthCoding.from_info({"is_depth_map": True}, "x") == DepthCoding()
    c = DepthCoding.from_info(
        {"video.depth_min": 0.1, "video.depth_max": 3, "video.shift": 1.0, "video.use_log": False, "depth_unit": "mm"},
        "x",
    )
    assert (c.depth_min, c.depth_max, c.shift, c.use_log, c.unit) == (0.1, 3.0, 1.0, False, "mm")
    assert DepthCoding.from_info(c.info(), "x") == c and is_depth_map(c.info())
    assert is_depth_map({"video.is_depth_map": True}) and not is_depth_map({"video.is_depth_map": False})
    for info, field in (
        ({"video.depth_max": "far"}, "info.video.depth_max"),
        ({"video.depth_min": 5.0, "video.depth_max": 1.0}, "info.video.depth_max"),
        ({"video.use_log": 1}, "info.video.use_log"),
        ({"video.depth_min": 0.0, "video.shift": 0.0}, "info.video.shift"),
        ({"depth_unit": "cm"}, "info.depth_unit"),
    ):
        with pytest.raises(DatasetFormatError, match=rf"info.json: .*'{field}'"):
            DepthCoding.from_info({"is_depth_map": True, **info}, "meta/info.json: feature 'd'")
    with pytest.raises(DatasetFormatError, match=r"feature 'observation.images.d'.*'info.video.depth_max'"):
        Feature.from_json(
            "observation.images.d",
            {"dtype": "video", "shape": [4, 4, 1], "info": {"is_depth_map": True, "video.depth_max": -1}},
        )


def test_a_camera_of_an_unknown_kind_is_a_problem_naming_it():
    def feature(dtype, c, info=None):
        return Feature.from_json("cam", {"dtype": dtype, "shape": [4, 6, c], "info": info or {}})

    assert feature("video", 3).camera_problem(3) is None and feature("video", 1).camera_problem(1) is None
    assert feature("video", 1, {"is_depth_map": True}).camera_problem(1) is None
    assert "3 channels; a depth map has 1" in feature("video", 3, {"is_depth_map": True}).camera_problem(3)
    assert "depth map stored as images" in feature("image", 1, {"is_depth_map": True}).camera_problem(1)
    for c in (2, 4):
        assert f"camera 'cam' has {c} channels" in feature("video", c).camera_problem(c)


def test_rescale_stats_as_lerobot_061():
    stats = {"d": {"mean": np.array([[[1.5]]]), "min": np.array([[[0.2]]]), "count": np.array([7])}}
    rescale_stats(stats, "d", "m", "mm")
    assert stats["d"]["mean"].item() == 1500.0 and stats["d"]["min"].item() == pytest.approx(200.0)
    assert stats["d"]["count"].item() == 7
    rescale_stats(stats, "d", "mm", "m")
    assert stats["d"]["mean"].item() == pytest.approx(1.5)
    rescale_stats(stats, "d", None, "mm")  # unit not recorded: left alone
    assert stats["d"]["mean"].item() == pytest.approx(1.5)
