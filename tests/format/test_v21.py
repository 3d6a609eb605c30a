"""The older v2.1 layout (one parquet and one mp4 per episode, jsonl metadata) loads without conversion and
gives the same items as the same episodes in v3.0."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from episodic import LeRobotDataset
from episodic.demo import TASKS, demo_features, synthetic_episode
from episodic.writer.video import VideoFileWriter

FPS = 30
LENGTHS = [14, 9, 20, 11]
CAMS = ["observation.images.top", "observation.images.wrist"]


@pytest.fixture(scope="module")
def v21_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("v21") / "ds"
    feats = demo_features(height=48, width=64)
    for k in CAMS:
        feats[k]["info"] = {"video.fps": FPS, "video.codec": "av1", "video.pix_fmt": "yuv420p"}
    for k in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        feats[k] = {"dtype": "float32" if k == "timestamp" else "int64", "shape": [1], "names": None}
    info = {
        "codebase_version": "v2.1",
        "robot_type": "synthetic",
        "total_episodes": len(LENGTHS),
        "total_frames": sum(LENGTHS),
        "total_tasks": 2,
        "total_videos": 2 * len(LENGTHS),
        "total_chunks": 1,
        "chunks_size": 1000,
        "fps": FPS,
        "splits": {"train": f"0:{len(LENGTHS)}"},
        "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
        "features": feats,
    }
    (root / "meta").mkdir(parents=True)
    (root / "meta/info.json").write_text(json.dumps(info))
    (root / "meta/tasks.jsonl").write_text(
        "".join(json.dumps({"task_index": i, "task": TASKS[i]}) + "\n" for i in range(2))
    )
    eps, start = [], 0
    for e, n in enumerate(LENGTHS):
        src = synthetic_episode(e, n, height=48, width=64)
        fi = np.arange(n)
        t = pa.table(
            {
                "observation.state": pa.FixedSizeListArray.from_arrays(
                    pa.array(src["observation.state"].reshape(-1)), 14
                ),
                "action": pa.FixedSizeListArray.from_arrays(pa.array(src["action"].reshape(-1)), 14),
                "timestamp": pa.array((fi / FPS).astype(np.float32)),
                "frame_index": pa.array(fi),
                "episode_index": pa.array(np.full(n, e)),
                "index": pa.array(start + fi),
                "task_index": pa.array(np.full(n, e % 2)),
            }
        )
        (root / "data/chunk-000").mkdir(parents=True, exist_ok=True)
        pq.write_table(t, root / f"data/chunk-000/episode_{e:06d}.parquet")
        for k in CAMS:
            w = VideoFileWriter(str(root / f"videos/chunk-000/{k}/episode_{e:06d}.mp4"), 64, 48, FPS)
            w.add(src[k])
            w.close()
        eps.append({"episode_index": e, "tasks": [TASKS[e % 2]], "length": n})
        start += n
    (root / "meta/episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in eps))
    return root


def test_v21_items(v21_root):
    deltas = {"action": [0, 1 / FPS, 2 / FPS], "observation.images.top": [-1 / FPS, 0]}
    ds = LeRobotDataset("x", root=v21_root, delta_timestamps=deltas)
    assert ds.meta.info.codebase_version == "v2.1" and ds.num_frames == sum(LENGTHS) and ds.num_episodes == 4
    starts = np.cumsum([0] + LENGTHS)
    for idx in range(len(ds)):
        item = ds[idx]
        ep = int(np.searchsorted(starts, idx, side="right") - 1)
        f = idx - starts[ep]
        src = synthetic_episode(ep, LENGTHS[ep], height=48, width=64)
        rows = np.clip(f + np.arange(3), 0, LENGTHS[ep] - 1)
        assert np.array_equal(item["action"].numpy(), src["action"][rows])
        assert item["action_is_pad"].tolist() == [bool(f + d >= LENGTHS[ep]) for d in range(3)]
        assert item["task"] == TASKS[ep % 2] and int(item["index"]) == idx
        frame = item["observation.images.top"][-1].numpy().transpose(1, 2, 0) * 255
        assert np.abs(frame - src["observation.images.top"][f]).mean() < 6


def test_v21_subset_and_metadata(v21_root):
    ds = LeRobotDataset("x", root=v21_root, episodes=[3, 1])
    assert [int(ds[i]["episode_index"]) for i in (0, len(ds) - 1)] == [1, 3]
    assert ds.meta.episodes["dataset_from_index"].tolist() == np.cumsum([0] + LENGTHS[:-1]).tolist()
    assert ds.meta.tasks == list(TASKS[:2])
    assert isinstance(ds[0]["observation.images.wrist"], torch.Tensor)
