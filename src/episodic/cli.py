"""The `episodic` command line."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .tools.text import printable


def _demo(args: argparse.Namespace) -> int:
    import torch

    from .datasets import LeRobotDataset
    from .demo import demo_path, write_demo_dataset
    from .format.timebase import frames_to_seconds
    from .progress import bar

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


def _info(args: argparse.Namespace) -> int:
    from .storage import open_source
    from .tools.dataset_info import summary

    src = open_source(args.path)
    print(summary(src.load_metadata()))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from .tools.validate import validate

    report = validate(args.path, progress=not args.quiet, decode=not args.no_decode, full=args.full)
    checked = ", ".join(f"{n} {what}" for what, n in report.checked.items())
    if report.ok:
        print(f"OK: {printable(report.root)} ({checked})")
        return 0
    print(f"{len(report.problems)} problem(s) in {printable(report.root)} (checked {checked or 'nothing'}):")
    for p in report.problems:  # dataset text (task strings, names, paths) escaped for the terminal
        print(f"  - {printable(p)}")
    return 1


def _repair(args: argparse.Namespace) -> int:
    from .format.errors import EpisodicError
    from .tools.repair import repair

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


def _bench(args: argparse.Namespace) -> int:
    from .tools import bench as B

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


def _chart(command: str, output: str | None, default: str, draw: Callable[[str], Path]) -> int:
    """Draw a command's PNG with `draw(path)` (`output`, the -o given, else `default`) and say where it went.
    Without matplotlib: one line on stderr saying what to install, no file, and exit status 0 -- or 1 when
    the PNG was asked for by name (-o): everything else the command writes is written before."""
    from .tools.plots import PlottingUnavailable

    try:
        out = draw(output if output is not None else default)
    except PlottingUnavailable as e:
        print(f"episodic {command}: {e}", file=sys.stderr)
        return 0 if output is None else 1
    print(f"chart: {printable(out)}")
    return 0


def _bench_summarize(args: argparse.Namespace) -> int:
    from .tools.bench.tables import load_results, summary_table  # no torch: summarizing reads JSON files only
    from .tools.plots import bench_summary_chart

    rows = load_results(args.results)
    print(summary_table(rows))
    return _chart(
        "bench-summarize",
        args.output,
        "bench_summary.png",
        lambda path: bench_summary_chart(rows, path, title=args.title),
    )


def _show(args: argparse.Namespace) -> int:
    from .tools.bench import demo_root, parse_cameras
    from .tools.show import episode_text, read_episode, show_episode

    if args.frames < 1:
        raise SystemExit("episodic show: --frames must be >= 1")
    root = args.dataset if args.dataset is not None else str(demo_root(not args.quiet))
    table = read_episode(root, args.episode)
    print(episode_text(table))
    return _chart(
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


def _lerobot_train(args: argparse.Namespace) -> int:
    from .lerobot.train import main as lerobot_train

    return lerobot_train(args.args)


def _mixture_check(args: argparse.Namespace) -> int:
    from .format.errors import MixturePreflightError, MixtureSpecError
    from .mixture import preflight

    def show(text: str) -> None:  # names, keys and messages come from specs and datasets: escaped line by line
        for line in text.splitlines():
            print(printable(line))

    try:
        report = preflight(
            args.spec,
            on_error=args.on_error,
            concurrency=args.concurrency,
            progress=not args.quiet,
            refresh_hub=args.refresh_hub,
        )
    except MixtureSpecError as e:
        show(str(e))
        return 1
    except MixturePreflightError as e:
        if e.report is None:
            raise
        report = e.report
    show(report.table())
    show(report.message())
    if report.spec.ignored:
        show(
            f"read but not used ({len(report.spec.ignored)}): {', '.join(report.spec.ignored[:8])}"
            + (" ..." if len(report.spec.ignored) > 8 else "")
        )
    if args.json:
        from .storage.atomic import atomic_write_bytes

        atomic_write_bytes(args.json, report.to_json().encode())
    return 1 if report.errors else 0


def _mixture_shares(args: argparse.Namespace) -> int:
    from .mixture import build_sampler, preflight
    from .mixture.checking.split_sides import side_report
    from .mixture.shares import order_counts, share_table
    from .tools.plots import share_chart

    if args.samples < 1:
        raise SystemExit("episodic mixture shares: --samples must be >= 1")

    full = preflight(args.spec, on_error=args.on_error, progress=not args.quiet)
    try:
        report = side_report(full, args.split)
    except ValueError as e:
        raise SystemExit(f"episodic mixture shares: {e}") from None
    sampler, used = build_sampler(report, seed=args.seed)
    counts = order_counts(sampler, args.samples, epoch=args.epoch)
    entries = [report.entries[i] for i in used]
    table = share_table(
        [e.name for e in entries],
        [e.group for e in entries],
        [e.share for e in entries],
        counts,
        [(e.episodes, e.frames) for e in entries],
    )
    table["split"] = args.split if full.spec.eval_split is not None else None
    width = max([len(str(g["group"])) for g in table["groups"]] + [5])
    print(printable(f"{'group':<{width}}  entries  target    realised"))
    for g in table["groups"]:
        print(printable(f"{str(g['group']):<{width}}  {g['entries']:>7}  {g['target']:>8.3%}  {g['realised']:>8.3%}"))
    worst = max(table["entries"], key=lambda e: abs(e["realised"] - e["target"]))
    side = f" (the {args.split} side of its eval split)" if table["split"] else ""
    print(printable(f"{sum(e.episodes for e in entries)} episodes, {sum(e.frames for e in entries)} frames{side}"))
    print(
        printable(
            f"{len(entries)} entries, the first {args.samples:,} samples of epoch {args.epoch}'s order (seed "
            f"{args.seed}): largest |realised - target| {table['max_abs_error']:.3%} ({worst['name']}), over "
            f"groups {table['max_abs_error_groups']:.3%}"
        )
    )
    if args.json:
        import json

        from .storage.atomic import atomic_write_bytes

        atomic_write_bytes(args.json, json.dumps(table, indent=1, default=str).encode())
    return _chart(
        "mixture shares",
        args.output,
        "mixture_shares.png",
        lambda path: share_chart(table, path, title=f"{printable(report.spec.origin)}: target vs realised shares"),
    )


def _episodes_arg(text: str) -> list[int]:
    """'0,3,5-9' -> [0, 3, 5, 6, 7, 8, 9]."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        lo, sep, hi = part.partition("-")
        try:
            out += list(range(int(lo), int(hi) + 1)) if sep else [int(part)]
        except ValueError:
            raise SystemExit(
                f"episodic stats: --episodes takes indices and ranges like 0,3,5-9, got {text!r}"
            ) from None
    return out


def _stats(args: argparse.Namespace) -> int:
    from .tools.stats_command import dataset_stats, is_spec, mixture_stats, stats_table, to_json

    if args.workers is not None and args.workers < 1:
        raise SystemExit("episodic stats: --workers must be >= 1")
    from .format.errors import EpisodicError

    cache = not args.no_cache
    try:
        if is_spec(args.target):
            if args.keys or args.episodes:
                raise SystemExit(
                    "episodic stats: --keys and --episodes apply to a dataset; a mixture spec selects "
                    "its entries' episodes and keys itself"
                )
            result = mixture_stats(
                args.target, group_by=args.group_by, workers=args.workers, progress=not args.quiet, cache=cache
            )
        else:
            keys = [k.strip() for k in args.keys.split(",") if k.strip()] if args.keys else None
            episodes = _episodes_arg(args.episodes) if args.episodes else None
            result = dataset_stats(
                args.target, keys=keys, episodes=episodes, workers=args.workers, progress=not args.quiet, cache=cache
            )
    except EpisodicError as e:  # every problem (spec, preflight, failed entries) on its own line
        lines = str(e).splitlines() or [""]
        print(f"episodic stats: error: {printable(lines[0])}", file=sys.stderr)
        for line in lines[1:]:
            print(printable(line), file=sys.stderr)
        return 2
    for line in stats_table(result).splitlines():  # names and keys come from specs and datasets
        print(printable(line))
    if args.json:
        import json

        from .storage.atomic import atomic_write_bytes

        atomic_write_bytes(args.json, json.dumps(to_json(result), indent=1).encode())
        print(f"statistics: {printable(args.json)}")
    return 0


def _run_fleet(
    command: str, task: str, target: str | list[str], out: str, options: dict, args: argparse.Namespace, single: bool
) -> int:
    from .format.errors import MixtureSpecError
    from .tools.fleet.driver import run_fleet
    from .tools.fleet.executors import ExecutorUnavailable
    from .tools.fleet.summary import summary_table
    from .tools.fleet.worklist import parse_shard

    try:
        summary = run_fleet(
            task,
            target,
            out,
            options=options,
            executor=args.executor,
            workers=args.workers,
            address=args.ray_address,
            shard=parse_shard(args.shard),
            progress=not args.quiet,
            summary_path=args.summary,
            single=single,
        )
    except ExecutorUnavailable as e:  # an optional dependency: one line saying what to install
        print(f"episodic {command}: {e}", file=sys.stderr)
        return 2
    except (ValueError, OSError, MixtureSpecError) as e:  # options, the list, the spec: before any dataset
        print(f"episodic {command}: error: {printable(e)}", file=sys.stderr)
        return 2
    for line in summary_table(summary).splitlines():  # names and errors come from lists and datasets
        print(printable(line))
    if summary.get("summary_path"):
        print(f"summary: {printable(summary['summary_path'])}")
    return 1 if summary["failed"] else 0


def _is_list(target: str) -> bool:
    """A list of datasets (a text file, or a mixture spec) rather than one dataset (a directory, URL, repo id)."""
    import os

    return os.path.isfile(os.path.expanduser(target))


def _relayout(args: argparse.Namespace) -> int:
    from .tools.fleet.commands import relayout_options

    return _run_fleet(
        args.command, args.command, args.src, args.dst, relayout_options(args), args, single=not _is_list(args.src)
    )


def _fleet(args: argparse.Namespace) -> int:
    target = args.target if _is_list(args.target) else [args.target]
    return _run_fleet(f"fleet {args.tool}", args.tool, target, args.out, dict(args.option or []), args, single=False)


def _reencode(args: argparse.Namespace) -> int:
    from .tools.reencode import reencode

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

        from .storage.atomic import atomic_write_bytes

        atomic_write_bytes(args.json, json.dumps(result.to_json(), indent=1).encode())
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from .tools.doctor import doctor

    report = doctor(args.dataset, decode=not args.no_decode)
    for line in report.lines():  # dataset names and paths escaped for the terminal
        print(printable(line))
    if args.json:
        import json

        from .storage.atomic import atomic_write_bytes

        atomic_write_bytes(args.json, json.dumps(report.to_json(), indent=1, default=str).encode())
    return 0


_NEEDS_PLOT = (
    '; needs matplotlib (pip install "episodic[plot]"): without it the PNG is skipped with a '
    "one-line note, exit status 1 when -o names it"
)


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
    p.add_argument(
        "--full",
        action="store_true",
        help="also decode every frame of every video and verify parquet "
        "page checksums (finds corrupted bytes inside files; slow)",
    )
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_validate)
    p = sub.add_parser(
        "repair",
        help="finalize an interrupted writing session up to its last complete episode",
        description="Finalize the dataset an interrupted DatasetWriter (killed, crashed, disk full) "
        "left in PATH: every episode whose add_episode returned is kept, the partial one "
        "and temporary files are removed, the metadata is written. A finished dataset is "
        "left as it is.",
    )
    p.add_argument("path", help="the dataset directory the writer was writing")
    p.set_defaults(func=_repair)
    p = sub.add_parser(
        "bench",
        help="measure loading: frames/s, time to first batch, latency, decode time, peak RSS",
        description="Measure one loader configuration on DATASET (default: the built-in demo dataset, "
        "written on first use). Prints a table; --json/--csv write the result. Exits "
        "non-zero with the error when nothing could be measured (e.g. undecodable videos).",
    )
    p.add_argument("dataset", nargs="?", help="dataset directory or fsspec URL (default: the demo dataset)")
    p.add_argument("--mode", choices=["map", "stream"], default="map")
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers (default 0)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--action-window", type=int, default=16, help="action frames: current + future (0: none)")
    p.add_argument("--state-window", type=int, default=2, help="observation.state frames: past + current (0: none)")
    p.add_argument(
        "--cameras",
        default=None,
        help="comma list of cameras (full or short names), 'none' for tabular only (default: all)",
    )
    p.add_argument("--batches", type=int, default=100, help="measured batches (default 100)")
    p.add_argument("--warmup", type=int, default=5, help="batches before measuring (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads in the main process")
    p.add_argument("--json", metavar="OUT", help="write the result as JSON")
    p.add_argument("--csv", metavar="OUT", help="write the result as one CSV row")
    p.add_argument(
        "--compare-lerobot",
        action="store_true",
        help="also run LeRobot's loader on the same data (episodic/tools/bench/lerobot_side.py, run "
        "with --lerobot-python) and print ratios",
    )
    p.add_argument(
        "--lerobot-python",
        metavar="PATH",
        help="python of a LeRobot 0.4.4 venv (default: .bench/lerobot-venv/bin/python in the "
        "current directory, when present)",
    )
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_bench)
    p = sub.add_parser(
        "bench-summarize",
        help="compare bench results: a table and a PNG chart",
        description="One table (stdout) and a chart of frames/s and p50/p95 batch latency for "
        "`episodic bench --json` results.",
    )
    p.add_argument("results", nargs="+", metavar="RESULTS.json")
    p.add_argument("-o", "--output", default=None, help="PNG to write (default bench_summary.png)" + _NEEDS_PLOT)
    p.add_argument("--title", default="episodic bench")
    p.set_defaults(func=_bench_summarize)
    p = sub.add_parser(
        "show", help="one episode: a text summary, and a PNG of camera frames over time and the state and action curves"
    )
    p.add_argument("dataset", nargs="?", help="dataset directory or fsspec URL (default: the demo dataset)")
    p.add_argument("--episode", type=int, default=0)
    p.add_argument("-o", "--output", default=None, help="PNG to write (default episode.png)" + _NEEDS_PLOT)
    p.add_argument("--frames", type=int, default=6, help="frames per camera, evenly spaced in time (default 6)")
    p.add_argument("--cameras", default=None, help="comma list of cameras, 'none' for curves only (default: all)")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_show)
    p = sub.add_parser(
        "lerobot-train",
        add_help=False,
        help="LeRobot's own training script (lerobot-train, LeRobot 0.4.x) on episodic's datasets",
        description="episodic lerobot-train ARGS: the usual lerobot-train arguments, passed to "
        "LeRobot's lerobot_train as they are (run where LeRobot is installed); see "
        "episodic.lerobot.train.",
    )
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(func=_lerobot_train)
    p = sub.add_parser(
        "stats",
        help="normalisation statistics computed from the data (a dataset, or a mixture's "
        "entries and groups), in parallel, cached",
        description="Exact mean/std/min/max/count and quantiles q01..q99 of numeric features, "
        "computed from the data files (cameras are not computed). DATASET: every numeric "
        "feature (--keys) of its episodes (--episodes). SPEC (a mixture spec file): each "
        "entry's state and action over its selected episodes with its index selections, "
        "under the mixture's shared keys, and pooled per group. Results are cached by "
        "content under the episodic cache: a re-run with nothing changed reads only the "
        "cache. Prints a table; --json writes LeRobot's stats layout.",
    )
    p.add_argument("target", metavar="DATASET|SPEC", help="dataset directory or fsspec URL, or a mixture spec file")
    p.add_argument("--json", metavar="OUT", help="write the statistics as JSON")
    p.add_argument(
        "--workers", type=int, default=None, help="processes computing entries side by side (default: the usable cores)"
    )
    from .tools.stats_command import GROUP_BY

    p.add_argument(
        "--group-by",
        choices=GROUP_BY,
        default="group",
        help="how a mixture's entries are pooled (default: the entry's group, else its robot type)",
    )
    p.add_argument("--keys", default=None, help="dataset: comma list of features (default: every numeric one)")
    p.add_argument("--episodes", default=None, help="dataset: episodes, e.g. 0,3,5-9 (default: all)")
    p.add_argument("--no-cache", action="store_true", help="compute everything, store nothing")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_stats)
    from .tools.fleet.commands import add_parsers as add_fleet_parsers

    add_fleet_parsers(sub, relayout=_relayout, fleet=_fleet)  # convert, repack, fleet
    from .tools.reencode import REENCODE_CODECS

    p = sub.add_parser(
        "reencode",
        help="a copy of a dataset with its videos encoded again (H.264 or HEVC, for "
        "GPU decoding where NVDEC has no AV1); the original is never modified",
        description="Copy the dataset in SRC to DST with every video re-encoded frame for frame "
        "(each frame at the original's time, so episodes and timestamps are unchanged), "
        "every other file copied byte for byte and info.json's video settings updated. "
        "Files are encoded in parallel; an interrupted run is resumed by running it "
        "again; a DST that already holds a verified copy is left as it is.",
    )
    p.add_argument("src", help="the dataset directory to copy (never modified)")
    p.add_argument("dst", help="the new dataset directory (absent or empty, or an interrupted copy to resume)")
    p.add_argument("--vcodec", choices=REENCODE_CODECS, required=True)
    p.add_argument("--gop", type=int, default=2, help="frames from one key frame to the next (default 2, as LeRobot)")
    p.add_argument("--crf", type=int, default=30, help="constant rate factor, lower is better (default 30)")
    p.add_argument("--workers", type=int, default=None, help="files encoded side by side (default: the usable cores)")
    p.add_argument("--no-fsync", action="store_true", help="do not flush each file to the disk before its rename")
    p.add_argument("--json", metavar="OUT", help="write what was done as JSON")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_reencode)
    p = sub.add_parser(
        "doctor",
        help="where this machine can decode video (CPU, GPU/NVDEC per codec) and why",
        description="Versions (episodic, torch, PyAV and its FFmpeg, PyNvVideoCodec), GPUs and what "
        "their NVDEC decodes per codec (asked of the driver), whether a container exposes "
        "the video driver; with DATASET, each camera's codec, pixel format and size, one "
        "frame decoded per available backend with its time, and which backend "
        "decode_device='cuda' would use for it and why.",
    )
    p.add_argument("dataset", nargs="?", help="dataset directory or fsspec URL (optional)")
    p.add_argument("--no-decode", action="store_true", help="do not decode a frame per camera")
    p.add_argument("--json", metavar="OUT", help="write the report as JSON")
    p.set_defaults(func=_doctor)
    p = sub.add_parser("mixture", help="weighted mixtures of datasets")
    msub = p.add_subparsers(dest="mixture_command", required=True)
    p = msub.add_parser(
        "check",
        help="preflight a mixture spec: every entry's metadata read and checked, no data",
        description="Read every entry's metadata (never a data file), check every mapping, feature, "
        "shape, dtype, fps and episode range, print a table of the entries and every "
        "problem; exit status 1 when there is an error.",
    )
    p.add_argument("spec", help="mixture spec file: JSON or YAML, episodic's format or OpenTau's")
    p.add_argument(
        "--on-error",
        choices=["raise", "skip"],
        default=None,
        help="skip: entries with errors are left out and their share re-spread (default: the spec's)",
    )
    p.add_argument("--concurrency", type=int, default=16, help="entries read at a time (default 16)")
    p.add_argument(
        "--refresh-hub", action="store_true", help="download Hub metadata again even when a local copy exists"
    )
    p.add_argument("--json", metavar="OUT", help="write the report as JSON")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_mixture_check)
    p = msub.add_parser(
        "shares",
        help="target vs realised shares of the first samples of a mixture's order (PNG)",
        description="Preflight SPEC, walk the first --samples positions of its order (no data read) "
        "and compare each entry's and group's realised share with its target: a table of "
        "groups, the largest deviation, and a PNG chart (entries and groups).",
    )
    p.add_argument("spec", help="mixture spec file: JSON or YAML, episodic's format or OpenTau's")
    p.add_argument("--samples", type=int, default=100_000, help="positions of the order counted (default 100000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epoch", type=int, default=0, help="epoch the count starts at (default 0)")
    p.add_argument(
        "--split",
        choices=["train", "eval"],
        default="train",
        help="with the spec's eval_split: the side whose order is counted (default train)",
    )
    p.add_argument("--on-error", choices=["raise", "skip"], default=None)
    p.add_argument("-o", "--output", default=None, help="PNG to write (default mixture_shares.png)" + _NEEDS_PLOT)
    p.add_argument("--json", metavar="OUT", help="write the share table as JSON")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_mixture_shares)
    return ap


def main(argv: list[str] | None = None) -> int:
    from .format.errors import EpisodicError

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["lerobot-train"]:  # every argument after it is LeRobot's, --help included
        return _lerobot_train(argparse.Namespace(args=argv[1:]))
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EpisodicError as e:
        print(f"episodic {args.command}: error: {printable(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
