"""What `episodic bench` and `bench-summarize` do and print (their arguments: `episodic.cli`)."""

from __future__ import annotations

import argparse
import sys

from .dataset_cli import chart


def bench_command(args: argparse.Namespace) -> int:
    from . import bench as B

    progress = not args.quiet
    cfg = B.BenchConfig(
        dataset=args.dataset,
        mode=args.mode,
        workers=args.workers,
        batch_size=args.batch_size,
        action_window=args.action_window,
        state_window=args.state_window,
        cameras=B.parse_cameras(args.cameras),
        batches=args.batches,
        warmup=args.warmup,
        seed=args.seed,
        torch_threads=args.torch_threads,
        progress=progress,
    )
    try:
        record = B.run_bench(cfg)
    except Exception as e:  # noqa: BLE001  a failed run reports its error and no figure
        print(f"episodic bench: error: {B.concise_error(e)}", file=sys.stderr)
        return 2
    if args.compare_lerobot:
        if not args.quiet:
            print("running LeRobot's loader on the same data ...", file=sys.stderr)
        lr, msg = B.run_lerobot(cfg, record["dataset"]["root"], args.lerobot_python)
        print(msg, file=sys.stderr)
        if lr is not None:
            record["lerobot"], record["ratios"] = lr, B.ratios(record, lr)
    print(B.format_table(record))
    if args.json:
        B.write_json(record, args.json)
    if args.csv:
        B.write_csv(record, args.csv)
    return 0


def bench_summarize_command(args: argparse.Namespace) -> int:
    from .bench.tables import load_results, summary_table  # no torch: summarizing reads JSON files only
    from .plots import bench_summary_chart

    rows = load_results(args.results)
    print(summary_table(rows))
    return chart(
        "bench-summarize",
        args.output,
        "bench_summary.png",
        lambda path: bench_summary_chart(rows, path, title=args.title),
    )
