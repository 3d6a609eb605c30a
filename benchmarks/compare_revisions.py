"""Before/after: the same loader benchmark on two checkouts of episodic, interleaved, in one run.

Each checkout's own benchmarks/bench_loaders.py measures one configuration per fresh process (`--one`) with
that checkout's src/ first on PYTHONPATH; runs alternate between the checkouts so machine noise hits both
alike. Prints medians over --repeats runs and the after/before ratios.

    git worktree add --detach /tmp/before <old-commit>
    python benchmarks/compare_revisions.py --before /tmp/before --after . --root DATASET --modes map,stream
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

FIGURES = ("frames_per_s", "time_to_first_batch_s", "peak_rss_tree_mb")


def one(checkout: str, root: str, mode: str, workers: int, video: bool, batches: int, warmup: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.abspath(checkout), "src")}
    cmd = [
        sys.executable,
        os.path.join(checkout, "benchmarks", "bench_loaders.py"),
        "--root",
        root,
        "--mode",
        mode,
        "--one",
        f"{workers},{int(video)}",
        "--batches",
        str(batches),
        "--warmup",
        str(warmup),
    ]
    from episodic.tools.rss import PeakRSS  # memory sampled from outside, the same way for both checkouts

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with PeakRSS(pid=proc.pid, interval_s=0.1) as mem:
        out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"{checkout}: exited {proc.returncode}: {err[-2000:]}")
    res = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    return {**res, "peak_rss_tree_mb": mem.peak / 2**20}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="checkout (directory with src/ and benchmarks/) measured first")
    ap.add_argument("--after", required=True)
    ap.add_argument("--root", required=True, help="dataset")
    ap.add_argument("--modes", default="map,stream")
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--video", default="1,0", help="1: with cameras, 0: tabular only")
    ap.add_argument("--batches", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    rows = []
    for mode in args.modes.split(","):
        for workers in map(int, args.workers.split(",")):
            for video in (v == "1" for v in args.video.split(",")):
                runs: dict[str, list[dict]] = {"before": [], "after": []}
                for _ in range(args.repeats):
                    for name in ("before", "after"):
                        runs[name].append(
                            one(getattr(args, name), args.root, mode, workers, video, args.batches, args.warmup)
                        )
                row = {"mode": mode, "workers": workers, "video": video}
                for name, rs in runs.items():
                    for k in FIGURES:
                        row[f"{name}_{k}"] = statistics.median(r[k] for r in rs)
                    row[f"{name}_runs_frames_per_s"] = [r["frames_per_s"] for r in rs]
                row["ratio_frames_per_s"] = row["after_frames_per_s"] / row["before_frames_per_s"]
                rows.append(row)
                print(
                    f"{mode:6} w{workers} {'video  ' if video else 'tabular'}  "
                    f"frames/s {row['before_frames_per_s']:>9,.0f}"
                    f" -> {row['after_frames_per_s']:>9,.0f} ({row['ratio_frames_per_s']:.2f}x)   first batch "
                    f"{row['before_time_to_first_batch_s']:.2f} -> {row['after_time_to_first_batch_s']:.2f} s   "
                    "peak RSS "
                    f"{row['before_peak_rss_tree_mb']:,.0f} -> {row['after_peak_rss_tree_mb']:,.0f} MB",
                    flush=True,
                )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "args": vars(args)}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
