"""Peak RSS of a streaming consumer vs dataset size (tabular-only synthetic datasets, 1x / 10x / 100x).

Writes tabular datasets with episodic's writer (episodes of 155 frames, state/action float32[14]) of
--base-episodes x each --scales, then streams --batches batches from each with StreamingLeRobotDataset
(pool 64, batch 32, action window 16, state window 2, 0 workers), each in a fresh process, and prints the
peak RSS of the process tree. The peak should not grow with the dataset: the pool holds 64 episodes.

    python benchmarks/bench_stream_memory.py --dir /tmp/stream-mem [--scales 1,10,100] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def write(root: str, episodes: int) -> None:
    import numpy as np
    from tqdm.auto import tqdm

    from episodic import DatasetWriter

    feats = {"observation.state": {"dtype": "float32", "shape": [14]}, "action": {"dtype": "float32", "shape": [14]}}
    rng = np.random.default_rng(0)
    with DatasetWriter(root, fps=30, features=feats, overwrite=True) as w:
        for e in tqdm(range(episodes), desc=f"writing {episodes} episodes", unit="ep", disable=None):
            x = rng.standard_normal((155, 14)).astype(np.float32)
            w.add_episode({"observation.state": x, "action": x}, task=f"task {e % 7}")


def measure(root: str, batches: int) -> dict:
    from episodic import StreamingLeRobotDataset
    from episodic.tools.rss import PeakRSS

    with PeakRSS() as rss:
        t0 = time.perf_counter()
        ds = StreamingLeRobotDataset(
            "mem",
            root=root,
            episode_pool_size=64,
            seed=0,
            delta_timestamps={"action": [i / 30 for i in range(16)], "observation.state": [-1 / 30, 0]},
        )
        n = 0
        for i, b in enumerate(ds.loader(batch_size=32, num_workers=0)):
            n += len(b["index"])
            if i + 1 >= batches:
                break
        dt = time.perf_counter() - t0
    return {"frames_total": ds.num_frames, "peak_rss_tree_mb": rss.peak / 2**20, "frames": n, "seconds": dt}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--base-episodes", type=int, default=200)
    ap.add_argument("--scales", default="1,10,100")
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--json")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.batches)))
        return 0
    rows = []
    for scale in [int(s) for s in args.scales.split(",")]:
        root = os.path.join(args.dir, f"x{scale}")
        if not os.path.exists(os.path.join(root, "meta", "info.json")):
            write(root, args.base_episodes * scale)
        out = subprocess.run(
            [sys.executable, __file__, "--dir", args.dir, "--one", root, "--batches", str(args.batches)],
            check=True,
            capture_output=True,
            text=True,
        )
        row = {"scale": scale, **json.loads(out.stdout.strip().splitlines()[-1])}
        rows.append(row)
        print(
            f"x{scale:<4} {row['frames_total']:>10,} frames   peak RSS {row['peak_rss_tree_mb']:7.1f} MB   "
            f"({row['frames']} frames streamed in {row['seconds']:.1f} s)",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
