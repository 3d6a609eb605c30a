"""The writer: round trips, file layout, rotation, codecs, stats, atomic files."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from episodic import DatasetWriter, EpisodicDataset
from episodic.demo import demo_features, synthetic_episode, write_demo_dataset
from episodic.format.stats import array_stats


def test_layout_and_metadata(small_root):
    info = json.loads((small_root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 6 and info["fps"] == 30
    assert info["features"]["observation.images.top"]["info"]["video.codec"] == "av1"
    pf = pq.ParquetFile(small_root / "data/chunk-000/file-000.parquet")
    lengths = pq.read_table(small_root / "meta/episodes/chunk-000/file-000.parquet").column("length").to_pylist()
    assert pf.metadata.num_row_groups == 6
    assert [pf.metadata.row_group(i).num_rows for i in range(6)] == lengths
    tasks = pq.read_table(small_root / "meta/tasks.parquet")
    assert b"pandas" in tasks.schema.metadata and tasks.column("task_index").to_pylist() == [0, 1, 2]
    assert not [p for p in small_root.rglob("*") if p.name.endswith(".tmp")]


def test_stats_match_numpy(small_root):
    ds = EpisodicDataset(small_root, video_keys=[])
    stats = json.loads((small_root / "meta/stats.json").read_text())
    state = ds.get_batch(np.arange(len(ds)))["observation.state"].numpy().astype(np.float64)
    np.testing.assert_allclose(stats["observation.state"]["mean"], state.mean(0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(stats["observation.state"]["std"], state.std(0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(stats["observation.state"]["min"], state.min(0))
    assert stats["observation.state"]["count"] == [len(ds)]
    assert np.asarray(stats["observation.images.top"]["mean"]).shape == (3, 1, 1)
    assert ds.meta.stats["action"]["max"].shape == (14,)


def test_rotation_into_files_and_chunks(multifile_root):
    data = sorted(p.relative_to(multifile_root).as_posix() for p in multifile_root.glob("data/*/*.parquet"))
    videos = sorted(p.relative_to(multifile_root).as_posix() for p in multifile_root.glob("videos/observation.images.top/*/*.mp4"))
    assert len(data) >= 4 and {p.split("/")[1] for p in data} >= {"chunk-000", "chunk-001"}
    assert all(int(p.split("file-")[1][:3]) < 3 for p in data)  # chunks_size=3
    assert len(videos) >= 3
    ds = EpisodicDataset(multifile_root)
    eps = ds.meta.episodes
    for key, cam in eps.cameras.items():  # episodes of one file follow each other in time, starting at 0
        for fid in range(len(cam.files)):
            owners = np.flatnonzero(cam.file_id == fid)
            assert cam.from_ts[owners[0]] == 0
            np.testing.assert_allclose(cam.from_ts[owners[1:]], cam.to_ts[owners[:-1]])


@pytest.mark.parametrize("vcodec, info_codec", [("h264", "h264"), ("hevc", "hevc")])
def test_other_codecs_round_trip(tmp_path, vcodec, info_codec):
    root = write_demo_dataset(tmp_path / vcodec, num_episodes=2, min_length=8, max_length=12, height=48, width=64,
                              vcodec=vcodec, progress=False, gop=4, crf=20)
    info = json.loads((root / "meta/info.json").read_text())
    assert info["features"]["observation.images.top"]["info"]["video.codec"] == info_codec
    ds = EpisodicDataset(root, return_uint8=True)
    src = [synthetic_episode(e, int(n), height=48, width=64) for e, n in enumerate(ds.meta.episodes.length)]
    for idx in range(len(ds)):
        item = ds[idx]
        ep, f = int(item["episode_index"]), int(item["frame_index"])
        got = item["observation.images.top"].numpy().transpose(1, 2, 0).astype(np.float64)
        assert np.abs(got - src[ep]["observation.images.top"][f]).mean() < 6


def test_aborted_write_leaves_no_complete_looking_dataset(tmp_path):
    root = tmp_path / "ds"
    with pytest.raises(RuntimeError, match="boom"):
        with DatasetWriter(root, fps=30, features=demo_features(height=48, width=64)) as w:
            w.add_episode(synthetic_episode(0, 10, height=48, width=64), task="t")
            raise RuntimeError("boom")
    assert not (root / "meta/info.json").exists()
    assert not [p for p in root.rglob("*") if p.is_file()]


def test_bad_episode_input_is_rejected(tmp_path):
    w = DatasetWriter(tmp_path / "ds", fps=30, features=demo_features(height=48, width=64))
    ep = synthetic_episode(0, 10, height=48, width=64)
    with pytest.raises(ValueError, match="observation.images.top"):
        w.add_episode({**ep, "observation.images.top": ep["observation.images.top"][:, :10]}, task="t")
    with pytest.raises(ValueError, match="same positive number of frames"):
        w.add_episode({**ep, "action": ep["action"][:5]}, task="t")
    with pytest.raises(ValueError, match="missing features"):
        w.add_episode({k: v for k, v in ep.items() if k != "action"}, task="t")
    w.abort()


def test_refuses_to_overwrite(small_root):
    with pytest.raises(FileExistsError):
        DatasetWriter(small_root, fps=30, features=demo_features())
    assert (small_root / "meta/info.json").exists()


def test_array_stats_image_layout():
    frames = np.random.default_rng(0).integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
    s = array_stats(frames, image=True)
    assert s["mean"].shape == (3, 1, 1) and 0 <= s["min"].min() and s["max"].max() <= 1
    np.testing.assert_allclose(s["mean"].reshape(3), frames.reshape(-1, 3).mean(0) / 255)
