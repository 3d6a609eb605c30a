"""Mixture throughput vs the single dataset on the same data (issue 23's bar: a 400-entry mixture with 2 workers
>= 0.95 of the single dataset's frames/s streaming and >= 0.9 map-style, at 96x128 and 480x640).

The data (written once with episodic's writer, reused when present): ONE dataset of N episodes (2 cameras, AV1
g=2, `episodic.demo.synthetic_episode` frames and values) and the SAME episodes as N one-episode datasets (each
written from the same arrays, so frames, values and tasks are identical), plus a mixture spec over the N with
weights proportional to frames (the rule `frames`), so the mixture's data and sampling distribution are the
single dataset's. Same windows everywhere (action: 16 future frames, state: 2), no resize (every camera has one
size), cameras float32, batch 32.

Loaders, each in a fresh subprocess, interleaved, medians of --repeats runs:
  stream-single   StreamingLeRobotDataset(root).loader(batch_size, num_workers)         (pool 64)
  stream-mixture  StreamingMixtureDataset(spec).loader(batch_size, num_workers)         (pool 64)
  map-single      EpisodicDataset(root).loader(batch_size, num_workers)   (whole batches in workers, shuffled)
  map-lerobot     LeRobotDataset + torch DataLoader(shuffle=True, batch_size, num_workers)
  map-mixture     MixtureDataset(spec).loader(batch_size, num_workers)
Frames/s count the --batches batches (default 600) after --warmup batches (default 200: a map-style mixture's
workers open every entry's files and columns, and decode a first frame of each, within the warm-up: with 2 workers
and 400 entries of 2 cameras, a worker draws 64 frames a batch over 800 files, so after its 100 batches of the
warm-up ~0.3 files are expected untouched (800 * exp(-6400 / 800)); after 30 batches it was ~73, each costing an
open and a first decode inside the measurement); the warm-up's own frames/s is reported beside them. Ratios:
stream-mixture / stream-single, map-mixture / map-single (and / map-lerobot); and the same from CPU time per batch
(`*_cpu`: single / mixture CPU ms of the main process and the workers together, from /proc: less sensitive to other
load on a shared machine than frames/s). Time to first batch counts from the dataset's construction (preflight of
the spec included) after imports. Each child also reports its decoder-cache counters and, for mixtures, the largest
|realised - target| share over entries.

    python benchmarks/bench_mixture.py [--data /work/bench-data/mix400] [--json benchmarks/results_mixture400.json]
    python benchmarks/bench_mixture.py --write-only     # just write (or check) the data
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from child_run import measured

KINDS = ("stream-single", "stream-mixture", "map-single", "map-lerobot", "map-mixture")
FPS = 30
CAMERAS = ("observation.images.top", "observation.images.wrist")


# ---------------------------------------------------------------------------------------------- data
def _params(a) -> dict:
    return {
        "episodes": a.episodes,
        "min_length": a.min_length,
        "max_length": a.max_length,
        "height": a.height,
        "width": a.width,
        "cameras": list(CAMERAS),
        "fps": FPS,
        "vcodec": "av1",
        "gop": 2,
        "seed": 0,
        "layout": 2,
    }


def write_data(a) -> None:
    """The single dataset, the one-episode datasets and the spec under `a.data`; reused when its DONE file
    records the same parameters."""
    import numpy as np

    from episodic.demo import TASKS, demo_features, synthetic_episode
    from episodic.writer import DatasetWriter

    params = _params(a)
    done = os.path.join(a.data, "DONE.json")
    if os.path.exists(done):
        with open(done) as f:
            if json.load(f) == params:
                return
        sys.exit(f"{a.data} holds data written with other parameters ({done}); remove it or pick another --data")
    os.makedirs(a.data, exist_ok=True)
    lengths = np.random.default_rng(0).integers(a.min_length, a.max_length + 1, a.episodes)
    feats = demo_features(CAMERAS, a.height, a.width)

    def episode(ep: int) -> dict:
        return synthetic_episode(ep, int(lengths[ep]), CAMERAS, a.height, a.width, seed=0)

    t0 = time.perf_counter()
    with DatasetWriter(
        os.path.join(a.data, "single"),
        fps=FPS,
        features=feats,
        robot_type="synthetic_bimanual",
        vcodec="av1",
        gop=2,
        overwrite=True,
        fsync=False,
    ) as w:
        for ep in range(a.episodes):
            w.add_episode(episode(ep), task=TASKS[ep % len(TASKS)])
    print(
        f"single dataset: {a.episodes} episodes, {int(lengths.sum())} frames in {time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    t0 = time.perf_counter()
    entries = []
    for ep in range(a.episodes):
        root = os.path.join(a.data, "entries", f"ep{ep:04d}")
        with DatasetWriter(
            root,
            fps=FPS,
            features=feats,
            robot_type="synthetic_bimanual",
            vcodec="av1",
            gop=2,
            overwrite=True,
            fsync=False,
        ) as w:
            w.add_episode(episode(ep), task=TASKS[ep % len(TASKS)])
        entries.append({"source": root, "name": f"ep{ep:04d}"})
    print(f"{a.episodes} one-episode datasets in {time.perf_counter() - t0:.0f} s", flush=True)
    spec = {"weighting": {"rule": "frames"}, "delta_timestamps": _windows(), "entries": entries}
    with open(os.path.join(a.data, "mixture.json"), "w") as f:
        json.dump(spec, f, indent=1)
    with open(done, "w") as f:
        json.dump(params, f)


def _windows(keys: tuple[str, str] = ("action", "state")) -> dict:
    """The windows in seconds: action 16 future frames, state the previous and the current frame."""
    return {keys[0]: [i / FPS for i in range(16)], keys[1]: [-1 / FPS, 0.0]}


# ---------------------------------------------------------------------------------------------- one run
def run_one(kind: str, data: str, workers: int, batches: int, warmup: int, batch_size: int) -> dict:
    import torch

    from episodic import (
        EpisodicDataset,
        LeRobotDataset,
        MixtureDataset,
        StreamingLeRobotDataset,
        StreamingMixtureDataset,
    )

    single, spec = os.path.join(data, "single"), os.path.join(data, "mixture.json")
    dt = _windows(("action", "observation.state"))
    t_start = time.perf_counter()
    if kind == "stream-single":
        ds = StreamingLeRobotDataset("bench", root=single, delta_timestamps=dt, episode_pool_size=64)
        loader = ds.loader(batch_size=batch_size, num_workers=workers)
    elif kind == "stream-mixture":
        ds = StreamingMixtureDataset(spec, episode_pool_size=64)
        loader = ds.loader(batch_size=batch_size, num_workers=workers)
    elif kind == "map-single":
        ds = EpisodicDataset(single, delta_timestamps=dt)
        loader = ds.loader(batch_size=batch_size, num_workers=workers, seed=0)
    elif kind == "map-lerobot":
        ds = LeRobotDataset("bench", root=single, delta_timestamps=dt)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=batch_size, shuffle=True, num_workers=workers, generator=torch.Generator().manual_seed(0)
        )
    elif kind == "map-mixture":
        ds = MixtureDataset(spec)
        loader = ds.loader(batch_size=batch_size, num_workers=workers)
    else:
        raise ValueError(kind)
    t_built = time.perf_counter() - t_start
    it = iter(loader)
    first = next(it)
    t_first = time.perf_counter()
    ttfb = t_first - t_start
    n, t0 = 0, None
    for i, batch in enumerate(it):
        if i == warmup:  # the clock starts when this batch arrives: count the ones after it
            warm = n / (time.perf_counter() - t_first)  # the batches before: workers still opening files
            t0, n, cpu0 = time.perf_counter(), 0, _cpu_seconds()
            continue
        n += len(batch["index"])
        if i >= warmup + batches:
            break
    elapsed = time.perf_counter() - t0
    cpu1 = _cpu_seconds()
    stats = ds.stats()
    if hasattr(it, "close"):
        it.close()
    out = {
        "kind": kind,
        "frames_per_s": n / elapsed,
        "warmup_frames_per_s": warm,
        "time_to_first_batch_s": ttfb,
        "construct_s": t_built,
        "samples": n,
        "workers": workers,
        "keys": len(first),
    }
    if cpu0 and cpu1:  # CPU ms per batch of 32 over the measured batches: the main process, the workers together
        per = batch_size / n * 1e3
        out["cpu_ms_per_batch_main"] = (cpu1["main"] - cpu0["main"]) * per
        out["cpu_ms_per_batch_workers"] = sum(cpu1[k] - cpu0[k] for k in cpu1 if k != "main" and k in cpu0) * per
    for k in (
        "decoder_hits",
        "decoder_misses",
        "decoder_evictions",
        "decode_seconds",
        "item_seconds",
        "items_built",
        "wait_seconds",
        "tabular_seconds",
    ):
        if k in stats:
            out[k] = stats[k]
    if "shares" in stats:
        out["max_share_deviation"] = stats["shares"]["max_abs_error"]
    return out


def _cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process and of each of its child processes (the DataLoader
    workers), from /proc (Linux); {} elsewhere."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    try:
        pids = {"main": os.getpid()}
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                pids.update({int(c): int(c) for c in f.read().split()})
        for name, pid in pids.items():
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[str(name)] = (int(fields[11]) + int(fields[12])) / tick
    except OSError:
        return {}
    return out


# ---------------------------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/work/bench-data/mix400")
    ap.add_argument("--episodes", type=int, default=400)
    ap.add_argument("--min-length", type=int, default=60)
    ap.add_argument("--max-length", type=int, default=100)
    ap.add_argument("--height", type=int, default=96)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--batches",
        type=int,
        default=600,
        help="batches measured after the warm-up (150 gave ~1 s of a 2-core machine: run-to-run spreads of 20%%)",
    )
    ap.add_argument(
        "--warmup",
        type=int,
        default=200,
        help="batches after the first before the clock starts (a map-style mixture's workers open every entry's "
        "files and columns, and decode a first frame of each, in their first ~100 batches each)",
    )
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--write-only", action="store_true")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.one:  # child process: one measurement
        print(json.dumps(run_one(a.one, a.data, a.workers, a.batches, a.warmup, a.batch_size)))
        return 0
    write_data(a)
    if a.write_only:
        return 0
    kinds = [k for k in a.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        sys.exit(f"unknown --kinds {sorted(unknown)}; choose from {KINDS}")
    runs: dict[str, list] = {k: [] for k in kinds}
    for r in range(a.repeats):  # interleaved, so machine noise hits every loader alike
        for k in kinds:
            res = measured(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--data",
                    a.data,
                    "--one",
                    k,
                    "--workers",
                    str(a.workers),
                    "--batches",
                    str(a.batches),
                    "--warmup",
                    str(a.warmup),
                    "--batch-size",
                    str(a.batch_size),
                ]
            )
            runs[k].append(res)
            print(json.dumps({"repeat": r, **res}), flush=True)
    fields = (
        "frames_per_s",
        "warmup_frames_per_s",
        "time_to_first_batch_s",
        "peak_pss_tree_mb",
        "cpu_ms_per_batch_main",
        "cpu_ms_per_batch_workers",
    )
    med = {
        k: {f: statistics.median(x[f] for x in rs) for f in fields if all(f in x for x in rs)} for k, rs in runs.items()
    }
    ratios = {}
    for name, num, den in (
        ("stream", "stream-mixture", "stream-single"),
        ("map", "map-mixture", "map-single"),
        ("map_vs_lerobot", "map-mixture", "map-lerobot"),
    ):
        if num in med and den in med:
            ratios[name] = med[num]["frames_per_s"] / med[den]["frames_per_s"]
    bar = {"stream": 0.95, "map": 0.9}
    print(
        f"\n{a.episodes} episodes ({a.min_length}-{a.max_length} frames, 2 cameras {a.height}x{a.width}, AV1 g=2), "
        f"batch {a.batch_size}, {a.workers} workers, medians of {a.repeats}"
    )
    nan = float("nan")
    print(
        f"{'loader':>15} {'frames/s':>9} {'runs':>24} {'warm-up':>8} {'ttfb s':>7} {'PSS MB':>7} "
        f"{'CPU ms/batch: main':>19} {'workers':>8}"
    )
    for k, m in med.items():
        each = ",".join(f"{x['frames_per_s']:.0f}" for x in runs[k])
        print(
            f"{k:>15} {m['frames_per_s']:>9.0f} {each:>24} {m['warmup_frames_per_s']:>8.0f} "
            f"{m['time_to_first_batch_s']:>7.2f} {m['peak_pss_tree_mb']:>7.0f} "
            f"{m.get('cpu_ms_per_batch_main', nan):>19.1f} {m.get('cpu_ms_per_batch_workers', nan):>8.1f}"
        )
    for name, num, den in (("stream", "stream-mixture", "stream-single"), ("map", "map-mixture", "map-single")):
        if num in med and den in med and "cpu_ms_per_batch_main" in med[num] and "cpu_ms_per_batch_main" in med[den]:
            cpu = {k: med[k]["cpu_ms_per_batch_main"] + med[k]["cpu_ms_per_batch_workers"] for k in (num, den)}
            ratios[f"{name}_cpu"] = cpu[den] / cpu[num]  # CPU per batch, single / mixture (less noise-prone)
    for name, v in ratios.items():
        target = bar.get(name)
        print(
            f"ratio {name}: {v:.2f}" + (f" (bar >= {target}: {'met' if v >= target else 'MISSED'})" if target else "")
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {
                    "medians": med,
                    "ratios": ratios,
                    "runs": runs,
                    "params": _params(a),
                    "args": {k: v for k, v in vars(a).items() if k != "one"},
                    "cores": os.cpu_count(),
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
