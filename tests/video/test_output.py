"""How frames come out of the decoder: planar RGB equal to PyAV's rgb24, float32 equal to torch's
`x.float() / 255`, resize in the conversion pass (stretch / letterbox) close to torchvision's resize."""

from __future__ import annotations

import subprocess
import sys
import threading

import av
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from episodic.video import VideoReader
from episodic.video.output import FrameOutput, check_image_size, write_frame
from episodic.writer.video import VideoFileWriter


@pytest.fixture(scope="module", params=["av1", "h264"])
def noise_video(request, tmp_path_factory):
    """Noise with sharp colour edges (the hardest case for colour conversion), written by our writer."""
    path = tmp_path_factory.mktemp("noise") / f"{request.param}.mp4"
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (8, 96, 128, 3), dtype=np.uint8)
    frames[:, :48] = frames[:, :48] // 64 * 64
    w = VideoFileWriter(str(path), width=128, height=96, fps=10, vcodec=request.param, gop=2)
    w.add(frames)
    w.close()
    return path


def _rgb24(path) -> np.ndarray:
    with av.open(str(path)) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


def test_planar_frames_equal_pyav_rgb24(noise_video):
    want = _rgb24(noise_video)
    r = VideoReader(str(noise_video))
    idx = np.array([5, 0, 7, 3, 3, 1])
    chw = np.empty((len(idx), 3, 96, 128), np.uint8)
    r.decode_into(idx, chw, FrameOutput())
    assert np.array_equal(chw, want[idx].transpose(0, 3, 1, 2))
    assert np.array_equal(r.decode(idx), want[idx])  # the HWC path too


def test_float_frames_equal_torch_conversion(noise_video):
    want = torch.from_numpy(_rgb24(noise_video)).permute(0, 3, 1, 2).float() / 255
    r = VideoReader(str(noise_video))
    got = np.empty((8, 3, 96, 128), np.float32)
    r.decode_into(np.arange(8), got, FrameOutput(dtype="float32"))
    assert torch.equal(torch.from_numpy(got), want)  # bit for bit


def test_float_conversion_of_every_byte_value_is_bit_identical():
    frame = av.VideoFrame.from_ndarray(
        np.arange(256 * 3, dtype=np.uint16).reshape(16, 48, 1).repeat(3, 2).astype(np.uint8), format="rgb24"
    )
    got = np.empty((3, 16, 48), np.float32)
    write_frame(frame, got, FrameOutput(dtype="float32"))
    u8 = torch.from_numpy(frame.to_ndarray()).permute(2, 0, 1)
    assert torch.equal(torch.from_numpy(got), u8.float() / 255)
    assert len(np.unique(u8.numpy())) == 256


@pytest.mark.parametrize("size", [(48, 64), (32, 32), (120, 200), (30, 40), (16, 56), (240, 424), (17, 23)])
def test_stretch_is_torchvision_resize_within_tolerance(noise_video, size):
    full = torch.from_numpy(_rgb24(noise_video)).permute(0, 3, 1, 2).float() / 255
    want = F.interpolate(full, size=size, mode="bilinear", antialias=True, align_corners=False)
    got = np.empty((8, 3, *size), np.float32)
    VideoReader(str(noise_video)).decode_into(np.arange(8), got, FrameOutput(size=size, dtype="float32"))
    d = (torch.from_numpy(got) - want).abs()
    # documented tolerance (video/output.py): chroma is scaled at 4:2:0 before RGB conversion; pure noise is
    # the worst case, camera frames measure mean 0.003
    assert d.mean() < 0.05, d.mean()
    assert float(d.flatten().kthvalue(int(d.numel() * 0.5)).values) < 0.04
    columns = d.mean(dim=(0, 1, 2))  # every column written at every width (no unwritten tail, as at native size)
    assert float(columns.max()) < 0.1, columns.tolist()


def test_letterbox_keeps_aspect_and_zeroes_bars(noise_video):
    out = FrameOutput(size=(96, 96), resize_mode="letterbox")
    assert out.placement((96, 128)) == (72, 96, 12, 0)
    dest = np.full((2, 3, 96, 96), 7, np.uint8)  # a reused buffer: bars must be written, not assumed zero
    VideoReader(str(noise_video)).decode_into(np.array([0, 1]), dest, out)
    assert (dest[:, :, :12] == 0).all() and (dest[:, :, 84:] == 0).all()
    assert dest[:, :, 12:84].std() > 20  # the picture itself
    stretch = np.empty((2, 3, 72, 96), np.uint8)
    VideoReader(str(noise_video)).decode_into(np.array([0, 1]), stretch, FrameOutput(size=(72, 96)))
    assert np.array_equal(dest[:, :, 12:84], stretch)  # the picture is the stretch to the fitted size
    tall = FrameOutput(size=(100, 50), resize_mode="letterbox").placement((96, 128))
    assert tall == (38, 50, 31, 0)


_FORMATS = ("yuv420p", "yuvj420p", "yuv422p", "yuv444p", "yuv420p10le", "nv12", "gray", "rgb24", "rgba")
_WIDTHS = (*range(2, 82, 1), 424, 600, 640, 642)


def _random_frame(fmt: str, h: int, w: int, seed: int) -> av.VideoFrame:
    frame = av.VideoFrame(w, h, fmt)
    rng = np.random.default_rng(seed)
    for p in frame.planes:
        if fmt.endswith("10le"):  # 10-bit samples in 16-bit words
            np.frombuffer(p, np.uint16)[:] = rng.integers(0, 1024, p.buffer_size // 2, dtype=np.uint16)
        else:
            np.frombuffer(p, np.uint8)[:] = rng.integers(0, 256, p.buffer_size, dtype=np.uint8)
    return frame


@pytest.mark.parametrize("fmt", _FORMATS)
def test_every_width_and_pixel_format_equals_pyav_rgb24(fmt):
    """Bit for bit against PyAV's own `to_ndarray("rgb24")` at every width from 2 to 81 (and wide odd ones):
    FFmpeg's SIMD yuv->gbrp leaves the last columns of widths 17-24, 33-40, ... unwritten, and 10-bit and NV12
    sources round differently in gbrp; `planar_exact` must send such frames through rgb24."""
    for h in (2, 16, 30):
        for w in _WIDTHS:
            if fmt.startswith(("yuv420", "yuvj420", "nv12")) and (h % 2 or w % 2):
                continue
            frame = _random_frame(fmt, h, w, seed=h * 1000 + w)
            want = frame.to_ndarray(format="rgb24")
            for out, expected in (
                (FrameOutput(), want.transpose(2, 0, 1)),
                (FrameOutput(dtype="float32"), (torch.from_numpy(want).permute(2, 0, 1).float() / 255).numpy()),
                (FrameOutput(channels_first=False), want),
            ):
                dest = np.full(out.shape((h, w)), 7, np.uint8 if out.dtype == "uint8" else np.float32)  # stale pixels
                write_frame(frame, dest, out)
                assert np.array_equal(dest, expected), (fmt, h, w, out)


def test_options_are_checked_up_front():
    assert check_image_size([224, 256]) == (224, 256)
    for bad in [(0, 10), (10,), "224", (1.5, 2), (True, 3), (10, 20000)]:
        with pytest.raises(ValueError, match="two ints in 1..16384"):
            FrameOutput(size=bad)
    with pytest.raises(ValueError, match="resize_mode must be one of"):
        FrameOutput(size=(4, 4), resize_mode="crop")
    with pytest.raises(ValueError, match="dtype must be one of"):
        FrameOutput(dtype="float16")


def _tagged_video(path, h: int, w: int, colorspace: int, color_range: int, seed: int) -> None:
    """Six frames of noise from libx264 with the colorspace and range tags given (1: bt709, 5: bt601; range 1:
    limited, 2: full, decoded as yuvj420p)."""
    rng = np.random.default_rng(seed)
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.codec_context.colorspace, s.codec_context.color_range = colorspace, color_range
        for _ in range(6):
            for p in s.encode(av.VideoFrame.from_ndarray(rng.integers(0, 256, (h, w, 3), np.uint8), format="rgb24")):
                c.mux(p)
        for p in s.encode(None):
            c.mux(p)


def test_files_of_other_colours_and_sizes_converted_in_turn_equal_pyav_rgb24(tmp_path):
    """A thread converts the frames of every file it decodes with one reformatter per kind of conversion (a
    mixture's batch: one frame from each of many files). Files of another colorspace, range or size, read in
    turn, each equal PyAV's own rgb24 of that file: no conversion inherits another file's colour details or
    geometry, on this thread or on another."""
    kinds = [(48, 64, 1, 2), (48, 64, 5, 1), (48, 64, 1, 1), (30, 424, 5, 1)]
    paths = []
    for i, kind in enumerate(kinds):
        paths.append(tmp_path / f"v{i}.mp4")
        _tagged_video(paths[-1], *kind, seed=i)
    want = [_rgb24(p) for p in paths]

    def read_in_turn(out: FrameOutput, errors: list) -> None:
        readers = [VideoReader(str(p)) for p in paths]
        for f in [0, 3, 1, 5, 2, 4]:
            for r, ref in zip(readers, want):
                dest = np.empty((1, *out.shape(r.shape)), np.uint8)
                r.decode_into(np.array([f]), dest, out)
                got = dest[0].transpose(1, 2, 0) if out.channels_first else dest[0]
                if not np.array_equal(got, ref[f]):
                    errors.append((r.path, f, out.channels_first))
        for r in readers:
            r.close()

    errors: list = []
    for out in (FrameOutput(), FrameOutput(channels_first=False)):
        read_in_turn(out, errors)
        worker = threading.Thread(target=read_in_turn, args=(out, errors))
        worker.start()
        worker.join()
    assert errors == []


_FORK_CHILD = """
import os, sys
import av
import numpy as np
from episodic.video import VideoReader, output
path = sys.argv[1]
with av.open(path) as c:
    want = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
VideoReader(path).decode(np.array([0]))  # the parent holds a reformatter of this kind
assert output._REFORMATTERS._local.by_kind
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        fresh = getattr(output._REFORMATTERS._local, "by_kind", None) is None
        reader = VideoReader(path)
        same = bool(np.array_equal(reader.decode(np.arange(len(reader.index))), want))
        os.write(write, bytes((fresh, same)))
    finally:
        os._exit(0)
os.close(write)
print(list(os.read(read, 2)))
os.waitpid(pid, 0)
"""


def test_a_forked_child_converts_with_reformatters_of_its_own(noise_video):
    """A DataLoader worker forked after its parent decoded never uses (or frees) the parent's swscale contexts: it
    starts with none and makes its own, and its frames equal PyAV's (in a process of its own: a fork of the test
    process would inherit every other test's threads)."""
    done = subprocess.run(
        [sys.executable, "-c", _FORK_CHILD, str(noise_video)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[1,", "1]"]
