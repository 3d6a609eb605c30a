"""`episodic reencode`: a new dataset whose videos are encoded again, frame for frame; the original untouched;
crash-safe, resumable, verified when already done. Checked against PyAV's own decode of both files and against
the items the loader gives for the original."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from episodic.cli import main
from episodic.datasets import EpisodicDataset
from episodic.demo import write_demo_dataset
from episodic.format.errors import DatasetFormatError, ExistingDirectoryError, WriterInputError, WriterLockedError
from episodic.tools import reencode as R
from episodic.writer.lock import DirectoryLock

# The codec's loss on the demo's synthetic frames (sharp edges, noise) at crf 30, measured: mean absolute
# difference per frame at most 4.8/255 (H.264) and 3.9/255 (HEVC); the bound leaves room for encoder versions.
MEAN_ABS_BOUND = 8.0


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """An AV1 dataset by episodic's writer: 6 episodes, 2 cameras (48x64), at least 2 video files per camera (how
    many depends on the encoder's file sizes: SVT-AV1 3.0, PyAV 15, writes 5 files in all, 4.1 writes 4)."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("re") / "src",
        num_episodes=6,
        min_length=12,
        max_length=30,
        height=48,
        width=64,
        progress=False,
        video_files_size_in_mb=0.01,
    )


def _videos(root: Path) -> list[Path]:
    return sorted(root.rglob("*.mp4"))


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _pyav_frames(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every frame (rgb24) and its time, decoded by PyAV alone."""
    with av.open(str(path)) as c:
        frames = [(f.to_ndarray(format="rgb24"), float(f.pts * f.time_base)) for f in c.decode(video=0)]
    return np.stack([f for f, _ in frames]).astype(np.int16), np.array([t for _, t in frames])


@pytest.mark.parametrize("vcodec", ["h264", "hevc"])
def test_copy_is_the_original_within_the_codecs_loss(source, tmp_path, vcodec):
    before = _tree(source)
    dst = tmp_path / vcodec
    result = R.reencode(source, dst, vcodec=vcodec, workers=2)
    assert _tree(source) == before  # the original is never modified
    videos = _videos(source)
    assert len(videos) >= 4
    assert (result.files_encoded, result.files_kept, result.skipped) == (len(videos), 0, False)
    for p in videos:  # every file: same frame count, same times, pixels within the loss (PyAV as reference)
        a, ta = _pyav_frames(p)
        b, tb = _pyav_frames(dst / p.relative_to(source))
        assert a.shape == b.shape and np.array_equal(ta, tb), p
        with av.open(str(dst / p.relative_to(source))) as c:
            assert c.streams.video[0].codec_context.name == vcodec
        per_frame = np.abs(a - b).reshape(len(a), -1).mean(axis=1)
        assert per_frame.max() <= MEAN_ABS_BOUND, (p, per_frame.max())
    copied, original = _tree(dst), before
    for rel, digest in original.items():  # every other file byte for byte (data, episodes, tasks, stats)
        if not rel.endswith(".mp4") and rel != "meta/info.json":
            assert copied[rel] == digest, rel
    assert set(copied) == set(original)
    info, info0 = (json.loads((r / "meta/info.json").read_text()) for r in (dst, source))
    for k, f in info["features"].items():
        if f["dtype"] == "video":
            assert (f["info"]["video.codec"], f["info"]["video.g"], f["info"]["video.crf"]) == (vcodec, 2, 30)
            f["info"] = info0["features"][k]["info"] = None
    assert info == info0  # nothing else changed
    # items: every one, tabular values equal, frames within the loss (the same frames: times kept)
    a = EpisodicDataset(source, return_uint8=True)
    b = EpisodicDataset(dst, return_uint8=True)
    assert len(a) == len(b)
    ia, ib = a.get_batch(np.arange(len(a))), b.get_batch(np.arange(len(b)))
    for k in ia:
        if k in a.camera_keys:
            d = (ia[k].to(torch.int16) - ib[k].to(torch.int16)).abs().reshape(len(a), -1).float().mean(1)
            assert d.max() <= MEAN_ABS_BOUND, k
        elif k == "task":
            assert ia[k] == ib[k]
        else:
            assert torch.equal(ia[k], ib[k]), k
    assert not (dst / R.WORK_DIR).exists()


def test_done_copy_is_verified_and_skipped(source, tmp_path):
    dst = tmp_path / "c"
    R.reencode(source, dst, vcodec="h264")
    mtimes = {p: p.stat().st_mtime_ns for p in dst.rglob("*")}
    again = R.reencode(source, dst, vcodec="h264")
    assert again.skipped and again.files_encoded == 0
    assert {p: p.stat().st_mtime_ns for p in dst.rglob("*")} == mtimes
    with pytest.raises(ExistingDirectoryError, match="not a hevc copy"):  # other settings: not this copy
        R.reencode(source, dst, vcodec="hevc")
    data = next(dst.glob("data/*/*.parquet"))
    data.write_bytes(data.read_bytes()[:-10])  # damaged: the copy does not verify
    with pytest.raises(ExistingDirectoryError, match="size"):
        R.reencode(source, dst, vcodec="h264")


def test_interrupted_copy_resumes(source, tmp_path, monkeypatch):
    dst = tmp_path / "c"
    real = R._Copy._encode
    calls = []

    def failing(self, a, b, rel, tick):
        calls.append(rel)
        if len(calls) == 2:
            raise KeyboardInterrupt  # as a kill would stop it: in the middle of the second file
        return real(self, a, b, rel, tick)

    monkeypatch.setattr(R._Copy, "_encode", failing)
    with pytest.raises(KeyboardInterrupt):
        R.reencode(source, dst, vcodec="hevc", workers=1)
    monkeypatch.undo()
    assert not (dst / "meta/info.json").exists()  # not a dataset: no loader takes it
    with pytest.raises(DatasetFormatError):
        EpisodicDataset(dst)
    done = dst / calls[0]
    assert done.is_file()
    stale = done.parent / f".{done.name}.12345.0123456789ab.tmp"  # what a killed encoder leaves
    stale.write_bytes(b"partial")
    mtime = done.stat().st_mtime_ns
    result = R.reencode(source, dst, vcodec="hevc", workers=1)
    # the first file, and any the pool had started before the failure reached it, are kept
    assert (
        result.resumed and result.files_kept >= 1 and result.files_kept + result.files_encoded == len(_videos(source))
    )
    assert result.temp_files_removed == [str(stale.relative_to(dst))] and not stale.exists()
    assert done.stat().st_mtime_ns == mtime  # the finished file was kept, not encoded again
    assert R.reencode(source, dst, vcodec="hevc").skipped  # and the whole copy verifies


def test_resume_with_other_settings_is_refused(source, tmp_path, monkeypatch):
    dst = tmp_path / "c"
    monkeypatch.setattr(R, "_run", lambda job, result, workers: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        R.reencode(source, dst, vcodec="h264")
    monkeypatch.undo()
    with pytest.raises(ExistingDirectoryError, match="other settings.*crf"):
        R.reencode(source, dst, vcodec="h264", crf=20)


def test_second_run_at_once_is_refused(source, tmp_path):
    dst = tmp_path / "c"
    (dst / R.WORK_DIR).mkdir(parents=True)
    (dst / R.WORK_DIR / R.SETTINGS).write_text(
        json.dumps(R._settings(str(source.resolve()), "h264", 2, 30, "yuv420p", None))
    )
    lock = DirectoryLock.acquire(str(dst / R.COPY_LOCK), str(dst))
    try:
        with pytest.raises(WriterLockedError, match="another writer"):
            R.reencode(source, dst, vcodec="h264")
    finally:
        lock.release()


def test_a_run_that_finds_the_copy_finished_once_it_holds_the_lock_leaves_it(source, tmp_path, monkeypatch):
    """Another run (e.g. a split copy's final step in another array task) finishes the copy between this run's
    first look at DST and its lock: under the lock it looks again, verifies the copy and leaves it (it used to
    make a new work directory in the finished copy and do the final step again)."""
    dst = tmp_path / "c"
    real_probe, started, others = R._Copy.probe, [], []

    def probe_then_the_other_run_finishes(self, keys=None):
        real_probe(self, keys)
        if not started:  # this run's probe: the other run, whole, in that window
            started.append(True)
            others.append(R.reencode(source, dst, vcodec="h264"))

    monkeypatch.setattr(R._Copy, "probe", probe_then_the_other_run_finishes)
    result = R.reencode(source, dst, vcodec="h264")
    assert others and not others[0].skipped and others[0].files_encoded == len(_videos(source))
    assert result.skipped and result.files_encoded == 0
    assert sorted(p.name for p in dst.iterdir()) == ["data", "meta", "videos"]  # no work directory, no lock


@pytest.mark.slow
def test_h264_copies_are_the_same_bytes_run_after_run(source, tmp_path):
    """The same copy made 150 times writes the same bytes every time. Before x264 was capped at AVX2 on CPUs with
    AVX-512 (writer.video.x264_params), ~0.3% of the files of such runs came out with other bytes on this
    project's machines (measured: 9 of 2,000 in 400 runs of a 5-file dataset)."""
    seen: dict[str, set[str]] = {}
    for i in range(150):
        dst = tmp_path / f"c{i}"
        R.reencode(source, dst, vcodec="h264", fsync=False)
        for path in _videos(dst):
            seen.setdefault(str(path.relative_to(dst)), set()).add(hashlib.sha1(path.read_bytes()).hexdigest())
        shutil.rmtree(dst)
    assert len(seen) == len(_videos(source)) and all(len(v) == 1 for v in seen.values()), seen


def test_refusals_before_anything_is_written(source, tmp_path):
    with pytest.raises(ExistingDirectoryError, match="outside the original"):
        R.reencode(source, source / "copy", vcodec="h264")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ExistingDirectoryError, match="not empty"):
        R.reencode(source, foreign, vcodec="h264")
    assert sorted(os.listdir(foreign)) == ["notes.txt"]
    with pytest.raises(WriterInputError, match="observation.images.*too narrow for HEVC"):
        narrow = write_demo_dataset(
            tmp_path / "narrow", num_episodes=1, min_length=4, max_length=4, height=32, width=32, progress=False
        )
        R.reencode(narrow, tmp_path / "n", vcodec="hevc")
    assert not (tmp_path / "n").exists()
    with pytest.raises(DatasetFormatError, match="not a directory"):
        R.reencode(tmp_path / "missing", tmp_path / "m", vcodec="h264")


def test_frames_off_the_fps_grid_are_refused(source, tmp_path, copy_of):
    src = copy_of(source)
    video = sorted(src.rglob("*.mp4"))[0]
    with av.open(str(video)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    with av.open(str(video), "w") as c:  # the same frames at 33 ms steps: frame i at 0.033 i s, not i/30 s
        s = c.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        s.codec_context.time_base = Fraction(1, 1000)
        for i, img in enumerate(frames):
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts, f.time_base = 33 * i, Fraction(1, 1000)
            for pkt in s.encode(f):
                c.mux(pkt)
        for pkt in s.encode():
            c.mux(pkt)
    with pytest.raises(DatasetFormatError, match=r"frame \d+ is at .* not .*i/fps"):
        R.reencode(src, tmp_path / "c", vcodec="h264")


def test_cli(source, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert (
        main(
            ["reencode", str(source), str(tmp_path / "c"), "--vcodec", "hevc", "--crf", "28", "--json", str(out), "-q"]
        )
        == 0
    )
    assert f"{len(_videos(source))} video file(s) re-encoded to hevc" in capsys.readouterr().out
    record = json.loads(out.read_text())
    assert (record["vcodec"], record["crf"], record["files_encoded"]) == ("hevc", 28, len(_videos(source)))
    assert main(["reencode", str(source), str(tmp_path / "c"), "--vcodec", "hevc", "--crf", "28", "-q"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["reencode", str(source), str(tmp_path / "d"), "--vcodec", "vp9"])
