"""The `episodic` command line."""

from __future__ import annotations

import argparse
import sys

from .tools import bench_cli, dataset_cli, mixture_cli
from .tools.text import printable


def _lerobot_train(args: argparse.Namespace) -> int:
    from .lerobot.train import main as lerobot_train

    return lerobot_train(args.args)


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
    p.set_defaults(func=dataset_cli.demo_command)
    p = sub.add_parser("info", help="print a dataset's summary")
    p.add_argument("path", help="dataset directory or fsspec URL")
    p.set_defaults(func=dataset_cli.info_command)
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
    p.set_defaults(func=dataset_cli.validate_command)
    p = sub.add_parser(
        "repair",
        help="finalize an interrupted writing session up to its last complete episode",
        description="Finalize the dataset an interrupted DatasetWriter (killed, crashed, disk full) "
        "left in PATH: every episode whose add_episode returned is kept, the partial one "
        "and temporary files are removed, the metadata is written. A finished dataset is "
        "left as it is.",
    )
    p.add_argument("path", help="the dataset directory the writer was writing")
    p.set_defaults(func=dataset_cli.repair_command)
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
    p.set_defaults(func=bench_cli.bench_command)
    p = sub.add_parser(
        "bench-summarize",
        help="compare bench results: a table and a PNG chart",
        description="One table (stdout) and a chart of frames/s and p50/p95 batch latency for "
        "`episodic bench --json` results.",
    )
    p.add_argument("results", nargs="+", metavar="RESULTS.json")
    p.add_argument("-o", "--output", default=None, help="PNG to write (default bench_summary.png)" + _NEEDS_PLOT)
    p.add_argument("--title", default="episodic bench")
    p.set_defaults(func=bench_cli.bench_summarize_command)
    p = sub.add_parser(
        "show", help="one episode: a text summary, and a PNG of camera frames over time and the state and action curves"
    )
    p.add_argument("dataset", nargs="?", help="dataset directory or fsspec URL (default: the demo dataset)")
    p.add_argument("--episode", type=int, default=0)
    p.add_argument("-o", "--output", default=None, help="PNG to write (default episode.png)" + _NEEDS_PLOT)
    p.add_argument("--frames", type=int, default=6, help="frames per camera, evenly spaced in time (default 6)")
    p.add_argument("--cameras", default=None, help="comma list of cameras, 'none' for curves only (default: all)")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=dataset_cli.show_command)
    p = sub.add_parser(
        "lerobot-train",
        add_help=False,
        help="LeRobot's own training script (lerobot-train, LeRobot 0.4.x or 0.6.x) on episodic's datasets",
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
    p.set_defaults(func=mixture_cli.statistics_command)
    from .tools.fleet.commands import add_parsers as add_fleet_parsers

    add_fleet_parsers(sub)  # convert, repack, fleet
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
    p.set_defaults(func=dataset_cli.reencode_command)
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
    p.set_defaults(func=dataset_cli.doctor_command)
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
    p.set_defaults(func=mixture_cli.mixture_check_command)
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
    p.set_defaults(func=mixture_cli.mixture_shares_command)
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
