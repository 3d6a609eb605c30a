"""What `episodic repack` / `convert` change for a streaming epoch over HTTP (issue 24, item 2): bytes and requests
a `StreamingLeRobotDataset` epoch costs, before and after, served by the tests' HTTP server on 127.0.0.1
(tests/support.py `FaultServer`: range requests, counts the bytes it sends).

The data (episodic's writer, `episodic.demo`: --episodes episodes of 60-120 frames, two 96x128 AV1 cameras, fps
30; written once under --data), in three "before" layouts seen in community datasets, each with its "after":
  one-row-group   v3.0 whose data file was rewritten by pyarrow's defaults (one row group per file, as pandas or
                  `datasets` write): every block of episodes a streaming consumer reads fetches the whole file.
                  After: `episodic repack` (one row group per episode).
  row-groups-128k the same, after `episodic repack --row-group-mb 0.125` (whole episodes in row groups of up to
                  128 kB: about 5 episodes each).
  v2.1            one parquet and one mp4 per episode (jsonl metadata; LeRobot's v2.1 layout, made by cutting the
                  v3.0 files' packets per episode). After: `episodic convert`.
  small-files     v3.0 in many small files (data files of 4 kB, videos of 10 kB, 3 per chunk directory).
                  After: `episodic repack` (default sizes: one data file, one mp4 per camera).
Each epoch: a new dataset over the server's URL (seed 0, default options), every item read once, in one process
(no DataLoader workers); tabular only (`video_keys=[]`), then with both cameras. Items of before and after are
checked equal (sorted by index). Wall seconds are printed for scale, not compared (a shared machine).

    python benchmarks/bench_repack.py [--data /tmp/episodic-bench-repack] [--episodes 64] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "tools" / "fleet")]

from episodic.datasets.streaming import StreamingLeRobotDataset  # noqa: E402
from episodic.demo import write_demo_dataset  # noqa: E402
from episodic.storage import open_source  # noqa: E402
from episodic.tools.fleet.relayout import relayout  # noqa: E402
from episodic.tools.fleet.relayout_plan import RelayoutOptions  # noqa: E402

from fleet_checks import as_v21  # noqa: E402  (test helpers: the v2.1 layout by packet cuts)
from support import FaultServer, assert_items_equal  # noqa: E402


def prepare(data: Path, episodes: int) -> dict[str, tuple[str, str]]:
    """name -> (before, after) directories under `data`."""
    base = data / "base"
    if not (base / "meta/info.json").exists():
        write_demo_dataset(base, num_episodes=episodes, min_length=60, max_length=120, progress=False)
    one = data / "one-row-group"
    if not (one / "meta/info.json").exists():
        shutil.copytree(base, one)
        for path in one.glob("data/*/*.parquet"):
            pq.write_table(pq.read_table(path), path)
    v21 = data / "v2.1"
    if not (v21 / "meta/info.json").exists():
        as_v21(base, v21)
    small = data / "small-files"
    if not (small / "meta/info.json").exists():
        relayout(open_source(base), str(small), RelayoutOptions(data_file_mb=0.004, video_file_mb=0.01, chunks_size=3))
    pairs = {}
    for name, src, tool, options in (
        ("one-row-group", one, "repack", RelayoutOptions()),
        ("row-groups-128k", one, "repack", RelayoutOptions(row_group_mb=0.125)),
        ("v2.1", v21, "convert", RelayoutOptions()),
        ("small-files", small, "repack", RelayoutOptions()),
    ):
        after = data / f"{name}-{tool}"
        relayout(open_source(src), str(after), options, tool=tool)  # skipped when done
        pairs[name] = (src.name, after.name)
    return pairs


def count_files(root: Path) -> int:
    return sum(1 for p in root.rglob("*") if p.is_file() and p.suffix in (".parquet", ".mp4") and "meta" not in p.parts)


def epoch(server: FaultServer, name: str, video: bool) -> tuple[list[dict], dict]:
    sent, gets, t0 = server.bytes_sent, server.gets(), time.perf_counter()
    with tempfile.TemporaryDirectory() as cache:
        ds = StreamingLeRobotDataset(
            None,
            root=f"{server.url}/{name}",
            seed=0,
            cache_dir=cache,
            video_keys=None if video else [],
            return_uint8=True,
        )
        items = sorted(ds, key=lambda x: int(x["index"]))
    return items, {
        "bytes": server.bytes_sent - sent,
        "requests": server.gets() - gets,
        "seconds": round(time.perf_counter() - t0, 2),
        "items": len(items),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/episodic-bench-repack")
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    pairs = prepare(data, args.episodes)
    results = []
    with FaultServer(data) as server:
        for case, (before, after) in pairs.items():
            row = {"case": case, "files_before": count_files(data / before), "files_after": count_files(data / after)}
            for video in (False, True):
                kind = "all" if video else "tabular"
                items_b, row[f"{kind}_before"] = epoch(server, before, video)
                items_a, row[f"{kind}_after"] = epoch(server, after, video)
                for a, b in zip(items_b, items_a, strict=True):
                    assert_items_equal(a, b)
            results.append(row)
    print(
        f"{'case':<14} {'files':>11}  {'epoch':<8} {'bytes before':>13} {'after':>11} {'ratio':>6}  "
        f"{'requests':>9} {'after':>6}"
    )
    for r in results:
        for kind in ("tabular", "all"):
            b, a = r[f"{kind}_before"], r[f"{kind}_after"]
            print(
                f"{r['case']:<14} {r['files_before']:>5} -> {r['files_after']:<3} {kind:<8} {b['bytes']:>13,} "
                f"{a['bytes']:>11,} {a['bytes'] / b['bytes']:>6.2f}  {b['requests']:>9} {a['requests']:>6}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"episodes": args.episodes, "results": results}, indent=1))


if __name__ == "__main__":
    main()
