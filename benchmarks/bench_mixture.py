"""Mixture throughput vs the single dataset on the same data (issue 23's bar: a 400-entry mixture with 2 workers
>= 0.95 of the single dataset's frames/s streaming and >= 0.9 map-style, at 96x128 and 480x640).

The data (written once with episodic's writer, reused when present): ONE dataset of N episodes (2 cameras, AV1
g=2, `episodic.demo.synthetic_episode` frames and values) and the SAME episodes as N one-episode datasets (each
written from the same arrays, so frames, values and tasks are identical), plus a mixture spec over the N with
weights proportional to frames (the rule `frames`), so the mixture's data and sampling distribution are the
single dataset's; and, for `stream-files`, the same episodes once more as one dataset whose every episode has files
of its own (a data file, and a video file per camera: the files the mixture reads, and the layout of LeRobot's
v2.1), written the first time that kind runs. Same windows everywhere (action: 16 future frames, state: 2), no
resize (every camera has one size), cameras float32, batch 32.

Loaders (medians of --repeats runs):
  stream-single   StreamingLeRobotDataset(root).loader(batch_size, num_workers)         (pool 64)
  stream-mixture  StreamingMixtureDataset(spec).loader(batch_size, num_workers)         (pool 64)
  stream-files    as stream-single, over the dataset of one file per episode and camera  (pool 64)
  map-single      EpisodicDataset(root).loader(batch_size, num_workers)   (whole batches in workers, shuffled)
  map-lerobot     LeRobotDataset + torch DataLoader(shuffle=True, batch_size, num_workers)
  map-mixture     MixtureDataset(spec).loader(batch_size, num_workers)
By default the loaders of a group (stream-*, map-*) are measured in the SAME run: one fresh process holds all of
them, each with its own workers, and they take turns of --block batches (default --batches / 10), so that the
machine's changes of speed (other tenants of a VM moved it by 20% within minutes here, by 40% between days) fall
on all of them alike; before each turn every loader's workers finish what they prefetch and the turn's loader
hands out those batches before its clock starts (`run_group`). Each repeat gives each ratio; the ratios' median
is reported with their range. With --separate each loader runs in a fresh process of its own, one after the
other (interleaved), which also gives each loader's own peak PSS (in turns: the group's).
Frames/s count the --batches batches (default 600) after --warmup batches (default 200: a map-style mixture's
workers open every entry's files and columns, and decode a first frame of each, within the warm-up: with 2 workers
and 400 entries of 2 cameras, a worker draws 64 frames a batch over 800 files, so after its 100 batches of the
warm-up ~0.3 files are expected untouched (800 * exp(-6400 / 800)); after 30 batches it was ~73, each costing an
open and a first decode inside the measurement); the warm-up's own frames/s is reported beside them. Ratios:
stream-mixture / stream-single, map-mixture / map-single (and / map-lerobot), and where stream-files runs:
stream-files / stream-single (what reading each episode from files of its own costs) and stream-mixture /
stream-files (what the mixture costs over a single dataset of the same files); and the same from CPU time per batch
(`*_cpu`: single / mixture CPU ms of the main process (in turns: its thread's time in the loader's `next`) and the
workers together, from /proc). Time to first batch counts from the dataset's construction (preflight of the spec
included) after imports. Each run also reports its decoder-cache counters and, for mixtures, the largest
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

KINDS = ("stream-single", "stream-mixture", "stream-files", "map-single", "map-lerobot", "map-mixture")
GROUPS = {
    "stream": ("stream-single", "stream-mixture", "stream-files"),
    "map": ("map-single", "map-mixture", "map-lerobot"),
}
RATIOS = (
    ("stream", "stream-mixture", "stream-single"),
    ("files", "stream-files", "stream-single"),
    ("stream_vs_files", "stream-mixture", "stream-files"),
    ("map", "map-mixture", "map-single"),
    ("map_vs_lerobot", "map-mixture", "map-lerobot"),
)
FPS = 30
# files this small are full after one episode: the writer starts new files for the next (the `files` dataset)
FILE_PER_EPISODE_MB = 1e-6
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
    lengths = np.random.default_rng(0).integers(a.min_length, a.max_length + 1, a.episodes)
    feats = demo_features(CAMERAS, a.height, a.width)

    def episode(ep: int) -> dict:
        return synthetic_episode(ep, int(lengths[ep]), CAMERAS, a.height, a.width, seed=0)

    def writer(root: str, **sizes) -> DatasetWriter:
        return DatasetWriter(
            root,
            fps=FPS,
            features=feats,
            robot_type="synthetic_bimanual",
            vcodec="av1",
            gop=2,
            overwrite=True,
            fsync=False,
            **sizes,
        )

    def one_dataset(name: str, file_mb: float | None) -> None:  # every episode in one dataset (files of `file_mb`)
        sizes = {} if file_mb is None else {"data_files_size_in_mb": file_mb, "video_files_size_in_mb": file_mb}
        t0 = time.perf_counter()
        with writer(os.path.join(a.data, name), **sizes) as w:
            for ep in range(a.episodes):
                w.add_episode(episode(ep), task=TASKS[ep % len(TASKS)])
        took = time.perf_counter() - t0
        print(f"{name}: {a.episodes} episodes, {int(lengths.sum())} frames in {took:.0f} s", flush=True)

    done = os.path.join(a.data, "DONE.json")
    if os.path.exists(done):
        with open(done) as f:
            if json.load(f) != params:
                sys.exit(f"{a.data} holds data written with other parameters ({done}); remove it or pick another")
        files_done = os.path.join(a.data, "DONE-files.json")
        if "stream-files" in a.kinds.split(",") and not os.path.exists(files_done):  # (added later: written now)
            one_dataset("files", FILE_PER_EPISODE_MB)
            with open(files_done, "w") as f:
                json.dump(params, f)
        return
    os.makedirs(a.data, exist_ok=True)
    one_dataset("single", None)
    t0 = time.perf_counter()
    entries = []
    for ep in range(a.episodes):
        root = os.path.join(a.data, "entries", f"ep{ep:04d}")
        with writer(root) as w:
            w.add_episode(episode(ep), task=TASKS[ep % len(TASKS)])
        entries.append({"source": root, "name": f"ep{ep:04d}"})
    print(f"{a.episodes} one-episode datasets in {time.perf_counter() - t0:.0f} s", flush=True)
    spec = {"weighting": {"rule": "frames"}, "delta_timestamps": _windows(), "entries": entries}
    with open(os.path.join(a.data, "mixture.json"), "w") as f:
        json.dump(spec, f, indent=1)
    one_dataset("files", FILE_PER_EPISODE_MB)
    with open(os.path.join(a.data, "DONE-files.json"), "w") as f:
        json.dump(params, f)
    with open(done, "w") as f:
        json.dump(params, f)


def _windows(keys: tuple[str, str] = ("action", "state")) -> dict:
    """The windows in seconds: action 16 future frames, state the previous and the current frame."""
    return {keys[0]: [i / FPS for i in range(16)], keys[1]: [-1 / FPS, 0.0]}


# ---------------------------------------------------------------------------------------------- one run
def _import_loaders() -> None:
    """Import what `build` uses (torch, the loaders' modules)."""
    import torch  # noqa: F401

    from episodic import (  # noqa: F401
        EpisodicDataset,
        LeRobotDataset,
        MixtureDataset,
        StreamingLeRobotDataset,
        StreamingMixtureDataset,
    )


def build(kind: str, data: str, workers: int, batch_size: int):
    """(dataset, loader) of `kind` over the data under `data`."""
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
    if kind == "stream-single":
        ds = StreamingLeRobotDataset("bench", root=single, delta_timestamps=dt, episode_pool_size=64)
        return ds, ds.loader(batch_size=batch_size, num_workers=workers)
    if kind == "stream-files":
        files = os.path.join(data, "files")
        ds = StreamingLeRobotDataset("bench", root=files, delta_timestamps=dt, episode_pool_size=64)
        return ds, ds.loader(batch_size=batch_size, num_workers=workers)
    if kind == "stream-mixture":
        ds = StreamingMixtureDataset(spec, episode_pool_size=64)
        return ds, ds.loader(batch_size=batch_size, num_workers=workers)
    if kind == "map-single":
        ds = EpisodicDataset(single, delta_timestamps=dt)
        return ds, ds.loader(batch_size=batch_size, num_workers=workers, seed=0)
    if kind == "map-lerobot":
        ds = LeRobotDataset("bench", root=single, delta_timestamps=dt)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=batch_size, shuffle=True, num_workers=workers, generator=torch.Generator().manual_seed(0)
        )
        return ds, loader
    if kind == "map-mixture":
        ds = MixtureDataset(spec)
        return ds, ds.loader(batch_size=batch_size, num_workers=workers)
    raise ValueError(kind)


def start(kind: str, data: str, workers: int, batch_size: int):
    """A loader of `kind` built and its first batch taken: (dataset, iterator, first batch, seconds to construct,
    seconds to the first batch from construction on, when the first batch came)."""
    _import_loaders()  # before the clock starts: the time to the first batch counts from construction on
    t_start = time.perf_counter()
    ds, loader = build(kind, data, workers, batch_size)
    t_built = time.perf_counter() - t_start
    it = iter(loader)
    first = next(it)
    t_first = time.perf_counter()
    return ds, it, first, t_built, t_first - t_start, t_first


def run_one(kind: str, data: str, workers: int, batches: int, warmup: int, batch_size: int) -> dict:
    ds, it, first, t_built, ttfb, t_first = start(kind, data, workers, batch_size)
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
    return {**out, **_counters(stats)}


def _counters(stats: dict) -> dict:
    """A dataset's decoder-cache and timing counters (all its processes), and a mixture's largest share error."""
    out = {
        k: stats[k]
        for k in (
            "decoder_hits",
            "decoder_misses",
            "decoder_evictions",
            "decode_seconds",
            "item_seconds",
            "items_built",
            "wait_seconds",
            "tabular_seconds",
        )
        if k in stats
    }
    if "shares" in stats:
        out["max_share_deviation"] = stats["shares"]["max_abs_error"]
    return out


def _cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process and of each of its child processes (the DataLoader
    workers), from /proc (Linux); {} elsewhere."""
    try:
        return {"main": _pid_cpu([os.getpid()]), **{str(pid): _pid_cpu([pid]) for pid in _children()}}
    except OSError:
        return {}


def _children() -> set[int]:
    """This process's child processes (Linux)."""
    out: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            out.update(int(c) for c in f.read().split())
    return out


def _pid_cpu(pids) -> float:
    """CPU seconds (user + system) so far of the processes `pids` together, from /proc."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------- one run, in turns
def run_group(kinds: list[str], data: str, workers: int, batches: int, warmup: int, batch_size: int, block: int):
    """The loaders of `kinds` alive in ONE process, each with its own `workers`, measured in turns of `block`
    batches (`batches` each in all), so that what the machine does meanwhile (other tenants, clock changes) falls
    on all of them alike and their ratio comes from one run. Before each turn every loader's workers are let
    finish the batches they prefetch (`_settle`), and the turn's loader hands out the ones made then before its
    clock starts: a turn times only batches made in it, while only its own loader's processes work. CPU per
    batch: each loader's workers (by process, over all the batches they made in the turns) plus the main
    thread's time inside its `next`."""
    live = {}
    for kind in kinds:  # built, first batch and warm-up one after the other (the others' workers idle)
        before = _children()
        ds, it, first, t_built, ttfb, t_first = start(kind, data, workers, batch_size)
        for _ in range(warmup):
            next(it)
        live[kind] = {
            "ds": ds,
            "it": it,
            "pids": _children() - before,
            "out": {
                "kind": kind,
                "warmup_frames_per_s": warmup * batch_size / (time.perf_counter() - t_first),
                "time_to_first_batch_s": ttfb,
                "construct_s": t_built,
                "workers": workers,
                "keys": len(first),
                "block": block,
            },
        }
    every = set().union(*(x["pids"] for x in live.values()))
    ready = 2 * workers  # batches a loader's workers have made when they settle (torch's prefetch_factor 2)
    cpu0 = {k: _pid_cpu(x["pids"]) for k, x in live.items()}
    wall, main_cpu = dict.fromkeys(live, 0.0), dict.fromkeys(live, 0.0)
    n, made = dict.fromkeys(live, 0), dict.fromkeys(live, 0)
    done = 0
    while done < batches:
        turn = min(block, batches - done)
        for kind, x in live.items():
            _settle(every)
            it = x["it"]
            for _ in range(ready):  # made before the turn: not timed (the clock times the batches made in it)
                next(it)
            t0, m0 = time.perf_counter(), time.thread_time()
            for _ in range(turn):
                n[kind] += len(next(it)["index"])
            wall[kind] += time.perf_counter() - t0
            main_cpu[kind] += time.thread_time() - m0
            made[kind] += ready + turn
        done += turn
    out = []
    for kind, x in live.items():
        res = {
            **x["out"],
            "frames_per_s": n[kind] / wall[kind],
            "samples": n[kind],
            "cpu_ms_per_batch_main": main_cpu[kind] / (n[kind] / batch_size) * 1e3,
            "cpu_ms_per_batch_workers": (_pid_cpu(x["pids"]) - cpu0[kind]) / made[kind] * 1e3,
        }
        out.append({**res, **_counters(x["ds"].stats())})
    for x in live.values():
        if hasattr(x["it"], "close"):
            x["it"].close()
    return out


def _settle(pids, quiet_s: float = 0.05, limit_s: float = 30.0) -> None:
    """Wait until the processes `pids` used no CPU for `quiet_s` (the batches their loaders prefetch are made)."""
    end = time.perf_counter() + limit_s
    last = _pid_cpu(pids)
    while time.perf_counter() < end:
        time.sleep(quiet_s)
        now = _pid_cpu(pids)
        if now == last:
            return
        last = now


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
    ap.add_argument(
        "--block",
        type=int,
        help="batches per turn when the loaders of a group take turns in one process (default: --batches / 10)",
    )
    ap.add_argument(
        "--separate",
        action="store_true",
        help="each loader in a process of its own, one after the other (its own peak PSS; ratios across runs)",
    )
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--write-only", action="store_true")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--group", help=argparse.SUPPRESS)
    a = ap.parse_args()
    block = a.block or max(1, a.batches // 10)

    if a.one:  # child process: one measurement
        print(json.dumps(run_one(a.one, a.data, a.workers, a.batches, a.warmup, a.batch_size)))
        return 0
    if a.group:  # child process: a group's loaders in turns
        runs = run_group(a.group.split(","), a.data, a.workers, a.batches, a.warmup, a.batch_size, block)
        print(json.dumps({"runs": runs}))
        return 0
    write_data(a)
    if a.write_only:
        return 0
    kinds = [k for k in a.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        sys.exit(f"unknown --kinds {sorted(unknown)}; choose from {KINDS}")
    common = ["--data", a.data, "--workers", str(a.workers), "--batches", str(a.batches), "--warmup", str(a.warmup)]
    common += ["--batch-size", str(a.batch_size), "--block", str(block)]
    me = [sys.executable, os.path.abspath(__file__)]
    runs: dict[str, list] = {k: [] for k in kinds}
    for r in range(a.repeats):
        if a.separate:  # interleaved, so machine noise hits every loader alike
            for k in kinds:
                res = measured([*me, "--one", k, *common])
                runs[k].append(res)
                print(json.dumps({"repeat": r, **res}), flush=True)
            continue
        for group in GROUPS.values():
            chosen = [k for k in group if k in kinds]
            if not chosen:
                continue
            res = measured([*me, "--group", ",".join(chosen), *common])
            for x in res["runs"]:  # the peak PSS is the group's: all its loaders at once
                x = {**x, "peak_pss_group_mb": res["peak_pss_tree_mb"]}
                runs[x["kind"]].append(x)
                print(json.dumps({"repeat": r, **x}), flush=True)
    fields = (
        "frames_per_s",
        "warmup_frames_per_s",
        "time_to_first_batch_s",
        "peak_pss_tree_mb",
        "peak_pss_group_mb",
        "cpu_ms_per_batch_main",
        "cpu_ms_per_batch_workers",
    )
    med = {
        k: {f: statistics.median(x[f] for x in rs) for f in fields if all(f in x for x in rs)} for k, rs in runs.items()
    }
    # each repeat's ratio (the same run's loaders: one process in turns, or processes one after the other), then
    # their median; from frames/s, and from CPU time per batch (single / mixture: main thread and workers)
    ratios, spreads = {}, {}
    for name, num, den in RATIOS:
        if num in runs and den in runs:
            each = [x["frames_per_s"] / y["frames_per_s"] for x, y in zip(runs[num], runs[den])]
            cpu = [_cpu_ms(y) / _cpu_ms(x) for x, y in zip(runs[num], runs[den])]
            ratios[name], ratios[f"{name}_cpu"] = statistics.median(each), statistics.median(cpu)
            spreads[name], spreads[f"{name}_cpu"] = [min(each), max(each)], [min(cpu), max(cpu)]
    how = "each loader in its own process" if a.separate else f"each group's loaders in one process, turns of {block}"
    print(
        f"\n{a.episodes} episodes ({a.min_length}-{a.max_length} frames, 2 cameras {a.height}x{a.width}, AV1 g=2), "
        f"batch {a.batch_size}, {a.workers} workers, {how}; medians of {a.repeats}"
    )
    nan = float("nan")
    pss = "peak_pss_tree_mb" if a.separate else "peak_pss_group_mb"
    print(
        f"{'loader':>15} {'frames/s':>9} {'runs':>24} {'warm-up':>8} {'ttfb s':>7} {'PSS MB':>7} "
        f"{'CPU ms/batch: main':>19} {'workers':>8}"
    )
    for k, m in med.items():
        each = ",".join(f"{x['frames_per_s']:.0f}" for x in runs[k])
        print(
            f"{k:>15} {m['frames_per_s']:>9.0f} {each:>24} {m['warmup_frames_per_s']:>8.0f} "
            f"{m['time_to_first_batch_s']:>7.2f} {m.get(pss, nan):>7.0f} "
            f"{m.get('cpu_ms_per_batch_main', nan):>19.1f} {m.get('cpu_ms_per_batch_workers', nan):>8.1f}"
        )
    bar = {"stream": 0.95, "map": 0.9}
    for name, v in ratios.items():
        target = bar.get(name)
        lo, hi = spreads[name]
        print(
            f"ratio {name}: {v:.2f} (repeats {lo:.2f}-{hi:.2f})"
            + (f" (bar >= {target}: {'met' if v >= target else 'MISSED'})" if target else "")
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {
                    "medians": med,
                    "ratios": ratios,
                    "ratio_spreads": spreads,
                    "runs": runs,
                    "params": _params(a),
                    "args": {k: v for k, v in vars(a).items() if k not in ("one", "group")},
                    "cores": os.cpu_count(),
                },
                f,
                indent=2,
            )
    return 0


def _cpu_ms(run: dict) -> float:
    """CPU ms per batch of a run: main process (or thread) and workers."""
    return run["cpu_ms_per_batch_main"] + run["cpu_ms_per_batch_workers"]


if __name__ == "__main__":
    sys.exit(main())
