"""What `episodic mixture check`, `mixture shares` and `stats` do and print (their arguments: `episodic.cli`)."""

from __future__ import annotations

import argparse
import sys

from .dataset_cli import chart
from .text import printable


def mixture_check_command(args: argparse.Namespace) -> int:
    from ..format.errors import MixturePreflightError, MixtureSpecError
    from ..mixture import preflight

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
        from ..storage.atomic import atomic_write_bytes

        atomic_write_bytes(args.json, report.to_json().encode())
    return 1 if report.errors else 0


def mixture_shares_command(args: argparse.Namespace) -> int:
    from ..mixture import build_sampler, preflight
    from ..mixture.checking.split_sides import side_report
    from ..mixture.shares import order_counts, share_table
    from .plots import share_chart

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

        from ..storage.atomic import atomic_write_bytes

        atomic_write_bytes(args.json, json.dumps(table, indent=1, default=str).encode())
    return chart(
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


def statistics_command(args: argparse.Namespace) -> int:
    from .stats_command import dataset_stats, is_spec, mixture_stats, stats_table, to_json

    if args.workers is not None and args.workers < 1:
        raise SystemExit("episodic stats: --workers must be >= 1")
    from ..format.errors import EpisodicError

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

        from ..storage.atomic import atomic_write_bytes

        atomic_write_bytes(args.json, json.dumps(to_json(result), indent=1).encode())
        print(f"statistics: {printable(args.json)}")
    return 0
