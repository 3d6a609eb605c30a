r"""Loading benchmark, map-style or streaming: frames/s, time to first batch, peak memory (PSS and RSS) of the
process tree, and each figure as a fraction of the machine's decode limit for the same files.

--mode map: episodic's LeRobotDataset under a torch DataLoader (shuffled); --mode stream: episodic's
StreamingLeRobotDataset through `ds.loader()` (pool of 64 episodes). Batch 32, action window of 16 future
frames, state window of 2; cameras float32 (LeRobot's items) and/or uint8 (`--dtypes f32,u8`), optionally
tabular only (`--tabular`); workers 0 and 2. With --lerobot-python it runs LeRobot 0.4.4's loader of the same
kind on the same data in the same run (episodic's LeRobot-side script, src/episodic/tools/bench/lerobot_side.py,
run with that python) and prints the ratios. Each configuration runs in a fresh subprocess, the loaders
interleaved; figures are medians over --repeats runs. Time to first batch counts from reading the metadata
(dataset construction included), after imports, on both sides. Peak memory is sampled from outside (this
process samples the child's tree every 0.1 s, the same way for both loaders); PSS counts shared pages
once, RSS in every process that maps them.

The decode limit (benchmarks/decode_limit.py, plain PyAV, measured in the same run unless --no-limit):
random single frames per second with one process per core, divided by the cameras per sample.

    python benchmarks/bench_loaders.py --root DATASET [--mode stream] [--json OUT] \
        [--lerobot-python .bench/lerobot-venv/bin/lerobot-python]
    python benchmarks/bench_loaders.py --write-synthetic DIR --episodes 200 [--height 480 --width 640 --cameras 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from child_run import measured

HERE = os.path.dirname(os.path.abspath(__file__))


def run_episodic(
    root: str, mode: str, workers: int, video: bool, batches: int, warmup: int, batch_size: int, uint8: bool = False
) -> dict:
    import torch

    from episodic import LeRobotDataset, StreamingLeRobotDataset
    from episodic.format import load_metadata
    from episodic.storage import open_source

    t_start = time.perf_counter()  # like LeRobot's side: after imports, from metadata to first batch
    src = open_source(root)
    fps = load_metadata(src.fs, src.root).fps
    dt = {"action": [i / fps for i in range(16)], "observation.state": [-1 / fps, 0.0]}
    cams = None if video else []
    if mode == "stream":
        ds = StreamingLeRobotDataset(
            "bench", root=root, delta_timestamps=dt, video_keys=cams, episode_pool_size=64, return_uint8=uint8
        )
        loader = ds.loader(batch_size=batch_size, num_workers=workers)
    else:
        ds = LeRobotDataset("bench", root=root, delta_timestamps=dt, video_keys=cams, return_uint8=uint8)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=batch_size, shuffle=True, num_workers=workers, generator=torch.Generator().manual_seed(0)
        )
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
    return {
        "loader": f"episodic-{mode}",
        "frames_per_s": n / elapsed,
        "time_to_first_batch_s": ttfb,
        "workers": workers,
        "video": video,
        "samples": n,
    }


CONFIGS = {"f32": (1, False), "u8": (1, True), "tabular": (0, False)}  # name: (video, uint8)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root")
    ap.add_argument("--mode", choices=["map", "stream"], default="map")
    ap.add_argument("--write-synthetic")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--height", type=int, default=96)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--cameras", type=int, default=2)
    ap.add_argument("--min-length", type=int, default=140)
    ap.add_argument("--max-length", type=int, default=170)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--dtypes", default="f32", help="comma list of f32, u8 (cameras as episodic hands them out)")
    ap.add_argument("--tabular", action="store_true", help="also episodic without cameras")
    ap.add_argument("--batches", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lerobot-python", help="python of a venv with lerobot 0.4.4 installed")
    ap.add_argument("--no-limit", action="store_true", help="skip measuring the decode limit")
    ap.add_argument("--limit-seconds", type=float, default=8.0)
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--baseline", help="a previous --json output to compare with")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.one:  # child process: one measurement
        w, v, *u = args.one.split(",")
        print(
            json.dumps(
                run_episodic(
                    args.root,
                    args.mode,
                    int(w),
                    v == "1",
                    args.batches,
                    args.warmup,
                    args.batch_size,
                    uint8=bool(u and u[0] == "1"),
                )
            )
        )
        return 0
    if args.write_synthetic:
        from episodic.demo import CAMERAS, write_demo_dataset

        extra = ("observation.images.side", "observation.images.left", "observation.images.right")
        write_demo_dataset(
            args.write_synthetic,
            num_episodes=args.episodes,
            min_length=args.min_length,
            max_length=args.max_length,
            height=args.height,
            width=args.width,
            cameras=(CAMERAS + extra)[: args.cameras],
        )
        return 0
    from episodic.tools.bench import lerobot_side_script  # imports no torch

    limit = None
    if not args.no_limit:
        sys.path.insert(0, HERE)
        from decode_limit import measure

        limit = measure(args.root, args.limit_seconds)
        print(json.dumps({"decode_limit": limit}), flush=True)
    configs = [c for c in args.dtypes.split(",") if c] + (["tabular"] if args.tabular else [])
    lerobot_side = str(lerobot_side_script())
    rows = []
    for workers in [int(w) for w in args.workers.split(",")]:
        runs: dict[str, list] = {c: [] for c in configs} | {"lerobot": []}
        for _ in range(args.repeats):  # interleave the loaders so machine noise hits all alike
            for c in configs:
                video, u8 = CONFIGS[c]
                runs[c].append(
                    measured(
                        [
                            sys.executable,
                            __file__,
                            "--root",
                            args.root,
                            "--mode",
                            args.mode,
                            "--one",
                            f"{workers},{video},{int(u8)}",
                            "--batches",
                            str(args.batches),
                            "--warmup",
                            str(args.warmup),
                            "--batch-size",
                            str(args.batch_size),
                        ]
                    )
                )
            if args.lerobot_python:  # LeRobot 0.4.4 cannot leave cameras out: it always decodes them (float32)
                cmd = [
                    args.lerobot_python,
                    lerobot_side,
                    f"bench-{args.mode}",
                    "--root",
                    args.root,
                    "--workers",
                    str(workers),
                    "--batch-size",
                    str(args.batch_size),
                    "--batches",
                    str(args.batches),
                    "--warmup",
                    str(args.warmup),
                    "--torch-threads",
                    "1",
                ]
                try:
                    runs["lerobot"].append(measured(cmd))
                except (RuntimeError, ValueError) as e:
                    print(f"lerobot run failed: {e}", file=sys.stderr)
        row: dict = {"mode": args.mode, "workers": workers}
        for name, rs in runs.items():
            for k in ("frames_per_s", "time_to_first_batch_s", "peak_pss_tree_mb", "peak_rss_tree_mb"):
                if rs:
                    row[f"{name}_{k}"] = statistics.median(r[k] for r in rs)
            if rs:
                row[f"{name}_runs_frames_per_s"] = [round(r["frames_per_s"], 1) for r in rs]
            if rs and limit:
                row[f"{name}_of_limit"] = row[f"{name}_frames_per_s"] / limit["limit_samples_per_s"]
                row[f"{name}_of_decode_only"] = row[f"{name}_frames_per_s"] / limit["decode_only_limit_samples_per_s"]
            if rs and runs["lerobot"] and name != "lerobot":
                row[f"{name}_vs_lerobot"] = row[f"{name}_frames_per_s"] / statistics.median(
                    r["frames_per_s"] for r in runs["lerobot"]
                )
        rows.append(row)
        print(json.dumps(row), flush=True)
    _table(rows, configs + (["lerobot"] if args.lerobot_python else []), limit)
    if args.baseline:
        base = {b["workers"]: b for b in json.load(open(args.baseline))["rows"]}
        for r in rows:
            b = base.get(r["workers"])
            for c in configs:
                if b and f"{c}_frames_per_s" in b:
                    ratio = r[f"{c}_frames_per_s"] / b[f"{c}_frames_per_s"]
                    print(f"vs baseline, workers={r['workers']} {c}: {ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "decode_limit": limit, "args": vars(args)}, f, indent=2)
    return 0


def _table(rows: list[dict], names: list[str], limit: dict | None) -> None:
    nan = float("nan")
    if limit:
        print(
            f"\ndecode limit: {limit['random_per_core_fps']:.0f} random frames/s per core "
            f"({limit['decodes_per_random_frame']:.2f} decodes each), {limit['random_all_cores_fps']:.0f} on "
            f"{limit['cores']} cores = {limit['limit_samples_per_s']:.0f} samples/s with {limit['cameras']} cameras; "
            f"sequential {limit['sequential_per_core_fps']:.0f} frames/s per core; decoding only (no RGB "
            f"conversion) {limit['decode_only_all_cores_fps']:.0f} frames/s on {limit['cores']} cores = "
            f"{limit['decode_only_limit_samples_per_s']:.0f} samples/s"
        )
    print(
        f"\n{'mode':>6} {'workers':>7} {'loader':>8} {'frames/s':>9} {'of limit':>8} {'of dec.':>8} {'vs LR':>6} "
        f"{'ttfb s':>7} {'PSS MB':>7} {'RSS MB':>7}"
    )
    for r in rows:
        for n in names:
            if f"{n}_frames_per_s" not in r:
                continue
            print(
                f"{r['mode']:>6} {r['workers']:>7} {n:>8} {r[f'{n}_frames_per_s']:>9.0f} "
                f"{r.get(f'{n}_of_limit', nan):>8.0%} "
                f"{r.get(f'{n}_of_decode_only', nan):>8.0%} "
                f"{r.get(f'{n}_vs_lerobot', nan):>6.2f} {r[f'{n}_time_to_first_batch_s']:>7.2f} "
                f"{r[f'{n}_peak_pss_tree_mb']:>7.0f} {r[f'{n}_peak_rss_tree_mb']:>7.0f}"
            )


if __name__ == "__main__":
    sys.exit(main())
