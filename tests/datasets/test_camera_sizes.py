"""Frames at every size a camera can have equal PyAV's own decode, bit for bit.

The independent reference is PyAV's ``frame.to_ndarray(format="rgb24")`` of every frame of each camera's mp4
(channels first; ``/ 255`` in float32 for float items, as LeRobot's ``x.float() / 255``). The matrix: widths
24, 40, 56, 424, 600, 640 (remainders mod 16 of 8, 8, 8, 8, 8, 0: FFmpeg's SIMD yuv->gbrp left the last 8
columns unwritten at such widths) x heights 16, 30, 240, 480 x codecs AV1, H.264, HEVC x uint8 and float32 x
map-style, streaming and a mixture. Each (codec, height) is one dataset written by episodic's writer with a camera per
width; a camera the encoder cannot take is refused by the writer (`REFUSED`), which is checked too: every width is
decoded in some codec at every height. Frames are patterns of every column and row, different per frame, episode and
channel.
"""

from __future__ import annotations

import glob
import os

import av
import numpy as np
import pytest
import torch

from episodic import DatasetWriter, LeRobotDataset, StreamingLeRobotDataset
from episodic.datasets.mixture import MixtureDataset
from episodic.format.errors import WriterInputError
from episodic.mixture import MixtureSpec

WIDTHS = (24, 40, 56, 424, 600, 640)
HEIGHTS = (16, 30, 240, 480)
CODECS = ("av1", "h264", "hevc")
# (codec, height, width) the writer refuses up front (writer/video.py): SVT-AV1 takes no frame narrower than 32
# pixels and never finishes a stream of frames at most 24 high and wider than 64; x265 corrupts memory below 49
REFUSED = (
    {("av1", h, 24) for h in HEIGHTS}
    | {("av1", 16, w) for w in WIDTHS if w > 64}
    | {("hevc", h, w) for h in HEIGHTS for w in WIDTHS if w < 49}
)
EPISODES, FRAMES = 2, 3


def _pattern(episode: int, h: int, w: int) -> np.ndarray:
    t, y, x, c = np.ogrid[:FRAMES, :h, :w, :3]
    return ((x * 5 + y * 3 + t * 40 + c * 70 + episode * 17) % 256).astype(np.uint8)


def _key(w: int) -> str:
    return f"observation.images.w{w}"


def _write(codec: str, h: int, root) -> dict:
    """Write the dataset of (codec, height) at `root`; {camera key: reference frames (N, H, W, 3) uint8 in index
    order}, decoded by PyAV from each camera's one mp4 file."""
    widths = [w for w in WIDTHS if (codec, h, w) not in REFUSED]
    features = {_key(w): {"dtype": "video", "shape": [h, w, 3]} for w in widths}
    features["action"] = {"dtype": "float32", "shape": [1]}
    with DatasetWriter(root, fps=30, features=features, vcodec=codec) as writer:
        for ep in range(EPISODES):
            frames = {_key(w): _pattern(ep, h, w) for w in widths}
            writer.add_episode({**frames, "action": np.zeros((FRAMES, 1), np.float32)}, task="t")
    reference = {}
    for w in widths:
        (path,) = glob.glob(os.path.join(root, "videos", _key(w), "*", "*.mp4"))  # one file: frame k = index k
        with av.open(path) as container:
            reference[_key(w)] = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
        assert reference[_key(w)].shape == (EPISODES * FRAMES, h, w, 3)
    return reference


@pytest.fixture(scope="module", params=[(c, h) for c in CODECS for h in HEIGHTS], ids=lambda p: f"{p[0]}-{p[1]}")
def written(request, tmp_path_factory):
    """(codec, root, reference) of one cell of the matrix."""
    codec, h = request.param
    root = tmp_path_factory.mktemp(f"sizes-{codec}-{h}") / "ds"
    return codec, root, _write(codec, h, root)


def _expected(reference: np.ndarray, index: int, uint8: bool) -> torch.Tensor:
    x = torch.from_numpy(reference[index]).permute(2, 0, 1)
    return x.contiguous() if uint8 else x.float() / 255


def _check(item: dict, reference: dict, uint8: bool, keys: dict | None = None) -> None:
    index = int(item["index"])
    for key, frames in reference.items():
        got = item[(keys or {}).get(key, key)]
        want = _expected(frames, index, uint8)
        assert got.dtype == want.dtype and got.shape == want.shape, (key, got.shape, want.shape)
        assert torch.equal(got, want), f"{key} index {index}: {int((got != want).sum())} values differ"


@pytest.mark.parametrize("uint8", [True, False], ids=["uint8", "float32"])
def test_map_style_frames_are_pyavs(written, uint8):
    _, root, reference = written
    ds = LeRobotDataset("sizes", root=root, return_uint8=uint8)
    assert len(ds) == EPISODES * FRAMES
    for i in range(len(ds)):
        _check(ds[i], reference, uint8)


@pytest.mark.parametrize("uint8", [True, False], ids=["uint8", "float32"])
def test_streaming_frames_are_pyavs(written, uint8, tmp_path):
    _, root, reference = written
    ds = StreamingLeRobotDataset("sizes", root=root, return_uint8=uint8, cache_dir=tmp_path)
    seen = 0
    for item in ds:
        _check(item, reference, uint8)
        seen += 1
    assert seen == EPISODES * FRAMES


@pytest.mark.parametrize("uint8", [True, False], ids=["uint8", "float32"])
def test_mixture_frames_are_pyavs(written, uint8, tmp_path):
    """A mixture per camera (without `image_size` a mixture's cameras share one size) of two entries, the
    dataset's two episodes, each mapping that camera to the role `cam`."""
    _, root, reference = written
    for key, frames in reference.items():
        entries = [
            {"source": str(root), "name": f"ep{ep}", "episodes": [ep], "roles": {"cam": key}} for ep in range(EPISODES)
        ]
        ds = MixtureDataset(MixtureSpec.from_dict({"entries": entries}), return_uint8=uint8, cache_dir=tmp_path)
        seen = []
        for i in range(len(ds)):
            item = ds[i]
            _check(item, {key: frames}, uint8, keys={key: "observation.images.cam"})
            seen.append(int(item["index"]))
        assert sorted(seen) == list(range(EPISODES * FRAMES)), (key, seen)


@pytest.mark.parametrize("uint8", [True, False], ids=["uint8", "float32"])
def test_dataloader_workers_hand_out_pyavs_frames(uint8, tmp_path):
    """Through DataLoader workers (batches in shared-memory slots, copied out in the main process), map-style
    and streaming, every width at one height."""
    root = tmp_path / "ds"
    reference = _write("h264", 30, root)
    loaders = [
        LeRobotDataset("sizes", root=root, return_uint8=uint8).loader(batch_size=4, num_workers=2),
        StreamingLeRobotDataset("sizes", root=root, return_uint8=uint8, cache_dir=tmp_path).loader(
            batch_size=4, num_workers=2
        ),
    ]
    for loader in loaders:
        seen = []
        for batch in loader:
            for j in range(len(batch["index"])):
                _check({k: v[j] for k, v in batch.items() if k != "task"}, reference, uint8)
                seen.append(int(batch["index"][j]))
            if len(seen) >= EPISODES * FRAMES:
                break
        assert sorted(seen) == list(range(EPISODES * FRAMES))


def test_the_writer_refuses_what_the_encoder_cannot_take(tmp_path):
    for codec, h, w in sorted(REFUSED):
        features = {_key(w): {"dtype": "video", "shape": [h, w, 3]}}
        with pytest.raises(WriterInputError, match=_key(w)):
            DatasetWriter(tmp_path / f"{codec}-{h}-{w}", fps=30, features=features, vcodec=codec)


def test_every_size_is_in_the_matrix_in_every_codec_that_takes_it():
    """The refusals leave every (height, width) decoded in at least one codec, and every codec at every height."""
    for h in HEIGHTS:
        for w in WIDTHS:
            assert any((c, h, w) not in REFUSED for c in CODECS), (h, w)
        for c in CODECS:
            assert any((c, h, w) not in REFUSED for w in WIDTHS), (c, h)
