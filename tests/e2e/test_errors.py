"""Bad input ends in an error that names the file and what is wrong (never a bare library traceback)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from episodic import LeRobotDataset
from episodic.format import DatasetFormatError, FrameTimestampError, VideoDecodeError
from episodic.video import VideoReader
from episodic.writer.video import VideoFileWriter


def _edit_info(root, **changes):
    path = root / "meta" / "info.json"
    info = json.loads(path.read_text())
    for k, v in changes.items():
        if v is None:
            info.pop(k)
        else:
            info[k] = v
    path.write_text(json.dumps(info))


def test_missing_data_file(small_root, copy_of):
    root = copy_of(small_root)
    (root / "data/chunk-000/file-000.parquet").unlink()
    with pytest.raises(DatasetFormatError, match=r"data/chunk-000/file-000\.parquet.*not found"):
        LeRobotDataset("x", root=root)


def test_truncated_parquet(small_root, copy_of):
    root = copy_of(small_root)
    f = root / "data/chunk-000/file-000.parquet"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(DatasetFormatError, match=r"file-000\.parquet.*not a readable parquet"):
        LeRobotDataset("x", root=root)


@pytest.mark.parametrize(
    "change, pattern",
    [
        ({"fps": "thirty"}, r"info\.json.*'fps'"),
        ({"total_frames": None}, r"info\.json.*missing required field 'total_frames'"),
        ({"features": []}, r"info\.json.*'features' must be dict"),
        ({"codebase_version": "v9.9"}, r"info\.json.*v9\.9.*not supported"),
    ],
)
def test_bad_info_json(small_root, copy_of, change, pattern):
    root = copy_of(small_root)
    _edit_info(root, **change)
    with pytest.raises(DatasetFormatError, match=pattern):
        LeRobotDataset("x", root=root)


def test_bad_feature_shape_names_the_feature(small_root, copy_of):
    root = copy_of(small_root)
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["action"]["shape"] = "14"
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetFormatError, match=r"feature 'action'.*'shape'"):
        LeRobotDataset("x", root=root)


def test_unknown_info_keys_are_tolerated(small_root, copy_of):
    root = copy_of(small_root)
    _edit_info(root, some_future_field={"a": 1})
    assert len(LeRobotDataset("x", root=root)) > 0


def test_unknown_task_label_warns_once(small_root, copy_of):
    root = copy_of(small_root)
    ep_file = root / "meta/episodes/chunk-000/file-000.parquet"
    t = pq.read_table(ep_file)
    tasks = t.column("tasks").to_pylist()
    tasks[2] = ["a task the tasks table lacks"]
    t = t.set_column(t.column_names.index("tasks"), "tasks", pa.array(tasks))
    pq.write_table(t, ep_file)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = LeRobotDataset("x", root=root)
    msgs = [str(w.message) for w in caught if "not in the tasks table" in str(w.message)]
    assert len(msgs) == 1 and "a task the tasks table lacks" in msgs[0]
    assert isinstance(ds[0]["task"], str)


def _shift_video_times(root, episode: int, seconds: float):
    ep_file = root / "meta/episodes/chunk-000/file-000.parquet"
    t = pq.read_table(ep_file)
    col = "videos/observation.images.top/from_timestamp"
    values = t.column(col).to_numpy().copy()
    values[episode] += seconds
    pq.write_table(t.set_column(t.column_names.index(col), col, pa.array(values)), ep_file)


def test_timestamps_out_of_tolerance(small_root, copy_of):
    root = copy_of(small_root)
    _shift_video_times(root, episode=2, seconds=0.5 / 30)
    ds = LeRobotDataset("x", root=root)
    row = int(ds.meta.episodes.dataset_from_index[2])
    with pytest.raises(FrameTimestampError) as err:
        ds[row]
    msg = str(err.value)
    assert "episode 2" in msg and "observation.images.top" in msg and "file-000.mp4" in msg and "tolerance_s" in msg
    ds[0]  # other episodes are fine


def test_video_shorter_than_metadata(small_root, copy_of):
    root = copy_of(small_root)
    path = root / "videos/observation.images.top/chunk-000/file-000.mp4"
    reader = VideoReader(str(path))
    keep = len(reader.index) // 2
    frames = reader.decode(np.arange(keep))
    reader.close()
    w = VideoFileWriter(str(path), frames.shape[2], frames.shape[1], 30)
    w.add(frames)
    w.close()
    ds = LeRobotDataset("x", root=root)
    with pytest.raises(VideoDecodeError) as err:
        ds[len(ds) - 1]
    msg = str(err.value)
    assert "file-000.mp4" in msg and "episode 5" in msg and "observation.images.top" in msg


def test_corrupt_video_bytes(small_root, copy_of):
    root = copy_of(small_root)
    path = root / "videos/observation.images.wrist/chunk-000/file-000.mp4"
    path.write_bytes(b"\x00garbage" * 1000)
    ds = LeRobotDataset("x", root=root)
    with pytest.raises(
        VideoDecodeError,
        match=r"file-000\.mp4.*camera 'observation.images.wrist'|camera 'observation.images.wrist'.*file-000\.mp4",
    ) as err:
        ds[0]
    assert str(err.value).count("camera 'observation.images.wrist'") == 1  # one prefix, not one per layer
    one = LeRobotDataset("x", root=root, video_keys=["observation.images.wrist"])  # one file: decoded in this thread
    with pytest.raises(VideoDecodeError) as err:
        one[0]
    assert str(err.value).count("camera 'observation.images.wrist'") == 1


def test_rows_missing_from_data_file(small_root, copy_of):
    root = copy_of(small_root)
    f = root / "data/chunk-000/file-000.parquet"
    t = pq.read_table(f)
    pq.write_table(t.filter(pa.compute.not_equal(t.column("frame_index"), 3)), f)
    with pytest.raises(DatasetFormatError, match=r"file-000\.parquet: episode 0 has \d+ rows, metadata says length"):
        LeRobotDataset("x", root=root)


def test_bad_delta_timestamps(small_root):
    with pytest.raises(ValueError, match="action"):
        LeRobotDataset("x", root=small_root, delta_timestamps={"action": [0.01]})
