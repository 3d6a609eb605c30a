"""How decoded frames come out: size (the file's, or resized in the colour-conversion pass), resize mode,
dtype and layout, and the one function that writes a decoded frame into its slot of a batch.

A frame's pixels are, by definition, PyAV's ``frame.to_ndarray(format="rgb24")`` (channels moved first, and
for float32 divided by 255 bit-identically to LeRobot's ``x.float() / 255``). Where swscale's planar RGB
("gbrp") output equals its "rgb24" output, frames are converted straight to gbrp, so a channels-first slot gets
each colour plane with one contiguous copy (uint8) or one conversion pass to float32: no HWC->CHW transpose and
no intermediate RGB image (~5x less conversion work at 480x640). It does not always: FFmpeg 7-8's SIMD
yuv->gbrp leaves the last ``width % 16`` columns unwritten for widths whose remainder is 1..8 (40, 56, 424,
600, ...), and 10-bit and NV12 sources round differently. So `planar_exact` checks, once per process and
source geometry (pixel format, colorspace, range, size), that gbrp equals rgb24 on a frame of random pixels;
where it does not, the frame goes through rgb24 and a strided copy. With `size`, swscale scales in the
conversion to gbrp (its scaling path writes every column at any width; tested at odd widths):

* ``"stretch"``: the frame is scaled to exactly (H, W), aspect ratio not kept.
* ``"letterbox"``: scaled to the largest size that fits in (H, W) with the aspect ratio kept (each side
  rounded to the nearest pixel), centred, the rest zeros (black).

Scaling uses swscale's bilinear filter, which widens with the scale factor when shrinking (antialiased, like
torchvision's ``resize(..., antialias=True)``). Items are LeRobot's item resized by torchvision within a
tolerance, not bit-identical: swscale scales the recorded YUV planes (chroma at its 4:2:0 resolution) before
converting to RGB, torchvision scales the RGB image. The tolerance (tested): mean absolute difference under
2/255 and 99th percentile under 6/255 on float frames in [0, 1]. Measured: 480x640 AV1 frames to 224x224
mean 0.003, 99th percentile 0.011; the 96x128 test fixture up to 224x224 mean 0.0047, 99th percentile 0.017;
single pixels on sharp colour edges differ by up to ~0.35.

A depth camera's frames (`FrameOutput.depth`: its `format.depth.DepthCoding`) are its 12-bit codes, read from the
decoded ``gray12le`` picture as they are (bit-identical to PyAV's ``frame.to_ndarray(format="gray12le")``; a
picture of another pixel format is converted to it first, as that call does), then dequantised to float32
distances in `FrameOutput.depth_unit` ((1, H, W)); resized, they take each output pixel's nearest source pixel
(no depth is made up between two surfaces), letterbox bars are 0.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import av
import numpy as np
from av.video.reformatter import Interpolation, VideoReformatter

from .. import runtime
from ..format.depth import DEPTH_UNITS, PIX_FMT, DepthCoding

RESIZE_MODES = ("stretch", "letterbox")
DTYPES = ("uint8", "float32")
MAX_SIDE = 16384
_FLOAT_SCALE = np.float32(255)


def check_image_size(image_size, resize_mode: str = "stretch") -> tuple[int, int] | None:
    """`image_size` as (H, W) ints, or None; raises ValueError stating the allowed values."""
    if resize_mode not in RESIZE_MODES:
        raise ValueError(f"resize_mode must be one of {RESIZE_MODES}, got {resize_mode!r}")
    if image_size is None:
        return None
    try:
        h, w = image_size
    except (TypeError, ValueError):
        raise ValueError(f"image_size must be (height, width), two ints in 1..{MAX_SIDE}, got {image_size!r}") from None
    for v in (h, w):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= MAX_SIDE:
            raise ValueError(f"image_size must be (height, width), two ints in 1..{MAX_SIDE}, got {image_size!r}")
    return int(h), int(w)


@dataclass(frozen=True)
class FrameOutput:
    """The frames a decoder writes: `size` (H, W) or None for the file's own size, `resize_mode`
    (RESIZE_MODES), `dtype` ("uint8", or "float32" in [0, 1]) and `channels_first` ((3, H, W), else (H, W, 3)).
    With `depth` (a depth camera's coding): its distances, float32 in `depth_unit`, one channel."""

    size: tuple[int, int] | None = None
    resize_mode: str = "stretch"
    dtype: str = "uint8"
    channels_first: bool = True
    depth: DepthCoding | None = None
    depth_unit: str = "mm"

    def __post_init__(self):
        object.__setattr__(self, "size", check_image_size(self.size, self.resize_mode))
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.depth_unit not in DEPTH_UNITS:
            raise ValueError(f"depth_unit must be one of {DEPTH_UNITS}, got {self.depth_unit!r}")
        if self.depth is not None and self.dtype != "float32":
            raise ValueError("depth frames are float32 distances")

    def frame_hw(self, src_hw: tuple[int, int]) -> tuple[int, int]:
        """(H, W) of an output frame for a source of `src_hw`."""
        if self.size is not None:
            return self.size
        h, w = src_hw
        return h, w

    @property
    def channels(self) -> int:
        return 1 if self.depth is not None else 3

    def shape(self, src_hw: tuple[int, int]) -> tuple[int, int, int]:
        h, w = self.frame_hw(src_hw)
        return (self.channels, h, w) if self.channels_first else (h, w, self.channels)

    def placement(self, src_hw: tuple[int, int]) -> tuple[int, int, int, int]:
        """(height, width, top, left) of the scaled picture inside an output frame."""
        sh, sw = src_hw
        if self.size is None:
            return sh, sw, 0, 0
        H, W = self.size
        if self.resize_mode == "stretch":
            return H, W, 0, 0
        scale = min(H / sh, W / sw)
        h, w = min(H, max(1, round(sh * scale))), min(W, max(1, round(sw * scale)))
        return h, w, (H - h) // 2, (W - w) // 2


def write_frame(frame, dest: np.ndarray, out: FrameOutput) -> None:
    """Write a decoded PyAV frame into `dest` (one slot of `out.shape(...)` and `out.dtype`)."""
    src_hw = (frame.height, frame.width)
    h, w, top, left = out.placement(src_hw)
    scaled = (h, w) != src_hw
    if out.depth is not None:
        _write_depth(frame, dest, out, (h, w, top, left))
        return
    if out.channels_first and (scaled or planar_exact(frame)):
        for c, p in zip((1, 2, 0), _reformat(frame, "gbrp", h, w, scaled).planes):  # g, b, r
            _put(_rows(p, h, w), dest[c, top : top + h, left : left + w])
    else:
        rgb = _rows(_reformat(frame, "rgb24", h, w, scaled).planes[0], h, w * 3).reshape(h, w, 3)
        if out.channels_first:
            _put(rgb.transpose(2, 0, 1), dest[:, top : top + h, left : left + w])
        else:
            _put(rgb, dest[top : top + h, left : left + w])
    axis = 1 if out.channels_first else 0
    if (h, w) != dest.shape[axis : axis + 2]:
        _zero_border(dest, top, left, h, w, axis=axis)


def depth_codes(frame) -> np.ndarray:
    """A depth frame's 12-bit codes (H, W) uint16: a view of its ``gray12le`` plane (a frame of another pixel
    format converted to it first), the values of PyAV's ``frame.to_ndarray(format="gray12le")``."""
    if frame.format.name != PIX_FMT:
        frame = _reformat(frame, PIX_FMT, frame.height, frame.width, False)
    plane = frame.planes[0]
    return np.frombuffer(plane, "<u2").reshape(frame.height, plane.line_size // 2)[:, : frame.width]


def _write_depth(frame, dest: np.ndarray, out: FrameOutput, place: tuple) -> None:
    h, w, top, left = place
    codes = depth_codes(frame)
    sh, sw = codes.shape
    if (h, w) != (sh, sw):  # each output pixel takes its nearest source pixel
        rows = np.minimum(((np.arange(h) + 0.5) * (sh / h)).astype(np.int64), sh - 1)
        cols = np.minimum(((np.arange(w) + 0.5) * (sw / w)).astype(np.int64), sw - 1)
        codes = codes[rows[:, None], cols[None, :]]
    plane = dest[0] if out.channels_first else dest[..., 0]
    assert out.depth is not None, "a depth camera's output"
    out.depth.dequantise(codes, plane[top : top + h, left : left + w], out.depth_unit)
    if (h, w) != plane.shape:
        _zero_border(plane, top, left, h, w, axis=0)


def planar_exact(frame) -> bool:
    """Whether swscale's gbrp output of frames like `frame` (pixel format, colorspace, range, size) at their own
    size equals its rgb24 output, checked once per process on a frame of random pixels (see the module docstring).
    """
    key = (
        frame.format.name,
        getattr(frame, "colorspace", None),
        getattr(frame, "color_range", None),
        frame.height,
        frame.width,
    )
    exact = _PLANAR_EXACT.get(key)
    if exact is None:
        exact = _PLANAR_EXACT[key] = _probe_planar(key)
    return exact


def _probe_planar(key: tuple) -> bool:
    fmt, colorspace, color_range, h, w = key
    probe = av.VideoFrame(w, h, fmt)
    for attr, value in (("colorspace", colorspace), ("color_range", color_range)):
        if value is not None:
            setattr(probe, attr, value)
    rng = np.random.default_rng(0)
    for p in probe.planes:
        np.frombuffer(memoryview(p), np.uint8)[:] = rng.integers(0, 256, p.buffer_size, dtype=np.uint8)
    planes = [_rows(p, h, w) for p in _reformat(probe, "gbrp", h, w, False).planes]
    rgb = _rows(_reformat(probe, "rgb24", h, w, False).planes[0], h, w * 3).reshape(h, w, 3)
    return all(np.array_equal(planes[p], rgb[..., c]) for c, p in ((0, 2), (1, 0), (2, 1)))


_PLANAR_EXACT: dict[tuple, bool] = {}  # `planar_exact`'s verdicts in this process


def _rows(plane, h: int, nbytes: int) -> np.ndarray:
    """The first `nbytes` bytes of each of a plane's `h` rows (rows are `line_size` apart)."""
    return np.frombuffer(plane, np.uint8).reshape(h, plane.line_size)[:, :nbytes]


def unit_float_into(src: np.ndarray, dst: np.ndarray) -> None:
    """uint8 `src` -> float32 `dst` in [0, 1]: u8 -> f32 then / 255 in float32, bit-identical to torch's
    ``x.float() / 255`` (LeRobot's conversion). The one place frames become float on the CPU."""
    np.divide(src, _FLOAT_SCALE, out=dst, dtype=np.float32)


def _put(src: np.ndarray, dst: np.ndarray) -> None:
    if dst.dtype == np.uint8:
        np.copyto(dst, src)
    else:
        unit_float_into(src, dst)


def _zero_border(dest: np.ndarray, top: int, left: int, h: int, w: int, axis: int) -> None:
    """Zero what lies outside the picture (letterbox bars): the slot may hold an earlier batch's pixels."""
    rows = (slice(None),) * axis
    dest[rows + (slice(0, top),)] = 0
    dest[rows + (slice(top + h, None),)] = 0
    dest[rows + (slice(top, top + h), slice(0, left))] = 0
    dest[rows + (slice(top, top + h), slice(left + w, None))] = 0


def _reformat(frame, fmt: str, h: int, w: int, scaled: bool):
    """The frame in `fmt` at (h, w), converted on this thread (swscale's own threads would compete with the
    decode threads) by this thread's reformatter for the conversion (`_reformatter`). PyAV < 16 has no `threads`
    argument; its reformat is single-threaded anyway."""
    reformatter = _reformatter(frame, fmt, h, w)
    kwargs: dict[str, Any] = {"format": fmt, "width": w, "height": h}
    if scaled:
        kwargs["interpolation"] = Interpolation.BILINEAR
    if _THREADS_ARG[0]:
        try:
            return reformatter.reformat(frame, threads=1, **kwargs)
        except TypeError as e:
            if "threads" not in str(e):
                raise
            _THREADS_ARG[0] = False
    return reformatter.reformat(frame, **kwargs)


_THREADS_ARG = [True]  # False once PyAV has said it takes no `threads` argument


def _reformatter(frame, fmt: str, h: int, w: int) -> VideoReformatter:
    """This thread's reformatter for converting frames like `frame` to `fmt` at (h, w) (`_Reformatters`)."""
    key = (frame.format.name, frame.width, frame.height, frame.colorspace, frame.color_range, fmt, h, w)
    return _REFORMATTERS.get(key)


class _Reformatters:
    """Each thread's reformatters, one per kind of conversion, not one per file: a mixture's batch converts one frame
    from each of many files, and a reformatter that converts every frame of its kind keeps its swscale context in the
    CPU's caches (one per file found it cold for each frame, ~3 us more per frame at 96x128, and held ~0.1 MB per
    open file). Keyed by the source's colorspace and range too: PyAV < 17 (swscale's cached contexts) keeps colour
    details set on a context for later calls. A forked child starts with none (its parent's are kept, never freed
    there, as every FFmpeg object a parent made)."""

    MAX = 64  # kinds per thread (a mixture of many camera sizes starts over rather than grow)

    def __init__(self) -> None:
        self._local = threading.local()
        runtime.after_fork(self)

    def _after_fork(self) -> None:
        runtime.keep_inherited(self._local)
        self._local = threading.local()

    def get(self, key: tuple) -> VideoReformatter:
        cache: dict[tuple, VideoReformatter] | None = getattr(self._local, "by_kind", None)
        if cache is None:
            cache = self._local.by_kind = {}
        r = cache.get(key)
        if r is None:
            if len(cache) >= self.MAX:
                cache.clear()
            r = cache[key] = VideoReformatter()
        return r


_REFORMATTERS = _Reformatters()
