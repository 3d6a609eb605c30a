"""Writers under load (issue 20, item 9): three writer processes at once on a 2-core machine, each recording
small 3-camera AV1 datasets, ~1,000 episodes in all. No episode may be lost: every add_episode returns (an
encoder error is retried from the frames in memory; tests/writer/test_dataset_writer.py covers that path),
and every dataset finalizes and validates with all its episodes."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

CHILD = r"""
import json, logging, os, shutil, sys, time
import numpy as np
from episodic import DatasetWriter
from episodic.tools.validate import validate

base, seed, datasets, start_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
retries = []
class Count(logging.Handler):
    def emit(self, record):
        if "encoder failed" in record.getMessage():
            retries.append(record.getMessage())
logging.getLogger("episodic.writer.video").addHandler(Count())
cams = [f"observation.images.c{i}" for i in range(3)]
feats = {"observation.state": {"dtype": "float32", "shape": [6]},
         **{c: {"dtype": "video", "shape": [48, 64, 3]} for c in cams}}
rng = np.random.default_rng(seed)
out = {"episodes": 0, "lost": [], "invalid": [], "retries": retries}
while time.time() < start_at:
    time.sleep(0.01)
for d in range(datasets):
    root = os.path.join(base, f"w{seed}-{d}")
    w = DatasetWriter(root, fps=30, features=feats)
    lengths = rng.integers(8, 25, size=3)
    for e, n in enumerate(lengths):
        ramp = np.linspace(0, 255, 64, dtype=np.float32)[None, None, :, None]
        frames = {c: (ramp + rng.integers(0, 64, (n, 48, 1, 3))).clip(0, 255).astype(np.uint8) for c in cams}
        try:
            w.add_episode({"observation.state": rng.standard_normal((n, 6)).astype(np.float32), **frames}, task="t")
            out["episodes"] += 1
        except Exception as ex:
            out["lost"].append(f"{root} episode {e}: {type(ex).__name__}: {ex}")
    w.finalize()
    report = validate(root, progress=False)
    if not report.ok or report.checked.get("episodes") != 3:
        out["invalid"].append(f"{root}: {report.problems[:3]}")
    shutil.rmtree(root)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_three_writers_at_once_lose_no_episode(tmp_path):
    writers, datasets = 3, 111  # 3 x 111 datasets x 3 episodes = 999 episodes, 2,997 encoded segments
    start_at = time.time() + 2
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path), str(seed), str(datasets), str(start_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(writers)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    episodes = sum(r["episodes"] for r in results)
    retries = [m for r in results for m in r["retries"]]
    print(f"{episodes} episodes added by {writers} writers at once; {len(retries)} encoder retries: {retries[:5]}")
    assert [m for r in results for m in r["lost"]] == []
    assert [m for r in results for m in r["invalid"]] == []
    assert episodes == writers * datasets * 3
