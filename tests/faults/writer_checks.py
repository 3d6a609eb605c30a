"""Checks shared by the writer fault tests: a recovered dataset holds exactly the episodes writer_child.py
wrote (rows equal, every decoded frame the very frame written), in LeRobot's layout and nothing else."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

import writer_child as wc
from episodic import EpisodicDataset
from episodic.storage.atomic import temp_files
from episodic.tools.validate import validate
from episodic.writer.session import SESSION_DIR

FRAME_TOLERANCE = 12  # mean absolute difference /255 of a decoded frame from the written one (AV1, crf 30)


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


def assert_episodes(root: Path, seed: int, count: int, decode: bool = True) -> None:
    """`root` holds episodes 0..count-1 of writer_child's session `seed`, exactly."""
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
            for c, cam in enumerate(wc.CAMERAS):
                for f in range(n):
                    img = rows[cam][start + f].numpy().transpose(1, 2, 0)
                    assert wc.read_code(img) == wc.expected_code(seed, e, f, c), f"episode {e} frame {f} {cam}"
                    diff = np.abs(img.astype(np.float64) - want[cam][f]).mean()
                    assert diff < FRAME_TOLERANCE, f"episode {e} frame {f} {cam}: differs by {diff}"
        start += n
    report = validate(str(root), progress=False)
    assert report.ok, report.problems
