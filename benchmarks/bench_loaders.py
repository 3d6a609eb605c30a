"""Loading benchmark, map-style or streaming: frames/s, time to first batch and peak RSS of the process tree.

--mode map: episodic's LeRobotDataset under a torch DataLoader (shuffled); --mode stream: episodic's
StreamingLeRobotDataset through `ds.loader()` (pool of 64 episodes). Batch 32, action window of 16 future
frames, state window of 2, with video and tabular-only, for 0 and 2 workers; with --lerobot-python it runs
LeRobot 0.4.4's loader of the same kind on the same data in the same run (episodic's LeRobot-side script,
src/episodic/tools/bench/lerobot_side.py, run with that python)
and prints the ratios. Each configuration runs in a fresh subprocess, the loaders interleaved; figures are
medians over --repeats runs. Time to first batch counts from reading the metadata (dataset construction
included), after imports, on both sides.

    python benchmarks/bench_loaders.py --root DATASET [--mode stream] [--lerobot-python .bench/lerobot-venv/bin/python] [--json OUT]
    python benchmarks/bench_loaders.py --write-synthetic DIR --episodes 200   # make a dataset with episodic's writer
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def run_episodic(root: str, mode: str, workers: int, video: bool, batches: int, warmup: int, batch_size: int) -> dict:
    import torch

    from episodic import LeRobotDataset, StreamingLeRobotDataset
    from episodic.format import load_metadata
    from episodic.storage import open_source
    from episodic.tools.rss import PeakRSS

    with PeakRSS() as rss:
        t_start = time.perf_counter()  # like LeRobot's side: after imports, from metadata to first batch
        src = open_source(root)
        fps = load_metadata(src.fs, src.root).fps
        dt = {"action": [i / fps for i in range(16)], "observation.state": [-1 / fps, 0.0]}
        cams = None if video else []
        if mode == "stream":
            ds = StreamingLeRobotDataset("bench", root=root, delta_timestamps=dt, video_keys=cams, episode_pool_size=64)
            loader = ds.loader(batch_size=batch_size, num_workers=workers)
        else:
            ds = LeRobotDataset("bench", root=root, delta_timestamps=dt, video_keys=cams)
            loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                                                 generator=torch.Generator().manual_seed(0))
        it = iter(loader)
        next(it)
        ttfb = time.perf_counter() - t_start
        n, t0 = 0, None
        for i, batch in enumerate(it):
            if i == warmup:  # the clock starts when this batch arrives: count the ones after it
                t0, n = time.perf_counter(), 0
                continue
            n += len(batch["index"])
            if i >= warmup + batches:
                break
        elapsed = time.perf_counter() - t0
        if hasattr(it, "close"):
            it.close()
    return {"loader": f"episodic-{mode}", "frames_per_s": n / elapsed, "time_to_first_batch_s": ttfb,
            "peak_rss_tree_mb": rss.peak / 2**20, "workers": workers, "video": video, "samples": n}


def subprocess_json(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    return json.loads(lines[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root")
    ap.add_argument("--mode", choices=["map", "stream"], default="map")
    ap.add_argument("--write-synthetic")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--batches", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lerobot-python", help="python of a venv with lerobot 0.4.4 installed")
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--baseline", help="a previous --json output to compare with")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.one:  # child process: one measurement
        w, v = args.one.split(",")
        print(json.dumps(run_episodic(args.root, args.mode, int(w), v == "1", args.batches, args.warmup, args.batch_size)))
        return 0
    if args.write_synthetic:
        from episodic.demo import write_demo_dataset

        write_demo_dataset(args.write_synthetic, num_episodes=args.episodes, min_length=140, max_length=170)
        return 0
    from episodic.tools.bench import lerobot_side_script  # imports no torch

    lerobot_side = str(lerobot_side_script())
    rows = []
    for workers in [int(w) for w in args.workers.split(",")]:
        runs = {"episodic": [], "episodic_tabular": [], "lerobot": []}
        for _ in range(args.repeats):  # interleave the loaders so machine noise hits all alike
            for name, video in (("episodic", 1), ("episodic_tabular", 0)):
                runs[name].append(subprocess_json([sys.executable, __file__, "--root", args.root, "--mode", args.mode,
                                                   "--one", f"{workers},{video}",
                                                   "--batches", str(args.batches), "--warmup", str(args.warmup),
                                                   "--batch-size", str(args.batch_size)]))
            if args.lerobot_python:  # LeRobot 0.4.4 cannot leave cameras out: it always decodes them
                cmd = [args.lerobot_python, lerobot_side, f"bench-{args.mode}", "--root", args.root,
                       "--workers", str(workers), "--batch-size", str(args.batch_size), "--batches", str(args.batches),
                       "--warmup", str(args.warmup), "--torch-threads", "1"]
                try:
                    runs["lerobot"].append(subprocess_json(cmd))
                except (subprocess.CalledProcessError, ValueError) as e:
                    print(f"lerobot run failed: {e}", file=sys.stderr)
        row = {"mode": args.mode, "workers": workers}
        for name, rs in runs.items():
            for k in ("frames_per_s", "time_to_first_batch_s", "peak_rss_tree_mb"):
                if rs:
                    row[f"{name}_{k}"] = statistics.median(r[k] for r in rs)
        if runs["lerobot"]:
            row["video_speedup"] = row["episodic_frames_per_s"] / row["lerobot_frames_per_s"]
            row["tabular_speedup"] = row["episodic_tabular_frames_per_s"] / row["lerobot_frames_per_s"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    nan = float("nan")
    print(f"\n{'workers':>7} {'video f/s':>10} {'tabular f/s':>12} {'lerobot f/s':>12} {'video x':>8} {'tabular x':>10} "
          f"{'ttfb ep/lr (s)':>15} {'peak rss ep/lr (MB)':>20}")
    for r in rows:
        print(f"{r['workers']:>7} {r['episodic_frames_per_s']:>10.0f} {r['episodic_tabular_frames_per_s']:>12.0f} "
              f"{r.get('lerobot_frames_per_s', nan):>12.0f} {r.get('video_speedup', nan):>8.1f} {r.get('tabular_speedup', nan):>10.1f} "
              f"{r['episodic_time_to_first_batch_s']:>7.2f}/{r.get('lerobot_time_to_first_batch_s', nan):<7.2f} "
              f"{r['episodic_peak_rss_tree_mb']:>10.0f}/{r.get('lerobot_peak_rss_tree_mb', nan):<9.0f}")
    if args.baseline:
        base = {b["workers"]: b for b in json.load(open(args.baseline))["rows"]}
        for r in rows:
            b = base.get(r["workers"])
            if b:
                print(f"vs baseline, workers={r['workers']}: video {r['episodic_frames_per_s'] / b['episodic_frames_per_s']:.2f}x, "
                      f"tabular {r['episodic_tabular_frames_per_s'] / b['episodic_tabular_frames_per_s']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "args": vars(args)}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
