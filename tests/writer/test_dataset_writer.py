"""The writer: round trips, file layout, rotation, codecs, stats; sessions kept after errors, reopened,
resumed and repaired; what overwrite may replace; file modes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from episodic import DatasetWriter, EpisodicDataset
from episodic.demo import demo_features, synthetic_episode, write_demo_dataset
from episodic.format.errors import ExistingDirectoryError, WriterError, WriterSessionError
from episodic.format.stats import array_stats, image_stats_sample
from episodic.storage.atomic import temp_files
from episodic.tools.repair import repair
from episodic.writer.session import SESSION_DIR

H, W = 48, 64
FEATS = demo_features(height=H, width=W)


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
    videos = sorted(
        p.relative_to(multifile_root).as_posix() for p in multifile_root.glob("videos/observation.images.top/*/*.mp4")
    )
    assert len(data) >= 4 and {p.split("/")[1] for p in data} >= {"chunk-000", "chunk-001"}
    assert all(int(p.split("file-")[1][:3]) < 3 for p in data)  # chunks_size=3
    assert len(videos) >= 3
    ds = EpisodicDataset(multifile_root)
    eps = ds.meta.episodes
    for cam in eps.cameras.values():  # episodes of one file follow each other in time, starting at 0
        for fid in range(len(cam.files)):
            owners = np.flatnonzero(cam.file_id == fid)
            assert cam.from_ts[owners[0]] == 0
            np.testing.assert_allclose(cam.from_ts[owners[1:]], cam.to_ts[owners[:-1]])


@pytest.mark.parametrize("vcodec, info_codec", [("h264", "h264"), ("hevc", "hevc")])
def test_other_codecs_round_trip(tmp_path, vcodec, info_codec):
    root = write_demo_dataset(
        tmp_path / vcodec,
        num_episodes=2,
        min_length=8,
        max_length=12,
        height=48,
        width=64,
        vcodec=vcodec,
        progress=False,
        gop=4,
        crf=20,
    )
    info = json.loads((root / "meta/info.json").read_text())
    assert info["features"]["observation.images.top"]["info"]["video.codec"] == info_codec
    ds = EpisodicDataset(root, return_uint8=True)
    src = [synthetic_episode(e, int(n), height=48, width=64) for e, n in enumerate(ds.meta.episodes.length)]
    for idx in range(len(ds)):
        item = ds[idx]
        ep, f = int(item["episode_index"]), int(item["frame_index"])
        got = item["observation.images.top"].numpy().transpose(1, 2, 0).astype(np.float64)
        assert np.abs(got - src[ep]["observation.images.top"][f]).mean() < 6


def _files(root) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in Path(root).rglob("*") if p.is_file())


def _write(w: DatasetWriter, episodes, length: int = 10) -> None:
    for e in episodes:
        w.add_episode(synthetic_episode(e, length + e, height=H, width=W), task=f"task {e % 2}")


def _assert_episodes(root, count: int, length: int = 10) -> None:
    ds = EpisodicDataset(root, return_uint8=True)
    assert ds.meta.episodes.length.tolist() == [length + e for e in range(count)]
    batch = ds.get_batch(np.arange(len(ds)))
    start = 0
    for e in range(count):
        src = synthetic_episode(e, length + e, height=H, width=W)
        n = length + e
        assert np.array_equal(batch["observation.state"][start : start + n].numpy(), src["observation.state"])
        frames = batch["observation.images.top"][start : start + n].numpy().transpose(0, 2, 3, 1).astype(np.float64)
        assert np.abs(frames - src["observation.images.top"]).mean() < 6
        start += n


def test_error_in_the_with_block_keeps_the_episodes_for_repair(tmp_path, caplog):
    """The user's error goes through unchanged; the complete episodes stay, and repair finalizes them."""
    root = tmp_path / "ds"
    with pytest.raises(RuntimeError, match="boom") as e:
        with DatasetWriter(root, fps=30, features=FEATS) as w:
            _write(w, range(2))
            raise RuntimeError("boom")
    assert e.value.__context__ is None  # nothing raised while cleaning up
    assert not (root / "meta/info.json").exists() and not temp_files(root)
    assert "2 complete episode(s) are kept" in caplog.text and "episodic repair" in caplog.text
    assert repair(root).repaired
    _assert_episodes(root, 2)
    assert _files(root) == sorted(f for f in _files(root) if not f.startswith(SESSION_DIR))


def test_abort_discard_removes_what_the_session_wrote(tmp_path):
    root = tmp_path / "ds"
    w = DatasetWriter(root, fps=30, features=FEATS, data_files_size_in_mb=0.001)
    _write(w, range(3))
    assert any(f.startswith("data/") for f in _files(root))  # full files are joined while writing
    w.abort(discard=True)
    assert root.is_dir() and os.listdir(root) == []


def test_reopen_continues_an_interrupted_session(tmp_path):
    root = tmp_path / "ds"
    w = DatasetWriter(
        root, fps=30, features=FEATS, data_files_size_in_mb=0.004, video_files_size_in_mb=0.006, chunks_size=2
    )
    _write(w, range(3))
    w.abort()
    with pytest.raises(ExistingDirectoryError, match="interrupted writing session.*episodic repair"):
        DatasetWriter(root, fps=30, features=FEATS)
    w = DatasetWriter.reopen(root)
    assert w.recovery.episodes == 3 and w.recovery.frames == 10 + 11 + 12 and w.num_episodes == 3
    _write(w, range(3, 5))
    w.abort()
    w = DatasetWriter(
        root,
        fps=30,
        features=FEATS,
        data_files_size_in_mb=0.004,
        video_files_size_in_mb=0.006,
        chunks_size=2,
        resume=True,
    )  # the same settings, given again
    _write(w, range(5, 6))
    assert w.finalize() == str(root)
    _assert_episodes(root, 6)
    ds = EpisodicDataset(root)
    assert ds.meta.tasks == ["task 0", "task 1"] and len(ds.meta.episodes.data_files) > 2


def test_resume_with_other_settings_is_refused(tmp_path):
    root = tmp_path / "ds"
    w = DatasetWriter(root, fps=30, features=FEATS)
    _write(w, range(1))
    w.abort()
    with pytest.raises(WriterSessionError, match="fps: session 30, now 15"):
        DatasetWriter(root, fps=15, features=FEATS, resume=True)
    with pytest.raises(WriterSessionError, match="vcodec: session 'av1', now 'h264'"):
        DatasetWriter(root, fps=30, features=FEATS, vcodec="h264", resume=True)
    assert DatasetWriter.reopen(root).num_episodes == 1  # still there, and unlocked after the refusals


def test_resume_on_a_new_directory_starts_a_session(tmp_path):
    w = DatasetWriter(tmp_path / "ds", fps=30, features=FEATS, resume=True)
    assert w.recovery is None and w.num_episodes == 0
    _write(w, range(1))
    w.finalize()
    with pytest.raises(ExistingDirectoryError, match="finished dataset; resume=True"):
        DatasetWriter(tmp_path / "ds", fps=30, features=FEATS, resume=True)
    with pytest.raises(WriterSessionError, match="a finished dataset to reopen"):
        DatasetWriter.reopen(tmp_path / "ds")


def test_finalize_is_idempotent_and_ends_the_writer(tmp_path):
    w = DatasetWriter(tmp_path / "ds", fps=30, features=FEATS)
    _write(w, range(1))
    root = w.finalize()
    assert w.finalize() == root
    with pytest.raises(WriterError, match="already finalized"):
        _write(w, range(1, 2))
    assert not (tmp_path / "ds" / SESSION_DIR).exists()
    w.abort()  # a no-op after finalize
    assert (tmp_path / "ds" / "meta/info.json").exists()


def test_finalize_refuses_a_writer_without_episodes(tmp_path):
    """No dataset of 0 episodes (no loader takes one): finalize refuses, changes nothing, and the writer goes on."""
    root = tmp_path / "ds"
    w = DatasetWriter(root, fps=30, features=FEATS)
    for _ in range(2):
        with pytest.raises(WriterError, match="no episode was added.*abort\\(discard=True\\)"):
            w.finalize()
    assert not (root / "meta").exists() and sorted(os.listdir(root)) == [SESSION_DIR]
    _write(w, range(1))
    w.finalize()
    _assert_episodes(root, 1)


def test_a_with_block_without_episodes_removes_its_session(tmp_path):
    root = tmp_path / "ds"
    with pytest.raises(WriterError, match="no episode was added"):
        with DatasetWriter(root, fps=30, features=FEATS):
            pass
    assert root.is_dir() and os.listdir(root) == []  # as `episodic repair` leaves a session without episodes
    with DatasetWriter(root, fps=30, features=FEATS) as w:  # the directory is free again
        _write(w, range(1))
    _assert_episodes(root, 1)


def test_refuses_to_overwrite(small_root):
    with pytest.raises(ExistingDirectoryError, match="holds a dataset"):
        DatasetWriter(small_root, fps=30, features=demo_features())
    assert (small_root / "meta/info.json").exists() and not (small_root / SESSION_DIR).exists()


def test_overwrite_replaces_a_dataset_or_a_session_never_other_files(tmp_path, small_root, copy_of):
    other = tmp_path / "home"
    other.mkdir()
    (other / "notes.txt").write_text("precious")
    for overwrite in (False, True):
        with pytest.raises(ExistingDirectoryError, match="not a LeRobot dataset"):
            DatasetWriter(other, fps=30, features=FEATS, overwrite=overwrite)
    assert os.listdir(other) == ["notes.txt"]  # nothing created, nothing deleted

    empty = tmp_path / "empty"
    empty.mkdir()
    DatasetWriter(empty, fps=30, features=FEATS, overwrite=True).abort(discard=True)

    ds = copy_of(small_root)
    w = DatasetWriter(ds, fps=30, features=FEATS, overwrite=True)
    assert sorted(os.listdir(ds)) == [SESSION_DIR]  # the old dataset is gone
    _write(w, range(2))
    w.abort()
    w = DatasetWriter(ds, fps=30, features=FEATS, overwrite=True)  # an interrupted session, replaced
    assert w.num_episodes == 0
    _write(w, range(1))
    w.finalize()
    _assert_episodes(ds, 1)

    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ExistingDirectoryError, match="not a directory"):
        DatasetWriter(a_file, fps=30, features=FEATS, overwrite=True)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_files_get_the_umask_mode(tmp_path, umask):
    old = os.umask(umask)
    try:
        w = DatasetWriter(tmp_path / "ds", fps=30, features=FEATS, data_files_size_in_mb=0.001)
        _write(w, range(2))
        w.finalize()
    finally:
        os.umask(old)
    root = tmp_path / "ds"
    for p in [root, *root.rglob("*")]:
        want = (0o777 if p.is_dir() else 0o666) & ~umask
        assert stat.S_IMODE(p.stat().st_mode) == want, (p, oct(p.stat().st_mode))


def test_full_files_are_joined_while_writing(tmp_path):
    """Finalize only joins the files still open: the full ones were joined by add_episode."""
    root = tmp_path / "ds"
    w = DatasetWriter(root, fps=30, features=FEATS, data_files_size_in_mb=0.002, video_files_size_in_mb=0.006)
    _write(w, range(6))
    joined = [f for f in _files(root) if not f.startswith(SESSION_DIR)]
    assert len([f for f in joined if f.startswith("data/")]) >= 3
    # segments are left only for the open file of each series (data, each camera), never for a joined one
    segments = [f for f in _files(root) if f.startswith(f"{SESSION_DIR}/segments/")]
    groups = {f.rsplit("/", 1)[0].split("/segments/")[1] for f in segments}
    assert len(groups) == 1 + len(w.video_keys), groups
    for g in groups:
        final = g + (".parquet" if g.startswith("data/") else ".mp4")
        assert final not in joined, final
    w.finalize()
    _assert_episodes(root, 6)


def test_array_stats_image_layout():
    frames = np.random.default_rng(0).integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
    s = array_stats(frames, image=True)
    assert s["mean"].shape == (3, 1, 1) and 0 <= s["min"].min() and s["max"].max() <= 1
    np.testing.assert_allclose(s["mean"].reshape(3), frames.reshape(-1, 3).mean(0) / 255)


@pytest.mark.parametrize(
    "n, hw, frames, picked_hw",
    [  # LeRobot's rule (compute_stats.estimate_num_samples' docstring: 1000 -> 177, 2000 -> 299 samples)
        (40, (96, 128), 40, (96, 128)),
        (150, (480, 640), 100, (120, 160)),  # stride 640 // 150 = 4
        (1000, (8, 8), 177, (8, 8)),
        (2000, (240, 424), 299, (120, 212)),  # stride 424 // 150 = 2
        (5, (720, 1280), 5, (90, 160)),  # stride 1280 // 150 = 8
        (3, (300, 100), 3, (150, 50)),  # taller than wide: 300 // 150 = 2
    ],
)
def test_camera_stats_sample_frames_as_lerobot_does(n, hw, frames, picked_hw):
    video = np.arange(n, dtype=np.int64)[:, None, None, None] + np.zeros((1, *hw, 1), np.int64)  # pixel = frame no
    picked = image_stats_sample(video)
    assert picked.shape == (frames, *picked_hw, 1)
    got = picked[:, 0, 0, 0]
    assert got[0] == 0 and got[-1] == n - 1 and np.all(np.diff(got) > 0)  # evenly spread, first and last in
    assert np.abs(np.diff(got) - (n - 1) / (frames - 1)).max() <= 1 if frames > 1 else True


def _failing_flush(monkeypatch, failures: int | None) -> list[str]:
    """Make the encoder's flush fail as in issue 20 (av.error.ArgumentError, errno 22, out of
    VideoFileWriter.close) the first `failures` times (None: every time); returns the paths it failed on."""
    import av

    from episodic.writer.video import VideoFileWriter

    real_close, failed = VideoFileWriter.close, []
    EINVAL_ERROR = getattr(av.error, "ArgumentError", None) or av.error.ValueError  # PyAV >= 16, PyAV 15

    def close(self, fsync=False):
        if failures is None or len(failed) < failures:
            failed.append(self.final_path)
            self.abort()
            raise EINVAL_ERROR(22, "Invalid argument", "avcodec_send_frame()")
        return real_close(self, fsync=fsync)

    monkeypatch.setattr(VideoFileWriter, "close", close)
    return failed


def test_an_encoder_failure_costs_an_attempt_not_the_episode(tmp_path, monkeypatch, caplog):
    root = tmp_path / "ds"
    w = DatasetWriter(root, fps=30, features=FEATS)
    failed = _failing_flush(monkeypatch, failures=2)  # twice on episode 0's first camera: encoded a 3rd time
    _write(w, range(3))
    assert len(failed) == 2 and len(set(failed)) == 1
    assert caplog.text.count("the av1 encoder failed (") == 2 and "attempt 3 of 3" in caplog.text
    w.finalize()
    _assert_episodes(root, 3)  # every frame, decoded, equals what was recorded
    assert not temp_files(root)


def test_an_encoder_that_always_fails_leaves_the_episode_to_be_added_again(tmp_path, monkeypatch):
    from episodic.format.errors import EncoderError

    root = tmp_path / "ds"
    w = DatasetWriter(root, fps=30, features=FEATS)
    _write(w, range(1))
    before = {f: (root / f).read_bytes() for f in _files(root)}
    failed = _failing_flush(monkeypatch, failures=None)
    with pytest.raises(
        EncoderError,
        match=r"episode 1: camera 'observation.images.top': the av1 encoder failed on "
        r"its 11 frames at each of 3 attempts .last: \w+: .*Invalid argument",
    ) as e:
        _write(w, range(1, 2))
    assert len(failed) == 3 and e.value.__cause__.errno == 22
    assert {f: (root / f).read_bytes() for f in _files(root)} == before  # nothing of episode 1 on disk
    monkeypatch.undo()
    _write(w, range(1, 3))  # the writer goes on; the episode is added again from the same frames
    w.finalize()
    _assert_episodes(root, 3)
