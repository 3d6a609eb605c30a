#!/usr/bin/env python3
"""The codec's loss of `episodic reencode`: an AV1 dataset by episodic's writer (480x640, 2 cameras, frames like a
fixed robot camera's: `episodic.testing.synthetic.camera_frames`; g=2, crf=30, as LeRobot writes) re-encoded to
H.264 and HEVC (g=2, crf=30), every frame of the copy against the original's, each decoded by PyAV alone:
per-frame max and mean absolute difference (/255). Usage: python benchmarks/reencode_loss.py [OUT.json]"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import av
import numpy as np

from episodic.testing.synthetic import camera_frames
from episodic.tools.reencode import reencode
from episodic.writer import DatasetWriter

H, W, EPISODES, LENGTH = 480, 640, 4, 75


def pyav_frames(path: Path) -> np.ndarray:
    with av.open(str(path)) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)]).astype(np.int16)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="reencode-loss-"))
    keys = ["observation.images.top", "observation.images.wrist"]
    feats = {
        "observation.state": {"dtype": "float32", "shape": [6]},
        **{k: {"dtype": "video", "shape": [H, W, 3]} for k in keys},
    }
    with DatasetWriter(tmp / "av1", fps=30, features=feats, vcodec="av1", fsync=False) as w:
        for _e in range(EPISODES):
            w.add_episode(
                {
                    "observation.state": np.zeros((LENGTH, 6), np.float32),
                    **{k: camera_frames(H, W, LENGTH, seed=i) for i, k in enumerate(keys)},
                },
                task="pick",
            )
    record = {"source": f"AV1 {H}x{W}, {len(keys)} cameras, {EPISODES * LENGTH} frames each, g=2 crf=30"}
    first = []  # the original's own loss, for scale: its frames against the frames it was written from
    for i, k in enumerate(keys):
        raw = np.tile(camera_frames(H, W, LENGTH, seed=i), (EPISODES, 1, 1, 1)).astype(np.int16)
        first.append(
            np.abs(pyav_frames(next((tmp / "av1").rglob(f"{k}/**/*.mp4"))) - raw).reshape(len(raw), -1).mean(1)
        )
    record["av1_vs_written_frames_mean_abs"] = round(float(np.concatenate(first).mean()), 3)
    print("the original's own loss, mean abs per frame:", record["av1_vs_written_frames_mean_abs"], flush=True)
    for vcodec in ("h264", "hevc"):
        t0 = time.perf_counter()
        r = reencode(tmp / "av1", tmp / vcodec, vcodec=vcodec, fsync=False)
        seconds = time.perf_counter() - t0
        mx, mean = [], []
        for p in sorted((tmp / "av1").rglob("*.mp4")):
            a, b = pyav_frames(p), pyav_frames(tmp / vcodec / p.relative_to(tmp / "av1"))
            assert a.shape == b.shape
            d = np.abs(a - b).reshape(len(a), -1)
            mx.append(d.max(1))
            mean.append(d.mean(1))
        mx, mean = np.concatenate(mx), np.concatenate(mean)
        record[vcodec] = {
            "frames": int(len(mx)),
            "seconds": round(seconds, 1),
            "size_ratio": round(r.bytes_after / r.bytes_before, 2),
            "per_frame_max_abs": {"max": int(mx.max()), "median": float(np.median(mx))},
            "per_frame_mean_abs": {"max": round(float(mean.max()), 3), "mean": round(float(mean.mean()), 3)},
        }
        print(vcodec, record[vcodec], flush=True)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
