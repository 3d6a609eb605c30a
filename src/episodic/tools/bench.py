"""`episodic bench`: loading throughput, latency, decode time, decoder-cache hits and peak memory of one
loader configuration, measured the way a training loop sees it.

How the figures are taken (times on the consumer side with `time.perf_counter`, except the counters):

* frames/s: samples of the measured batches / wall-clock seconds from the arrival of the last warm-up
  batch (or from the start of iteration when --warmup 0) to the arrival of the last measured batch.
* time to first batch: from the start of dataset construction (metadata read included) to the arrival of
  the first batch.
* batch latency p50/p95/p99: gaps between the arrivals of consecutive batches (measured batches only).
* fetch / decode seconds, decoder-cache hits/misses/evictions: the dataset's own counters (`ds.stats()`,
  summed over the main process and its DataLoader workers, live in shared memory), snapshot when warm-up
  ends and after the last measured batch; the record holds the differences (all of them under
  `results.counters`). Fetch is `item_seconds` (building batches of items, decode included), decode is
  `decode_seconds` (video and image frames). With workers > 0 the seconds add up over processes and can
  exceed the wall-clock time, and both snapshots also count batches the workers had prefetched but not yet
  handed over (`results.counters_scope` says so).
* peak RSS: the process tree (main process + workers), sampled every 50 ms.

A decode error aborts the run: `BenchError`/`EpisodicError` with the file and episode, and no result.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..format.errors import EpisodicError

SCHEMA = "episodic.bench/1"
DEMO_EPISODES = 20


class BenchError(EpisodicError):
    """The benchmark could not produce a measurement."""


# ---------------------------------------------------------------------------------------------- config
@dataclass
class BenchConfig:
    dataset: str | None = None  # path or fsspec URL; None: the built-in demo dataset
    mode: str = "map"
    workers: int = 0
    batch_size: int = 32
    action_window: int = 16  # frames: current + future (0: no window)
    state_window: int = 2  # frames: past + current (0: no window)
    cameras: list[str] | None = None  # None: all cameras; []: tabular only
    batches: int = 100  # measured batches
    warmup: int = 5
    seed: int = 0
    torch_threads: int | None = None
    progress: bool = True

    def label(self) -> str:
        cams = "all" if self.cameras is None else (",".join(c.rsplit(".", 1)[-1] for c in self.cameras) or "none")
        return f"{self.mode} w{self.workers} b{self.batch_size} a{self.action_window} s{self.state_window} cams={cams}"


def demo_root(progress: bool = True) -> Path:
    """The built-in demo dataset (the one `episodic demo` uses), written on first use."""
    from ..demo import write_demo_dataset
    from ..storage.cache import default_cache_dir

    root = default_cache_dir() / "demo" / f"demo-{DEMO_EPISODES}ep"
    if not (root / "meta" / "info.json").exists():
        print(f"writing the demo dataset ({DEMO_EPISODES} episodes, 2 cameras) to {root}", file=sys.stderr)
        write_demo_dataset(root, num_episodes=DEMO_EPISODES, progress=progress)
    return root


def bench_delta_timestamps(fps: int, features: Sequence[str], action_window: int, state_window: int) -> dict | None:
    """action: current + (action_window - 1) future frames; observation.state: (state_window - 1) past frames
    + current. Keys the dataset lacks are left out."""
    dt: dict[str, list[float]] = {}
    if action_window > 0 and "action" in features:
        dt["action"] = [i / fps for i in range(action_window)]
    if state_window > 0 and "observation.state" in features:
        dt["observation.state"] = [(i - state_window + 1) / fps for i in range(state_window)]
    return dt or None


def parse_cameras(text: str | None) -> list[str] | None:
    """'--cameras' value: None/'all' -> all, 'none' -> [], else a comma list (full keys or short names)."""
    if text is None or text.strip().lower() in ("", "all"):
        return None
    if text.strip().lower() == "none":
        return []
    return [c.strip() for c in text.split(",") if c.strip()]


def _resolve_cameras(wanted: list[str] | None, available: list[str]) -> list[str] | None:
    if wanted is None:
        return None
    out = []
    for c in wanted:
        if c in available:
            out.append(c)
            continue
        short = [k for k in available if k.rsplit(".", 1)[-1] == c]
        if len(short) != 1:
            raise BenchError(f"--cameras: {c!r} is not a camera of this dataset (cameras: {available})")
        out.append(short[0])
    return out


# ---------------------------------------------------------------------------------------------- environment
def _version(mod: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(mod)
    except Exception:  # noqa: BLE001
        try:
            return getattr(__import__(mod), "__version__", None)
        except Exception:  # noqa: BLE001
            return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict:
    import torch

    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "episodic": _version("episodic"), "torch": torch.__version__, "av": _version("av"), "numpy": np.__version__,
        "python": platform.python_version(), "platform": platform.platform(), "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(), "cpu_usable": usable, "torch_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


# ---------------------------------------------------------------------------------------------- run
def _make_dataset(cfg: BenchConfig, root: str):
    from ..format import load_metadata
    from ..storage import open_source

    src = open_source(root)
    meta = load_metadata(src.fs, src.root)
    cams = _resolve_cameras(cfg.cameras, list(meta.info.video_keys))
    dt = bench_delta_timestamps(meta.fps, list(meta.features), cfg.action_window, cfg.state_window)
    if cfg.mode == "map":
        from ..datasets import LeRobotDataset

        return LeRobotDataset("bench", root=root, delta_timestamps=dt, video_keys=cams)
    if cfg.mode == "stream":
        try:
            from ..datasets.streaming import StreamingLeRobotDataset  # type: ignore[import-not-found]
        except ImportError:
            raise BenchError("streaming mode not available (episodic.datasets.streaming is not installed)") from None
        return StreamingLeRobotDataset("bench", root=root, delta_timestamps=dt, video_keys=cams, seed=cfg.seed)
    raise BenchError(f"unknown mode {cfg.mode!r} (choose map or stream)")


def make_loader(ds, cfg: BenchConfig, collate_fn=None):
    """The DataLoader bench measures: shuffled (seeded) and long enough for warm-up + measured batches
    in one pass (sampling continues with a new permutation when the dataset is shorter)."""
    import torch

    g = torch.Generator().manual_seed(cfg.seed)
    n = (cfg.warmup + cfg.batches) * cfg.batch_size
    kw = {} if collate_fn is None else {"collate_fn": collate_fn}
    if isinstance(ds, torch.utils.data.IterableDataset):
        if collate_fn is None and hasattr(ds, "loader"):  # the stream's own loader: what its users iterate
            return _Epochs(ds, ds.loader(batch_size=cfg.batch_size, num_workers=cfg.workers))
        return _Epochs(ds, torch.utils.data.DataLoader(ds, batch_size=cfg.batch_size, num_workers=cfg.workers, **kw))
    sampler = torch.utils.data.RandomSampler(ds, num_samples=n, generator=g)
    return torch.utils.data.DataLoader(ds, batch_size=cfg.batch_size, sampler=sampler, num_workers=cfg.workers, **kw)


class _Epochs:
    """Iterates an iterable dataset's DataLoader epoch after epoch (`set_epoch`), keeping the live DataLoader
    iterator reachable so its workers can be shut down explicitly."""

    def __init__(self, ds, loader):
        self.ds, self.loader = ds, loader

    def __iter__(self):
        return _EpochsIter(self)


class _EpochsIter:
    def __init__(self, epochs: _Epochs):
        self.e, self.cur, self.got, self.epoch = epochs, None, 0, getattr(epochs.ds, "epoch", 0)

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self.cur is None:
                self.cur, self.got = iter(self.e.loader), 0
            try:
                batch = next(self.cur)
            except StopIteration:
                _shutdown(self.cur)
                self.cur = None
                if not self.got:  # an empty epoch: the stream has nothing to give
                    raise
                self.epoch += 1
                if hasattr(self.e.ds, "set_epoch"):
                    self.e.ds.set_epoch(self.epoch)
                continue
            self.got += 1
            return batch

    def _shutdown_workers(self) -> None:
        if self.cur is not None:
            _shutdown(self.cur)
            self.cur = None


def _percentiles_ms(gaps: list[float]) -> dict:
    a = np.asarray(gaps, dtype=np.float64) * 1e3
    return {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)), "p99": float(np.percentile(a, 99)),
            "mean": float(a.mean()), "max": float(a.max())}


def _batch_size(batch: dict) -> int:
    for key in ("index", "frame_index", "timestamp"):
        if key in batch:
            return int(len(batch[key]))
    v = next(v for k, v in batch.items() if hasattr(v, "shape"))
    return int(v.shape[0])


def _shutdown(it) -> None:
    """Stop DataLoader workers now: an iterator kept alive by an exception's traceback would otherwise be
    shut down by the garbage collector later, which can block for seconds per worker."""
    stop = getattr(it, "_shutdown_workers", None) or getattr(it, "close", None)  # a DataLoader's or a generator
    if stop is not None:
        try:
            stop()
        except Exception:  # noqa: BLE001
            pass


def counter_deltas(before: dict, after: dict) -> dict:
    """What the dataset's counters (`ds.stats()`) added between two snapshots: "sum" counters as the
    difference, "gauge" and "min" counters (open decoders, first item time) and 'processes' as they stand at
    `after`."""
    from ..counters import FIELDS

    out = {}
    for name, value in after.items():
        if FIELDS.get(name) == "sum" and isinstance(value, (int, float)):
            out[name] = value - before.get(name, 0)
        else:
            out[name] = value
    return out


def _counters_scope(cfg: BenchConfig) -> str:
    scope = "measured batches (dataset counters from the end of warm-up to the last measured batch)"
    if cfg.workers > 0:
        scope += ("; with DataLoader workers they also include batches prefetched but not yet consumed at "
                  "either snapshot")
    if cfg.mode == "stream":
        scope += "; stream mode also counts files fetched ahead of the items"
    return scope


def run_bench(cfg: BenchConfig) -> dict:
    """Run one configuration; returns the result record (see module doc). Raises BenchError or the
    dataset's own EpisodicError (e.g. VideoDecodeError) when nothing could be measured."""
    import torch
    from tqdm.auto import tqdm

    from .rss import PeakRSS

    if cfg.batches < 1 or cfg.batch_size < 1 or cfg.warmup < 0 or cfg.workers < 0:
        raise BenchError("--batches and --batch-size must be >= 1, --warmup and --workers >= 0")
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    root = str(cfg.dataset) if cfg.dataset is not None else str(demo_root(cfg.progress))
    total = cfg.warmup + cfg.batches
    arrivals: list[float] = []
    sizes: list[int] = []
    with PeakRSS() as rss:
        t_start = time.perf_counter()
        ds = _make_dataset(cfg, root)
        loader = make_loader(ds, cfg)
        bar = tqdm(total=total, desc=f"bench {cfg.label()}", unit="batch", disable=None if cfg.progress else True,
                   file=sys.stderr, leave=False)
        it = None
        try:
            start = ds.stats()  # replaced when warm-up ends
            it = iter(loader)
            t_iter = time.perf_counter()
            for batch in it:
                arrivals.append(time.perf_counter())
                sizes.append(_batch_size(batch))
                del batch
                if len(arrivals) == cfg.warmup:
                    start = ds.stats()
                bar.update(1)
                if len(arrivals) >= total:
                    break
            end = ds.stats()
        finally:
            bar.close()
            _shutdown(it)
            del loader, it
    if len(arrivals) <= cfg.warmup:
        raise BenchError(f"no frame measured: the loader gave {len(arrivals)} batch(es), warm-up is {cfg.warmup} "
                         f"(dataset of {getattr(ds, 'num_frames', '?')} frames)")
    t0 = arrivals[cfg.warmup - 1] if cfg.warmup > 0 else t_iter
    measured = slice(cfg.warmup, len(arrivals))
    samples = int(sum(sizes[measured]))
    elapsed = arrivals[-1] - t0
    if samples <= 0 or elapsed <= 0:
        raise BenchError(f"no frame measured ({samples} samples in {elapsed:.3f} s)")
    gaps = np.diff(np.asarray([t0] + arrivals[measured])).tolist()
    frames_total = int(getattr(ds, "num_frames", None) or len(ds))
    d = counter_deltas(start, end)
    hits, misses = int(d["decoder_hits"]), int(d["decoder_misses"])
    cache = {"hits": hits, "misses": misses, "evictions": int(d["decoder_evictions"]),
             "processes": int(d["processes"]), "hit_rate": (hits / (hits + misses)) if hits + misses else None}
    results = {
        "frames_per_s": samples / elapsed,
        "samples": samples,
        "batches": len(arrivals) - cfg.warmup,
        "elapsed_s": elapsed,
        "time_to_first_batch_s": arrivals[0] - t_start,
        "latency_ms": _percentiles_ms(gaps),
        # item_seconds: building batches of items (engine + tensor conversion); None where the dataset
        # does not count it
        "fetch_s": float(d["item_seconds"]) if d.get("items_built") else None,
        "decode_s": float(d["decode_seconds"]),
        "decoder_cache": cache,
        "counters_scope": _counters_scope(cfg),
        "counters": d,
        "peak_rss_mb": rss.peak / 2**20,
    }
    cams = list(getattr(ds, "camera_keys", []))
    return {
        "schema": SCHEMA,
        "label": cfg.label(),
        "config": {**asdict(cfg), "dataset": root, "cameras": cams},
        "dataset": {"root": root, "frames": frames_total, "episodes": getattr(ds, "num_episodes", None),
                    "fps": getattr(ds, "fps", None), "cameras": cams},
        "results": results,
        "environment": environment(),
    }


# ---------------------------------------------------------------------------------------------- LeRobot
def find_lerobot_tools() -> Path | None:
    here = Path(__file__).resolve()
    for base in [Path.cwd(), *here.parents]:
        p = base / "benchmarks" / "lerobot_tools.py"
        if p.exists():
            return p
    return None


def default_lerobot_python() -> str | None:
    tools = find_lerobot_tools()
    for base in ([tools.parent.parent] if tools else []) + [Path.cwd()]:
        p = base / ".bench" / "lerobot-venv" / "bin" / "python"
        if p.exists():
            return str(p)
    return None


def run_lerobot(cfg: BenchConfig, root: str, python: str | None, timeout_s: float = 900) -> tuple[dict | None, str]:
    """LeRobot's map-style loader on the same data (benchmarks/lerobot_tools.py bench-map); returns
    (record or None, message)."""
    python = python or default_lerobot_python()
    tools = find_lerobot_tools()
    if python is None or not Path(python).exists():
        return None, "LeRobot comparison skipped: no LeRobot python (pass --lerobot-python; see benchmarks/LEROBOT_ENV.md)"
    if tools is None:
        return None, "LeRobot comparison skipped: benchmarks/lerobot_tools.py not found"
    if "://" in root:
        return None, "LeRobot comparison skipped: LeRobot reads local datasets only"
    if cfg.mode != "map":
        return None, f"LeRobot comparison skipped: only map mode is compared (got {cfg.mode})"
    cmd = [python, str(tools), "bench-map", "--root", root, "--workers", str(cfg.workers),
           "--batch-size", str(cfg.batch_size), "--batches", str(cfg.batches), "--warmup", str(max(cfg.warmup, 1)),
           "--seed", str(cfg.seed)]
    if cfg.torch_threads:
        cmd += ["--torch-threads", str(cfg.torch_threads)]
    if cfg.cameras == []:
        cmd.append("--no-video")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"LeRobot comparison failed: no result in {timeout_s:.0f} s"
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        return None, f"LeRobot comparison failed (exit {out.returncode}): {tail}"
    rec = json.loads(lines[-1])
    if "skipped" in rec:
        return None, f"LeRobot comparison skipped: {rec['skipped']}"
    note = ""
    if cfg.action_window != 16 or cfg.state_window != 2 or cfg.cameras is not None:
        note = " (LeRobot runs action 16 / state 2 / all cameras: the configurations differ)"
    return rec, f"LeRobot comparison: {python} {tools} bench-map ({rec.get('batches')} batches){note}"


def ratios(result: dict, lerobot: dict) -> dict:
    r = result["results"]
    out = {}
    if lerobot.get("frames_per_s"):
        out["frames_per_s"] = r["frames_per_s"] / lerobot["frames_per_s"]
    if lerobot.get("time_to_first_batch_s"):
        out["time_to_first_batch_s"] = r["time_to_first_batch_s"] / lerobot["time_to_first_batch_s"]
    if lerobot.get("peak_rss_tree_mb"):
        out["peak_rss_mb"] = r["peak_rss_mb"] / lerobot["peak_rss_tree_mb"]
    return out


# ---------------------------------------------------------------------------------------------- output
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
    row = {"label": record["label"], **flatten({k: record[k] for k in ("config", "results", "lerobot", "ratios",
                                                                         "environment") if record.get(k)})}
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
        ("time to first batch", _fmt(r["time_to_first_batch_s"], " s"), lr and _fmt(lr.get("time_to_first_batch_s"), " s"),
         _fmt(rt.get("time_to_first_batch_s"), "x")),
        ("batch latency p50", _fmt(lat["p50"], " ms"), None, None),
        ("batch latency p95", _fmt(lat["p95"], " ms"), None, None),
        ("batch latency p99", _fmt(lat["p99"], " ms"), None, None),
        ("fetch time (all procs)", _fmt(r["fetch_s"], " s"), None, None),
        ("decode time (all procs)", _fmt(r["decode_s"], " s"), None, None),
        ("decoder cache hit rate", "-" if cache["hit_rate"] is None else f"{100 * cache['hit_rate']:.1f}% "
                                   f"({cache['hits']}/{cache['hits'] + cache['misses']})", None, None),
        ("peak RSS (process tree)", _fmt(r["peak_rss_mb"], " MB"), lr and _fmt(lr.get("peak_rss_tree_mb"), " MB"),
         _fmt(rt.get("peak_rss_mb"), "x")),
        ("measured", f"{r['samples']} samples, {r['batches']} batches, {r['elapsed_s']:.2f} s", None, None),
    ]
    env = record["environment"]
    head = (f"episodic bench: {record['label']}  dataset {record['dataset']['root']} "
            f"({record['dataset']['frames']} frames, cameras {record['dataset']['cameras'] or 'none'})\n"
            f"  {env['cpu_model']} x{env['cpu_usable']}, torch {env['torch']} ({env['torch_threads']} threads), "
            f"av {env['av']}, python {env['python']}, {env['hostname']}, {env['date']}")
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


# ---------------------------------------------------------------------------------------------- summarize
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
        rows.append({"label": rec["label"], "loader": "episodic", "file": str(p), "frames_per_s": r["frames_per_s"],
                     "p50_ms": r["latency_ms"]["p50"], "p95_ms": r["latency_ms"]["p95"],
                     "p99_ms": r["latency_ms"]["p99"], "ttfb_s": r["time_to_first_batch_s"],
                     "peak_rss_mb": r["peak_rss_mb"], "hit_rate": r["decoder_cache"]["hit_rate"],
                     "host": rec.get("environment", {}).get("hostname")})
        lr = rec.get("lerobot")
        if lr and lr.get("frames_per_s"):
            rows.append({"label": f"lerobot w{lr.get('workers')} b{lr.get('batch_size')}", "loader": "lerobot",
                         "file": str(p), "frames_per_s": lr["frames_per_s"], "p50_ms": None, "p95_ms": None,
                         "p99_ms": None, "ttfb_s": lr.get("time_to_first_batch_s"),
                         "peak_rss_mb": lr.get("peak_rss_tree_mb"), "hit_rate": None, "host": None})
    labels = [r["label"] for r in rows]
    for r in rows:  # disambiguate repeated configurations by file name
        if labels.count(r["label"]) > 1:
            r["label"] = f"{r['label']} [{Path(r['file']).stem}]"
    return rows


def summary_table(rows: list[dict]) -> str:
    w = max([len("configuration")] + [len(r["label"]) for r in rows])
    head = f"{'configuration':<{w}}  {'frames/s':>9}  {'p50 ms':>8}  {'p95 ms':>8}  {'p99 ms':>8}  {'ttfb s':>7}  {'RSS MB':>7}  {'cache hit':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        hr = "-" if r["hit_rate"] is None else f"{100 * r['hit_rate']:.0f}%"
        lines.append(f"{r['label']:<{w}}  {r['frames_per_s']:>9.0f}  {_fmt(r['p50_ms']):>8}  {_fmt(r['p95_ms']):>8}  "
                     f"{_fmt(r['p99_ms']):>8}  {_fmt(r['ttfb_s']):>7}  {_fmt(r['peak_rss_mb']):>7}  {hr:>9}")
    return "\n".join(lines)
