"""Checks shared by the writer fault tests: a recovered dataset holds exactly the episodes writer_child.py
wrote (rows equal, every decoded frame pixel-equal to the frame as encoded), in LeRobot's layout and nothing
else."""

from __future__ import annotations

import json
import os
from pathlib import Path

import av
import numpy as np

from episodic import EpisodicDataset
from episodic.storage.atomic import temp_files
from episodic.tools.validate import validate
from episodic.writer.session import SESSION_DIR
from episodic.writer.video import VideoFileWriter

import writer_child as wc


def open_files_under(path: Path) -> list[str]:
    """Files under `path` this process holds open (Linux), but a live writer's lock: a descriptor left open
    on a discarded temporary file keeps its disk space."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)) and not target.endswith(f"{SESSION_DIR}/lock"):
            found.append(target)
    return found


def count_episodes(root: Path) -> int:
    return json.loads((root / "meta" / "info.json").read_text())["total_episodes"]


def assert_layout(root: Path) -> None:
    """Exactly LeRobot's v3.0 layout: no session directory, no temporary file, nothing else."""
    assert not temp_files(root), temp_files(root)
    assert sorted(os.listdir(root)) == ["data", "meta", "videos"], sorted(os.listdir(root))


def reference_frames(frames: np.ndarray, workdir: Path) -> list[np.ndarray]:
    """`frames` encoded alone with the session's settings (as the writer encodes each episode's segment;
    the encoders are deterministic) and decoded: what the dataset must give back, pixel for pixel."""
    path = str(workdir / "reference.mp4")
    opts = {k: v for k, v in wc.WRITER_OPTIONS.items() if k in ("vcodec", "gop", "crf", "pix_fmt", "preset")}
    w = VideoFileWriter(path, wc.WIDTH, wc.HEIGHT, wc.WRITER_OPTIONS["fps"], **opts)
    w.add(frames)
    w.close()
    with av.open(path) as c:
        out = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    os.unlink(path)
    return out


def assert_episodes(root: Path, seed: int, count: int, decode: bool = True) -> None:
    """`root` holds episodes 0..count-1 of writer_child's session `seed`, exactly: equal rows, and each
    camera's frames decode to exactly the frames of that episode encoded alone (its segment)."""
    workdir = root.parent
    ds = EpisodicDataset(root, return_uint8=True, video_keys=None if decode else [])
    assert ds.meta.episodes.length.tolist() == [wc.episode_length(seed, e) for e in range(count)]
    rows = ds.get_batch(np.arange(len(ds)))
    start = 0
    for e in range(count):
        want = wc.episode(seed, e)
        n = wc.episode_length(seed, e)
        sl = slice(start, start + n)
        for key in ("observation.state", "action"):
            assert np.array_equal(rows[key][sl].numpy(), want[key]), (e, key)
        assert rows["episode_index"][sl].tolist() == [e] * n
        assert rows["frame_index"][sl].tolist() == list(range(n))
        assert rows["index"][sl].tolist() == list(range(start, start + n))
        assert np.array_equal(rows["timestamp"][sl].numpy(), (np.arange(n) / 30).astype(np.float32))
        assert ds.meta.tasks[int(rows["task_index"][start])] == wc.task_of(e)
        if decode:
            for cam in wc.CAMERAS:
                got = rows[cam][sl].numpy().transpose(0, 2, 3, 1)
                ref = reference_frames(want[cam], workdir)
                for f in range(n):  # the very frames encoded for this episode: same pixels, none shifted
                    assert np.array_equal(got[f], ref[f]), f"episode {e} frame {f} {cam}: not the frame written"
        start += n
    report = validate(str(root), progress=False)
    assert report.ok, report.problems
