"""The run loop of `episodic bench`: loading throughput, latency, decode time, decoder-cache hits and peak memory of one
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

torch and the datasets are imported when a run starts, not with this module.

A decode error aborts the run: `BenchError`/`EpisodicError` with the file and episode, and no result.
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
import sys
import time
from dataclasses import asdict

import numpy as np

from ... import runtime
from ...counters import FIELDS
from ...progress import bar as progress_bar
from .options import SCHEMA, BenchConfig, BenchError, bench_delta_timestamps, demo_root, resolve_cameras


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

    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "episodic": _version("episodic"),
        "torch": torch.__version__,
        "av": _version("av"),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "torch_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


# ---------------------------------------------------------------------------------------------- run
def _make_dataset(cfg: BenchConfig, root: str):
    from ...storage import open_source

    src = open_source(root)
    meta = src.load_metadata()
    cams = resolve_cameras(cfg.cameras, list(meta.info.video_keys))
    dt = bench_delta_timestamps(meta.fps, list(meta.features), cfg.action_window, cfg.state_window)
    if cfg.mode == "map":
        from ...datasets import LeRobotDataset

        return LeRobotDataset("bench", root=root, delta_timestamps=dt, video_keys=cams)
    if cfg.mode == "stream":
        try:
            from ...datasets.streaming import StreamingLeRobotDataset
        except ImportError:
            raise BenchError("streaming mode not available (episodic.datasets.streaming is not installed)") from None
        return StreamingLeRobotDataset("bench", root=root, delta_timestamps=dt, video_keys=cams, seed=cfg.seed)
    raise BenchError(f"unknown mode {cfg.mode!r} (choose map or stream)")


def make_loader(ds, cfg: BenchConfig):
    """The DataLoader bench measures: shuffled (seeded) and long enough for warm-up + measured batches
    in one pass (sampling continues with a new permutation when the dataset is shorter); for a streaming
    dataset its own `loader()`, epoch after epoch."""
    import torch

    if isinstance(ds, torch.utils.data.IterableDataset):
        if hasattr(ds, "loader"):  # the stream's own loader: what its users iterate
            return _Epochs(ds, ds.loader(batch_size=cfg.batch_size, num_workers=cfg.workers))
        return _Epochs(ds, torch.utils.data.DataLoader(ds, batch_size=cfg.batch_size, num_workers=cfg.workers))
    n = (cfg.warmup + cfg.batches) * cfg.batch_size
    sampler = torch.utils.data.RandomSampler(ds, num_samples=n, generator=torch.Generator().manual_seed(cfg.seed))
    return torch.utils.data.DataLoader(ds, batch_size=cfg.batch_size, sampler=sampler, num_workers=cfg.workers)


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
    return {
        "p50": float(np.percentile(a, 50)),
        "p95": float(np.percentile(a, 95)),
        "p99": float(np.percentile(a, 99)),
        "mean": float(a.mean()),
        "max": float(a.max()),
    }


def _batch_size(batch: dict) -> int:
    for key in ("index", "frame_index", "timestamp"):
        if key in batch:
            return int(len(batch[key]))
    v = next(v for k, v in batch.items() if hasattr(v, "shape"))
    return int(v.shape[0])


def _shutdown(it) -> None:
    """Stop DataLoader workers now: an iterator kept alive by an exception's traceback would otherwise be
    shut down by the garbage collector later, which can block for seconds per worker."""
    try:
        runtime.shutdown_workers(it)
    except Exception:  # noqa: BLE001
        pass


def counter_deltas(before: dict, after: dict) -> dict:
    """What the dataset's counters (`ds.stats()`) added between two snapshots: "sum" counters as the
    difference, "gauge" and "min" counters (open decoders, first item time) and 'processes' as they stand at
    `after`."""
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
        scope += (
            "; with DataLoader workers they also include batches prefetched but not yet consumed at either snapshot"
        )
    if cfg.mode == "stream":
        scope += "; stream mode also counts files fetched ahead of the items"
    return scope


def run_bench(cfg: BenchConfig) -> dict:
    """Run one configuration; returns the result record (see module doc). Raises BenchError or the
    dataset's own EpisodicError (e.g. VideoDecodeError) when nothing could be measured."""
    import torch

    from ..rss import PeakRSS

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
        bar = progress_bar(
            total=total, enabled=cfg.progress, desc=f"bench {cfg.label()}", unit="batch", file=sys.stderr, leave=False
        )
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
        raise BenchError(
            f"no frame measured: the loader gave {len(arrivals)} batch(es), warm-up is {cfg.warmup} "
            f"(dataset of {getattr(ds, 'num_frames', '?')} frames)"
        )
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
    cache = {
        "hits": hits,
        "misses": misses,
        "evictions": int(d["decoder_evictions"]),
        "processes": int(d["processes"]),
        "hit_rate": (hits / (hits + misses)) if hits + misses else None,
    }
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
        "dataset": {
            "root": root,
            "frames": frames_total,
            "episodes": getattr(ds, "num_episodes", None),
            "fps": getattr(ds, "fps", None),
            "cameras": cams,
        },
        "results": results,
        "environment": environment(),
    }
