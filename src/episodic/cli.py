"""The `episodic` command line."""

from __future__ import annotations

import argparse
import sys
import time


def _demo(args: argparse.Namespace) -> int:
    import torch
    from tqdm.auto import tqdm

    from .datasets import LeRobotDataset
    from .demo import write_demo_dataset
    from .storage.cache import default_cache_dir

    root = default_cache_dir() / "demo" / f"demo-{args.episodes}ep"
    if not (root / "meta" / "info.json").exists():
        print(f"writing the demo dataset ({args.episodes} episodes, 2 cameras) to {root}")
        write_demo_dataset(root, num_episodes=args.episodes, progress=not args.quiet)
    fps = 30
    ds = LeRobotDataset("demo", root=root, delta_timestamps={"action": [i / fps for i in range(16)],
                                                             "observation.state": [-1 / fps, 0.0]})
    print(ds)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    frames, t0 = 0, time.perf_counter()
    for _ in range(args.epochs):
        for batch in tqdm(loader, desc="loading", unit="batch", disable=args.quiet or None):
            frames += len(batch["index"])
    dt = time.perf_counter() - t0
    shapes = {k: tuple(v.shape) for k, v in batch.items() if hasattr(v, "shape")}
    print(f"last batch: {shapes}")
    print(f"{frames} frames in {dt:.2f} s: {frames / dt:.0f} frames/s ({args.workers} workers, batch {args.batch_size})")
    return 0 if frames else 1


def _info(args: argparse.Namespace) -> int:
    from .format import load_metadata
    from .storage import open_source
    from .tools.info import summary

    src = open_source(args.path)
    print(summary(load_metadata(src.fs, src.root)))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from .tools.validate import validate

    report = validate(args.path, progress=not args.quiet, decode=not args.no_decode)
    checked = ", ".join(f"{n} {what}" for what, n in report.checked.items())
    if report.ok:
        print(f"OK: {report.root} ({checked})")
        return 0
    print(f"{len(report.problems)} problem(s) in {report.root} (checked {checked or 'nothing'}):")
    for p in report.problems:
        print(f"  - {p}")
    return 1


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="episodic", description="Fast, exact loading of LeRobot-format robot datasets.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="write a small demo dataset and load it with a DataLoader")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_demo)
    p = sub.add_parser("info", help="print a dataset's summary")
    p.add_argument("path", help="dataset directory or fsspec URL")
    p.set_defaults(func=_info)
    p = sub.add_parser("validate", help="check every file of a dataset; non-zero exit when a problem is found")
    p.add_argument("path")
    p.add_argument("--no-decode", action="store_true", help="skip decoding the first/last frame of each episode")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_validate)
    return ap


def main(argv: list[str] | None = None) -> int:
    from .format.errors import EpisodicError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EpisodicError as e:
        print(f"episodic {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
