"""A dataset of no episode is refused, by every loader alike, with an error that says so (not as a missing
column, which reads as corruption). The writer never writes one (tests/writer/test_dataset_writer.py) and
`episodic repair` removes a session without a complete episode (tests/tools/test_repair.py); the datasets
here are what the writer's metadata step wrote for a writer finalized without an episode."""

from __future__ import annotations

import json

import numpy as np
import pytest

from episodic import LeRobotDataset, StreamingLeRobotDataset
from episodic.cli import main
from episodic.format.errors import DatasetFormatError
from episodic.format.features import Feature
from episodic.tools.validate import validate
from episodic.writer.meta import write_metadata

NO_EPISODE = r"meta/episodes.*: the dataset has no episode \(info.json total_episodes is 0\)"


@pytest.fixture
def v30_root(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    features = {
        "observation.state": Feature.from_json("observation.state", {"dtype": "float32", "shape": [2]}),
        "observation.images.top": Feature.from_json("observation.images.top", {"dtype": "video", "shape": [48, 64, 3]}),
    }
    write_metadata(
        str(root),
        fps=10,
        features=features,
        video_info={"video.codec": "av1", "video.pix_fmt": "yuv420p", "video.g": 2, "video.crf": 30},
        episodes=[],
        episode_stats=[],
        tasks=[],
        total_frames=0,
        chunks_size=1000,
        sizes_mb=(100, 200),
        robot_type=None,
    )
    return root


@pytest.fixture
def v21_root(tmp_path):
    root = tmp_path / "empty21"
    (root / "meta").mkdir(parents=True)
    info = {
        "codebase_version": "v2.1",
        "total_episodes": 0,
        "total_frames": 0,
        "total_tasks": 0,
        "chunks_size": 1000,
        "fps": 10,
        "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        "features": {"action": {"dtype": "float32", "shape": [2], "names": None}},
    }
    (root / "meta/info.json").write_text(json.dumps(info))
    (root / "meta/episodes.jsonl").write_text("")
    (root / "meta/tasks.jsonl").write_text("")
    return root


@pytest.mark.parametrize("layout", ["v30_root", "v21_root"])
def test_map_style_and_streaming_refuse_a_dataset_of_no_episode(layout, request):
    root = request.getfixturevalue(layout)
    with pytest.raises(DatasetFormatError, match=NO_EPISODE):
        LeRobotDataset("x", root=root)
    with pytest.raises(DatasetFormatError, match=NO_EPISODE):
        StreamingLeRobotDataset("x", root=root)


def test_validate_reports_a_dataset_of_no_episode(v30_root, capsys):
    report = validate(str(v30_root), progress=False)
    assert not report.ok and len(report.problems) == 1, report.problems
    assert "the dataset has no episode" in report.problems[0] and "meta/episodes" in report.problems[0]
    assert main(["validate", str(v30_root)]) == 1
    assert "the dataset has no episode" in capsys.readouterr().out


def test_one_episode_is_enough(v30_root, tmp_path):
    """The refusal is about zero episodes only: the writer's smallest dataset (one episode of one frame) loads."""
    from episodic import DatasetWriter

    root = tmp_path / "one"
    w = DatasetWriter(root, fps=10, features={"action": {"dtype": "float32", "shape": [2]}}, fsync=False)
    w.add_episode({"action": np.ones((1, 2), np.float32)}, task="t")
    w.finalize()
    ds = LeRobotDataset("x", root=root)
    assert len(ds) == 1 and ds.num_episodes == 1 and ds[0]["action"].tolist() == [1.0, 1.0]
    assert validate(str(root), progress=False).ok
