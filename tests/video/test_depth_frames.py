"""Depth cameras written by episodic's writer (HEVC gray12le, lossless) and read back: the 12-bit codes equal PyAV's
own ``frame.to_ndarray(format="gray12le")`` and the codes the writer was given; the frames handed out are their
dequantised distances (video/output.py)."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pytest

from episodic.format.depth import DepthCoding
from episodic.video.output import FrameOutput, depth_codes, write_frame

from support import DEPTH_CODINGS, depth_frames

KEYS = list(DEPTH_CODINGS)


def _pyav_codes(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="gray12le") for f in c.decode(video=0)]


def _coding(root: Path, key: str) -> DepthCoding:
    info = json.loads((root / "meta" / "info.json").read_text())["features"][key]["info"]
    return DepthCoding.from_info(info, key)


@pytest.mark.parametrize("key", KEYS)
def test_written_depth_video_is_lossless_gray12le_hevc(depth_root, key):
    (path,) = sorted((depth_root / "videos" / key).rglob("*.mp4"))
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        assert (s.codec_context.name, s.codec_context.pix_fmt) == ("hevc", "gray12le")
    codes = _pyav_codes(path)
    assert len(codes) == 9 + 14 + 11
    coding = _coding(depth_root, key)
    given = np.concatenate([depth_frames(48, 64, n, e) for e, n in enumerate((9, 14, 11))])[..., 0]
    unit = DEPTH_CODINGS[key].get("depth_unit", "m")
    want = coding.quantise(given if unit == "m" else np.round(given * 1000).astype(np.uint16), unit)
    assert np.array_equal(np.stack(codes), want)  # lossless: the codes the writer was given
    assert want.min() == 0 and want.max() == 4095  # the clamped ends are in the data


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("unit", ["m", "mm"])
def test_decoded_codes_and_distances_equal_pyavs_own(depth_root, key, unit):
    (path,) = sorted((depth_root / "videos" / key).rglob("*.mp4"))
    coding = _coding(depth_root, key)
    want_codes = _pyav_codes(path)
    out = FrameOutput(dtype="float32", depth=coding, depth_unit=unit)
    with av.open(str(path)) as c:
        for i, frame in enumerate(c.decode(video=0)):
            assert np.array_equal(depth_codes(frame), want_codes[i])
            dest = np.full(out.shape((48, 64)), np.nan, np.float32)
            write_frame(frame, dest, out)
            want = np.empty((48, 64), np.float32)
            coding.dequantise(want_codes[i], want, unit)
            assert dest.shape == (1, 48, 64) and np.array_equal(dest[0], want)


def test_a_depth_frame_of_another_pixel_format_is_converted_as_pyav_does():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 4096, size=(10, 14), dtype=np.uint16)
    frame = av.VideoFrame.from_ndarray(codes, format="gray12le").reformat(format="gray16le")
    got = depth_codes(frame)
    assert np.array_equal(got, frame.to_ndarray(format="gray12le"))


def test_a_resized_depth_frame_takes_the_nearest_source_pixel_and_letterbox_bars_are_zero():
    codes = np.arange(12 * 16, dtype=np.uint16).reshape(12, 16) * 20
    frame = av.VideoFrame.from_ndarray(codes, format="gray12le")
    coding = DepthCoding(use_log=False, depth_min=0.0, depth_max=4.095)  # code c -> c mm: values name their source
    out = FrameOutput(size=(6, 8), dtype="float32", depth=coding, depth_unit="mm")
    dest = np.empty(out.shape((12, 16)), np.float32)
    write_frame(frame, dest, out)
    assert np.array_equal(dest[0], codes[1::2, 1::2].astype(np.float32))  # no value made up between two pixels
    box = FrameOutput(size=(12, 8), resize_mode="letterbox", dtype="float32", depth=coding, depth_unit="mm")
    dest = np.full(box.shape((12, 16)), np.nan, np.float32)
    write_frame(frame, dest, box)
    assert np.all(dest[0, :3] == 0) and np.all(dest[0, -3:] == 0) and np.isin(dest[0, 3:-3], codes).all()


def test_depth_output_is_float32_distances_of_a_known_unit():
    with pytest.raises(ValueError, match="depth_unit"):
        FrameOutput(dtype="float32", depth=DepthCoding(), depth_unit="cm")
    with pytest.raises(ValueError, match="float32"):
        FrameOutput(dtype="uint8", depth=DepthCoding())
    assert FrameOutput(dtype="float32", depth=DepthCoding(), channels_first=False).shape((4, 6)) == (4, 6, 1)
