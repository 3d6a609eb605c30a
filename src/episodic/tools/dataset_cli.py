"""What `episodic demo`, `info`, `validate`, `repair`, `show`, `reencode` and `doctor` do and print (their
arguments: `episodic.cli`), and `chart`: a command's PNG, or the one line saying what to install."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .text import printable


def demo_command(args: argparse.Namespace) -> int:
    import torch

    from ..datasets import LeRobotDataset
    from ..demo import demo_path, write_demo_dataset
    from ..format.timebase import frames_to_seconds
    from ..progress import bar

    root = demo_path(args.episodes)
    if not (root / "meta" / "info.json").exists():
        print(f"writing the demo dataset ({args.episodes} episodes, 2 cameras) to {root}")
        write_demo_dataset(root, num_episodes=args.episodes, progress=not args.quiet)
    fps = 30
    ds = LeRobotDataset(
        "demo",
        root=root,
        delta_timestamps={
            "action": [frames_to_seconds(i, fps) for i in range(16)],
            "observation.state": [frames_to_seconds(-1, fps), 0.0],
        },
    )
    print(ds)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    frames, t0 = 0, time.perf_counter()
    for _ in range(args.epochs):
        for batch in bar(loader, enabled=not args.quiet, desc="loading", unit="batch"):
            frames += len(batch["index"])
    dt = time.perf_counter() - t0
    shapes = {k: tuple(v.shape) for k, v in batch.items() if hasattr(v, "shape")}
    print(f"last batch: {shapes}")
    print(
        f"{frames} frames in {dt:.2f} s: {frames / dt:.0f} frames/s ({args.workers} workers, batch {args.batch_size})"
    )
    return 0 if frames else 1


def info_command(args: argparse.Namespace) -> int:
    from ..storage import open_source
    from .dataset_info import summary

    src = open_source(args.path)
    print(summary(src.load_metadata()))
    return 0


def validate_command(args: argparse.Namespace) -> int:
    from .validate import validate

    report = validate(args.path, progress=not args.quiet, decode=not args.no_decode, full=args.full)
    checked = ", ".join(f"{n} {what}" for what, n in report.checked.items())
    if report.ok:
        print(f"OK: {printable(report.root)} ({checked})")
        return 0
    print(f"{len(report.problems)} problem(s) in {printable(report.root)} (checked {checked or 'nothing'}):")
    for p in report.problems:  # dataset text (task strings, names, paths) escaped for the terminal
        print(f"  - {printable(p)}")
    return 1


def repair_command(args: argparse.Namespace) -> int:
    from ..format.errors import EpisodicError
    from .repair import repair

    try:
        report = repair(args.path)
    except EpisodicError:
        raise
    except OSError as e:  # e.g. a full disk: the session is left as it was
        print(
            f"episodic repair: error: {e}; the session in {args.path} is unchanged: fix the cause and run repair again",
            file=sys.stderr,
        )
        return 2
    print(report.summary())
    return 0


def chart(command: str, output: str | None, default: str, draw: Callable[[str], Path]) -> int:
    """Draw a command's PNG with `draw(path)` (`output`, the -o given, else `default`) and say where it went.
    Without matplotlib: one line on stderr saying what to install, no file, and exit status 0 -- or 1 when
    the PNG was asked for by name (-o): everything else the command writes is written before."""
    from .plots import PlottingUnavailable

    try:
        out = draw(output if output is not None else default)
    except PlottingUnavailable as e:
        print(f"episodic {command}: {e}", file=sys.stderr)
        return 0 if output is None else 1
    print(f"chart: {printable(out)}")
    return 0


def show_command(args: argparse.Namespace) -> int:
    from .bench import demo_root, parse_cameras
    from .show import episode_text, read_episode, show_episode

    if args.frames < 1:
        raise SystemExit("episodic show: --frames must be >= 1")
    root = args.dataset if args.dataset is not None else str(demo_root(not args.quiet))
    table = read_episode(root, args.episode)
    print(episode_text(table))
    return chart(
        "show",
        args.output,
        "episode.png",
        lambda path: show_episode(
            root,
            args.episode,
            path,
            num_frames=args.frames,
            cameras=parse_cameras(args.cameras),
            progress=not args.quiet,
            table=table,
        ),
    )


def reencode_command(args: argparse.Namespace) -> int:
    from .reencode import reencode

    result = reencode(
        args.src,
        args.dst,
        vcodec=args.vcodec,
        gop=args.gop,
        crf=args.crf,
        workers=args.workers,
        progress=not args.quiet,
        fsync=not args.no_fsync,
    )
    print(printable(result.summary()))
    if args.json:
        import json

        from ..storage.atomic import atomic_write_bytes

        atomic_write_bytes(args.json, json.dumps(result.to_json(), indent=1).encode())
    return 0


def doctor_command(args: argparse.Namespace) -> int:
    from .doctor import doctor

    report = doctor(args.dataset, decode=not args.no_decode)
    for line in report.lines():  # dataset names and paths escaped for the terminal
        print(printable(line))
    if args.json:
        import json

        from ..storage.atomic import atomic_write_bytes

        atomic_write_bytes(args.json, json.dumps(report.to_json(), indent=1, default=str).encode())
    return 0
