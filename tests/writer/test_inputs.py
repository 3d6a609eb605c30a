"""What the writer accepts: bad features are refused when it opens, bad episodes and task strings in
add_episode before anything is written (the directory is byte-for-byte unchanged and the writer goes on)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from episodic import DatasetWriter, EpisodicDataset
from episodic.demo import demo_features, synthetic_episode
from episodic.format.errors import WriterInputError

H, W = 48, 64


def _snapshot(root) -> dict[str, bytes]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


@pytest.fixture()
def writer(tmp_path):
    w = DatasetWriter(tmp_path / "ds", fps=30, features=demo_features(height=H, width=W))
    w.add_episode(synthetic_episode(0, 10, height=H, width=W), task="first")
    yield w
    w.abort()


def _episode(n: int = 10, **changes):
    ep = synthetic_episode(1, n, height=H, width=W)
    ep.update(changes)
    return {k: v for k, v in ep.items() if v is not None}


@pytest.mark.parametrize(
    "task, match",
    [
        (None, "must be a string or a sequence of 10 strings .one per frame., got NoneType"),
        (7, "must be a string or a sequence"),
        (b"pick", "must be a string or a sequence"),
        ("", "non-empty"),
        ("   ", "non-empty"),
        ("pick\x1b[31m red", r"control character U\+001B"),
        ("line\nbreak", r"control character U\+000A"),
        ("tab\there", r"control character U\+0009"),
        ("bad \ud800 surrogate", r"control character U\+D800"),
        (["ok"] * 9, "9 task strings for 10 frames"),
        (["ok"] * 9 + [3], "a task must be a str, got int"),
        (["ok"] * 9 + ["bell\x07"], r"U\+0007"),
    ],
)
def test_bad_tasks_are_refused_before_anything_is_written(writer, task, match):
    before = _snapshot(writer.root)
    with pytest.raises(WriterInputError, match=match) as e:
        writer.add_episode(_episode(), task=task)
    assert "episode 1" in str(e.value)
    assert _snapshot(writer.root) == before
    assert writer.add_episode(_episode(), task="second") == 1  # the writer goes on


@pytest.mark.parametrize(
    "changes, match",
    [
        (
            {"observation.state": np.zeros((10, 13), np.float32)},
            r"'observation.state': values of shape \(13,\) per frame",
        ),
        ({"observation.state": np.zeros((10, 14), np.complex64)}, "needs numbers"),
        ({"observation.state": np.array([["a"] * 14] * 10)}, "needs numbers"),
        ({"observation.state": [[0.0] * 14] * 9 + [[0.0] * 3]}, "not a regular array"),
        ({"observation.state": np.float32(1.0)}, "one row per frame"),
        ({"action": np.zeros((9, 14), np.float32)}, "same positive number of frames"),
        ({"action": None}, r"missing features \['action'\]"),
        ({"extra": np.zeros(10)}, r"unknown features \['extra'\]"),
        ({"timestamp": np.zeros(10, np.float32)}, r"writes itself \['timestamp'\]"),
        ({"observation.images.top": np.zeros((10, H, W, 3), np.float32)}, "uint8 frames"),
        ({"observation.images.top": np.zeros((10, H, W - 2, 3), np.uint8)}, "uint8 frames of shape"),
    ],
)
def test_bad_episodes_are_refused_before_anything_is_written(writer, changes, match):
    before = _snapshot(writer.root)
    with pytest.raises(WriterInputError, match=match):
        writer.add_episode(_episode(**changes), task="t")
    assert _snapshot(writer.root) == before


def test_empty_episode_is_refused(writer):
    empty = {k: v[:0] for k, v in _episode().items()}
    with pytest.raises(WriterInputError, match="same positive number of frames"):
        writer.add_episode(empty, task="t")


def test_dtypes_are_checked_against_the_features(tmp_path):
    feats = {
        "count": {"dtype": "int16", "shape": [1]},
        "flag": {"dtype": "bool", "shape": [1]},
        "pos": {"dtype": "float32", "shape": [2]},
        "label": {"dtype": "string", "shape": [1]},
    }
    w = DatasetWriter(tmp_path / "ds", fps=10, features=feats)
    good = {
        "count": np.arange(4, dtype=np.int64),
        "flag": np.array([True, False, True, True]),
        "pos": np.ones((4, 2), np.float64),
        "label": ["a", "b", "c", "d"],
    }
    for key, bad, match in [
        ("count", np.array([0, 1, 2, 40000]), r"values in \[0, 40000\] do not fit int16"),
        ("count", np.zeros(4, np.float32), "float32 values cannot be stored as int16"),
        ("flag", np.array([0, 1, 1, 0]), "cannot be stored as bool"),
        ("label", ["a", "b", 3, "d"], "needs str values, got int"),
        ("label", np.array([1, 2, 3, 4]), "needs str values"),
    ]:
        with pytest.raises(WriterInputError, match=match):
            w.add_episode({**good, key: bad}, task="t")
    w.add_episode(good, task="t")  # int64 that fits int16, float64 into float32, str labels: accepted
    w.finalize()
    table = pq.read_table(tmp_path / "ds" / "data/chunk-000/file-000.parquet")
    assert table.schema.field("count").type == pa.int16() and table.column("count").to_pylist() == [0, 1, 2, 3]
    assert table.column("flag").to_pylist() == [True, False, True, True]
    assert table.column("label").to_pylist() == ["a", "b", "c", "d"]
    assert table.column("pos").to_pylist() == [[1.0, 1.0]] * 4


@pytest.mark.parametrize(
    "features, match",
    [
        ({"task": {"dtype": "float32", "shape": [1]}}, "item key of the task string; rename the feature"),
        ({"action_is_pad": {"dtype": "bool", "shape": [1]}}, "item keys of window pad masks; rename the feature"),
        ({"a/b": {"dtype": "float32", "shape": [1]}}, "must not contain '/'"),
        ({"": {"dtype": "float32", "shape": [1]}}, "non-empty strings"),
        ({"x\x1b": {"dtype": "float32", "shape": [1]}}, "control character"),
        ({"timestamp": {"dtype": "float64", "shape": [1]}}, "written by the writer as float32"),
        ({"x": {"dtype": "float", "shape": [1]}}, "dtype 'float' is not one the writer stores"),
        ({"x": {"dtype": "float32", "shape": [0]}}, "positive ints"),
        ({"x": {"dtype": "float32", "shape": []}}, "must not be empty"),
        ({"x": {"dtype": "string", "shape": [2]}}, "string feature has shape"),
        ({"cam": {"dtype": "image", "shape": [8, 8, 3]}}, "use 'video'"),
        ({"cam": {"dtype": "video", "shape": [8, 8, 1]}}, r"\[height, width, 3\]"),
        ({"cam": {"dtype": "video", "shape": [8, 8]}}, "height, width, channels"),
        ({"x": "float32"}, "expected a mapping"),
        (
            {"x": {"dtype": "float32", "shape": [10**12]}},
            r"feature 'x': one frame of shape \[1000000000000\] float32 "
            r"is 4,000,000,000,000 bytes; .* at most 2,147,483,647 bytes",
        ),
        ({"x": {"dtype": "float64", "shape": [2**15, 2**15]}}, "feature 'x': one frame .* is 8,589,934,592 bytes"),
        ({"x": {"dtype": "uint8", "shape": [2**64]}}, r"feature 'x': one frame of shape \[18446744073709551616\]"),
        (
            {"cam": {"dtype": "video", "shape": [100000, 100000, 3]}},
            "feature 'cam': 100000x100000 frames are larger than FFmpeg encodes",
        ),
        ({}, "non-empty mapping"),
    ],
)
def test_bad_features_are_refused_before_the_directory_is_touched(tmp_path, features, match):
    with pytest.raises(WriterInputError, match=match):
        DatasetWriter(tmp_path / "ds", fps=30, features=features)
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize(
    "width, height", [(20000, 13000), (20000, 13300), (30000, 8700), (30000, 8800), (16384, 16000), (16384, 16512)]
)
def test_the_camera_size_limit_is_ffmpegs(width, height):
    """A camera is refused as too large exactly when FFmpeg itself refuses the picture size (EINVAL from
    avcodec_open2, before any frame exists): the writer's check never turns away a size FFmpeg takes."""
    import errno
    import io

    import av

    from episodic.format.features import Feature
    from episodic.writer.inputs import check_features

    with av.open(io.BytesIO(), mode="w", format="mp4") as c:
        s = c.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt = width, height, "yuv420p"
        try:
            s.codec_context.open()
            ffmpeg_refuses = False
        except av.FFmpegError as e:  # EINVAL: FFmpeg's size check (x264's own refusal is another error)
            ffmpeg_refuses = e.errno == errno.EINVAL
    spec = {"cam": {"dtype": "video", "shape": [height, width, 3]}}
    if ffmpeg_refuses:
        with pytest.raises(WriterInputError, match=f"{width}x{height} frames are larger than FFmpeg encodes"):
            check_features(spec)
    else:
        assert isinstance(check_features(spec)["cam"], Feature)


def test_a_camera_the_encoder_refuses_is_probed_without_allocating_a_frame(tmp_path):
    """30000x8700 passes FFmpeg's size check but no encoder opens it: refused when the encoder opens, before
    the probe allocates a 783 MB frame (peak memory of a child process measured)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from episodic import DatasetWriter\n"
        "from episodic.format.errors import WriterInputError\n"
        "try:\n"
        f"    DatasetWriter({str(tmp_path / 'ds')!r}, fps=30, vcodec='h264', "
        "features={'cam': {'dtype': 'video', 'shape': [8700, 30000, 3]}})\n"
        "except WriterInputError as e:\n"
        "    print('refused', e)\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
        "print('maxrss_kb', hwm)\n"
    )  # this process's peak (ru_maxrss would count the forking parent's)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert "refused camera 'cam': h264 cannot encode 30000x8700" in out, out
    assert int(out.split("maxrss_kb")[1]) < 400 * 1024, out
    assert not (tmp_path / "ds").exists()


def test_default_features_may_be_listed_as_they_are(tmp_path):
    """Features copied from a dataset's info.json (defaults included) are accepted."""
    from episodic.format.features import DEFAULT_FEATURES

    feats = {"action": {"dtype": "float32", "shape": [2]}, **DEFAULT_FEATURES}
    w = DatasetWriter(tmp_path / "ds", fps=30, features=feats)
    w.add_episode({"action": np.zeros((3, 2), np.float32)}, task="t")
    w.finalize()
    assert len(EpisodicDataset(tmp_path / "ds")) == 3


@pytest.mark.parametrize(
    "vcodec, shape, match",
    [
        ("h264", [47, 64, 3], "h264 cannot encode 64x47"),
        ("hevc", [8, 64, 3], "hevc cannot encode 64x8"),
        ("vp9", [48, 64, 3], "unknown video codec"),
    ],
)
def test_cameras_the_encoder_cannot_take_are_refused_when_the_writer_opens(tmp_path, vcodec, shape, match):
    with pytest.raises(WriterInputError, match=match):
        DatasetWriter(tmp_path / "ds", fps=30, vcodec=vcodec, features={"cam": {"dtype": "video", "shape": shape}})
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"fps": 0}, "fps must be a positive integer"),
        ({"fps": 29.97}, "fps must be a positive integer"),
        ({"chunks_size": 0}, "chunks_size"),
        ({"data_files_size_in_mb": -1}, "data_files_size_in_mb"),
        ({"overwrite": True, "resume": True}, "exclude each other"),
    ],
)
def test_bad_options(tmp_path, kwargs, match):
    args = {"fps": 30, **kwargs}
    with pytest.raises(ValueError, match=match):
        DatasetWriter(tmp_path / "ds", features={"a": {"dtype": "float32", "shape": [1]}}, **args)
