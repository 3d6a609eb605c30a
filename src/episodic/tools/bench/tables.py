"""What bench results become: the table of one run, JSON and CSV files, and the summary of several result
files (`episodic bench-summarize`). Plain Python: imports neither torch nor numpy, so summarizing result
files stays fast and works without the loading stack."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path

from .options import SCHEMA, BenchError


def flatten(d: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif isinstance(v, (list, tuple)):
            out[key] = ",".join(map(str, v))
        else:
            out[key] = v
    return out


def write_json(record: dict, path: str | os.PathLike) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=2) + "\n")


def write_csv(record: dict, path: str | os.PathLike) -> None:
    """One header row + one row: label, config.*, results.*, lerobot.*, ratios.*, environment.*."""
    row = {
        "label": record["label"],
        **flatten({k: record[k] for k in ("config", "results", "lerobot", "ratios", "environment") if record.get(k)}),
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)


def _fmt(v, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        s = f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
    else:
        s = str(v)
    return s + unit


def format_table(record: dict) -> str:
    r, lr, rt = record["results"], record.get("lerobot"), record.get("ratios") or {}
    lat, cache = r["latency_ms"], r["decoder_cache"]
    rows = [
        ("frames/s", _fmt(r["frames_per_s"]), lr and _fmt(lr.get("frames_per_s")), _fmt(rt.get("frames_per_s"), "x")),
        (
            "time to first batch",
            _fmt(r["time_to_first_batch_s"], " s"),
            lr and _fmt(lr.get("time_to_first_batch_s"), " s"),
            _fmt(rt.get("time_to_first_batch_s"), "x"),
        ),
        ("batch latency p50", _fmt(lat["p50"], " ms"), None, None),
        ("batch latency p95", _fmt(lat["p95"], " ms"), None, None),
        ("batch latency p99", _fmt(lat["p99"], " ms"), None, None),
        ("fetch time (all procs)", _fmt(r["fetch_s"], " s"), None, None),
        ("decode time (all procs)", _fmt(r["decode_s"], " s"), None, None),
        (
            "decoder cache hit rate",
            "-"
            if cache["hit_rate"] is None
            else f"{100 * cache['hit_rate']:.1f}% ({cache['hits']}/{cache['hits'] + cache['misses']})",
            None,
            None,
        ),
        (
            "peak RSS (process tree)",
            _fmt(r["peak_rss_mb"], " MB"),
            lr and _fmt(lr.get("peak_rss_tree_mb"), " MB"),
            _fmt(rt.get("peak_rss_mb"), "x"),
        ),
        ("measured", f"{r['samples']} samples, {r['batches']} batches, {r['elapsed_s']:.2f} s", None, None),
    ]
    env = record["environment"]
    head = (
        f"episodic bench: {record['label']}  dataset {record['dataset']['root']} "
        f"({record['dataset']['frames']} frames, cameras {record['dataset']['cameras'] or 'none'})\n"
        f"  {env['cpu_model']} x{env['cpu_usable']}, torch {env['torch']} ({env['torch_threads']} threads), "
        f"av {env['av']}, python {env['python']}, {env['hostname']}, {env['date']}"
    )
    if lr:
        w = max(len(a) for a, *_ in rows)
        lines = [f"{'':<{w}}  {'episodic':>14}  {'lerobot':>12}  {'ratio':>7}"]
        lines += [f"{a:<{w}}  {b:>14}  {(c or ''):>12}  {(d if c else ''):>7}" for a, b, c, d in rows]
    else:
        w = max(len(a) for a, *_ in rows)
        lines = [f"{a:<{w}}  {b}" for a, b, *_ in rows]
    return head + "\n" + "\n".join("  " + ln for ln in lines)


def concise_error(e: BaseException) -> str:
    """An error's message; for errors re-raised from a DataLoader worker, the original message plus the worker."""
    msg = str(e).strip()
    if "Original Traceback" in msg:
        first = msg.splitlines()[0].strip()
        last = [ln for ln in msg.splitlines() if ln.strip()][-1].strip()
        return f"{last} [{first.rstrip('.')}]"
    return msg or type(e).__name__


def load_results(paths: Sequence[str | os.PathLike]) -> list[dict]:
    """Bench JSON files -> rows {label, frames_per_s, p50_ms, p95_ms, ...}; a file with a LeRobot
    comparison gives a second row for LeRobot."""
    rows = []
    for p in paths:
        try:
            rec = json.loads(Path(p).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise BenchError(f"{p}: not a readable bench result ({e})") from None
        if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
            raise BenchError(f"{p}: not an episodic bench result (schema {SCHEMA!r} expected)")
        r = rec["results"]
        rows.append(
            {
                "label": rec["label"],
                "loader": "episodic",
                "file": str(p),
                "frames_per_s": r["frames_per_s"],
                "p50_ms": r["latency_ms"]["p50"],
                "p95_ms": r["latency_ms"]["p95"],
                "p99_ms": r["latency_ms"]["p99"],
                "ttfb_s": r["time_to_first_batch_s"],
                "peak_rss_mb": r["peak_rss_mb"],
                "hit_rate": r["decoder_cache"]["hit_rate"],
                "host": rec.get("environment", {}).get("hostname"),
            }
        )
        lr = rec.get("lerobot")
        if lr and lr.get("frames_per_s"):
            rows.append(
                {
                    "label": f"lerobot w{lr.get('workers')} b{lr.get('batch_size')}",
                    "loader": "lerobot",
                    "file": str(p),
                    "frames_per_s": lr["frames_per_s"],
                    "p50_ms": None,
                    "p95_ms": None,
                    "p99_ms": None,
                    "ttfb_s": lr.get("time_to_first_batch_s"),
                    "peak_rss_mb": lr.get("peak_rss_tree_mb"),
                    "hit_rate": None,
                    "host": None,
                }
            )
    labels = [r["label"] for r in rows]
    for r in rows:  # disambiguate repeated configurations by file name
        if labels.count(r["label"]) > 1:
            r["label"] = f"{r['label']} [{Path(r['file']).stem}]"
    return rows


def summary_table(rows: list[dict]) -> str:
    w = max([len("configuration")] + [len(r["label"]) for r in rows])
    head = (
        f"{'configuration':<{w}}  {'frames/s':>9}  {'p50 ms':>8}  {'p95 ms':>8}  {'p99 ms':>8}  {'ttfb s':>7}  "
        f"{'RSS MB':>7}  {'cache hit':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        hr = "-" if r["hit_rate"] is None else f"{100 * r['hit_rate']:.0f}%"
        lines.append(
            f"{r['label']:<{w}}  {r['frames_per_s']:>9.0f}  {_fmt(r['p50_ms']):>8}  {_fmt(r['p95_ms']):>8}  "
            f"{_fmt(r['p99_ms']):>8}  {_fmt(r['ttfb_s']):>7}  {_fmt(r['peak_rss_mb']):>7}  {hr:>9}"
        )
    return "\n".join(lines)
