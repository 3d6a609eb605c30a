"""The fleet tools' commands (`episodic convert`, `repack`, `fleet`): their arguments, added to the `episodic`
command by `add_parsers`, and what they do (`relayout_command`, `fleet_command`: `driver.run_fleet` with them, the
summary printed)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ...format.info import DEFAULT_CHUNKS_SIZE, DEFAULT_DATA_FILE_MB, DEFAULT_VIDEO_FILE_MB
from ..text import printable
from .executors import EXECUTORS
from .relayout_plan import VERIFY
from .tasks import TASKS
from .worklist import SPLIT_ABOVE

__all__ = ["add_parsers", "fleet_command", "option_arg", "relayout_command", "relayout_options"]


def option_arg(text: str) -> tuple[str, object]:
    """'key=value' -> (key, value as JSON when it parses, else the text)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--option takes KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def relayout_options(args: argparse.Namespace) -> dict:
    """`RelayoutOptions` (as JSON) from `convert` / `repack` arguments."""
    options = {
        "data_file_mb": args.data_file_mb,
        "video_file_mb": args.video_file_mb,
        "chunks_size": args.chunks_size,
        "verify": args.verify,
    }
    if args.row_group_mb is not None:
        options["row_group_mb"] = None if args.row_group_mb == 0 else args.row_group_mb
    return options


def _fleet_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("many datasets (a list or a mixture spec)")
    g.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help='local: a pool of processes (default); ray: a Ray cluster (pip install "episodic[ray]")',
    )
    g.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local processes, or the CPUs of a local Ray started for the run (default: the usable cores)",
    )
    g.add_argument(
        "--ray-address",
        default=None,
        help="the Ray cluster to run on (ray.init(address=...): 'auto', "
        "'ray://host:10001'); default: a local Ray for this run",
    )
    g.add_argument(
        "--shard",
        default=None,
        metavar="K/N",
        help="work on array task K's share of N (0 <= K < N): the units (datasets) at positions K, K+N, ... of "
        "the list; 'slurm': this SLURM array task's (SLURM_ARRAY_TASK_ID/COUNT)",
    )
    g.add_argument(
        "--summary",
        default=None,
        metavar="OUT.json",
        help="where the JSON summary goes (default OUT/fleet-TOOL[-shard-K-of-N].json)",
    )
    p.add_argument("-q", "--quiet", action="store_true")


def _relayout_parser(sub, name: str, help_text: str, description: str, relayout) -> None:
    p = sub.add_parser(name, help=help_text, description=description)
    p.add_argument(
        "src",
        metavar="SRC",
        help="a dataset (directory, fsspec URL or Hub repo id), or a list of them: a "
        "text file of sources (one per line) or a mixture spec",
    )
    p.add_argument(
        "dst",
        metavar="DST",
        help="the new dataset's directory (for a list: the directory of the new datasets, one per entry, by name)",
    )
    p.add_argument(
        "--data-file-mb",
        type=float,
        default=DEFAULT_DATA_FILE_MB,
        help="data files of about this size (default %(default)s)",
    )
    p.add_argument(
        "--video-file-mb",
        type=float,
        default=DEFAULT_VIDEO_FILE_MB,
        help="video files of about this size (default %(default)s)",
    )
    p.add_argument(
        "--chunks-size", type=int, default=DEFAULT_CHUNKS_SIZE, help="files per chunk directory (default %(default)s)"
    )
    p.add_argument(
        "--row-group-mb",
        type=float,
        default=None,
        help="whole episodes packed into row groups of up to this size, larger episodes split into "
        "pieces of about it; 0: one row group per episode (the default: episodic's streaming reader "
        "then fetches the fewest bytes)",
    )
    p.add_argument(
        "--verify",
        choices=VERIFY,
        default="structure",
        help="the check before a new dataset counts as done: structure (episodic validate without "
        "decoding, default), frames (also each episode's first and last frame), none",
    )
    _fleet_options(p)
    p.set_defaults(func=relayout)


def add_parsers(sub) -> None:
    """Add `convert`, `repack` and `fleet` to the `episodic` command's subparsers `sub` (run by `relayout_command`
    and `fleet_command`)."""
    _relayout_parser(
        sub,
        "convert",
        "a LeRobot v2.x (or v3.0) dataset written as v3.0: files by size, frames copied (no re-encoding), items equal",
        "Write SRC anew in LeRobot's v3.0 layout at DST: episodes packed into data and video files by "
        "size (one row group per episode, as LeRobot writes), rows copied as they are, frames copied "
        "as packets (never re-encoded), metadata and statistics carried over: every item equals the "
        "original's. Crash-safe: a run stopped at any point is continued by running it again; a "
        "finished result of the same source and options is skipped. The source is only read. SRC may "
        "be a list of datasets (a text file or a mixture spec): one task per dataset, on local "
        "processes, a Ray cluster (--executor ray) or as one task of a SLURM array (--shard).",
        relayout_command,
    )
    _relayout_parser(
        sub,
        "repack",
        "a v3.0 dataset re-laid out: row groups and files of target sizes, chunk directories; items equal",
        "Write SRC anew at DST with one row group per episode, or row groups of up to --row-group-mb "
        "(with a page index and page checksums either way), data and video files of about --data-file-mb / "
        "--video-file-mb (many small files into few, or large ones split at episode boundaries) and --chunks-size "
        "files per chunk directory; rows and frame packets copied, every item equal. Crash-safe and "
        "resumable like convert; SRC may be a list (see convert).",
        relayout_command,
    )
    p = sub.add_parser(
        "fleet",
        help="a tool over many datasets: convert, repack, validate, stats (local processes, "
        "Ray, or a SLURM array task)",
        description="Run TOOL on every dataset of LIST (a text file of sources, one per line, or a "
        "mixture spec), one task per dataset (per video file of a large one for reencode), results under "
        "OUT (by dataset name): on a pool of local processes (default), on a Ray cluster (--executor ray, "
        "--ray-address), or as one task of a SLURM array (--shard K/N or slurm: the "
        "units at positions K, K+N, ...; a unit is a dataset, or for reencode one video file of a large "
        "dataset: --split-above). Each task is crash-safe and skips a result "
        "already done and verified, so a killed run is finished by running it again. "
        "Prints a summary (done, skipped, failed with the error) and writes it as JSON; "
        "exit status 1 when a dataset failed. Tool options: --option KEY=VALUE (JSON "
        "values), e.g. convert/repack: data_file_mb, video_file_mb, chunks_size, "
        "row_group_mb, verify; validate: full, decode; stats: keys.",
    )
    p.add_argument("tool", choices=sorted(TASKS), help="the per-dataset task")
    p.add_argument("target", metavar="LIST", help="a text file of sources or a mixture spec (or one dataset)")
    p.add_argument("out", metavar="OUT", help="the directory of the results")
    p.add_argument("--option", action="append", type=option_arg, metavar="KEY=VALUE", help="a tool option")
    p.add_argument(
        "--split-above",
        type=_bytes_arg,
        default=SPLIT_ABOVE,
        metavar="BYTES",
        help="reencode: a local dataset whose video files add up to more than this (e.g. 500M, 2G; default "
        "2G) is split, one task per video file, then its final step; the other tools work on whole datasets",
    )
    _fleet_options(p)
    p.set_defaults(func=fleet_command)


def _bytes_arg(text: str) -> int:
    from ... import config

    try:
        return config.parse_bytes(text, "--split-above")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _run_fleet(
    command: str, task: str, target: str | list[str], out: str, options: dict, args: argparse.Namespace, single: bool
) -> int:
    from ...format.errors import MixtureSpecError
    from .driver import run_fleet
    from .executors import ExecutorUnavailable
    from .summary import summary_table
    from .worklist import parse_shard

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
            split_above=getattr(args, "split_above", SPLIT_ABOVE),
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
    return os.path.isfile(os.path.expanduser(target))


def relayout_command(args: argparse.Namespace) -> int:
    return _run_fleet(
        args.command, args.command, args.src, args.dst, relayout_options(args), args, single=not _is_list(args.src)
    )


def fleet_command(args: argparse.Namespace) -> int:
    target = args.target if _is_list(args.target) else [args.target]
    return _run_fleet(f"fleet {args.tool}", args.tool, target, args.out, dict(args.option or []), args, single=False)
