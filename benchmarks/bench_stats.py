"""Normalisation statistics from the data (issue 23, item 3): frames/s of `episodic stats` on one realistic
dataset and on a 400-entry mixture, first run (cold cache) vs re-run (cache only), against numpy on the same data.

The data (written once with episodic's writer, reused when present under --data):
  big       ONE tabular dataset of --episodes episodes of --length frames (300,000 frames by default), state 32
            and action 24 float32 dimensions (random walks), data files of 100 MB.
  mix400    400 tiny heterogeneous datasets (`episodic.testing.synthetic`, no cameras: statistics never read
            them), and a spec over them in which every 5th entry selects episodes and every 7th indexes its state.

Measured in this process, --repeats times interleaved (medians reported; the statistics cache in a fresh
directory for every cold run; the data files read once before, so every run finds them in the page cache):
  big, cold        `tabular.column_stats.compute_stats` of every numeric feature (7 keys) over every episode
  big, numpy       the reference: the same columns read with pyarrow, then np.mean/std/min/max/quantile (what the
                   tests compare with), for scale
  big, cached      the same call again (reads only the cache)
  mix400, cold     `tools.stats_command.mixture_stats` (preflight of the spec, every entry's state and action from the
                   data, pooled per group) with --workers processes
  mix400, cached   the same again: every entry from the cache
  cold, 1 proc.    the cold runs with --workers 1 (one process; for the big dataset, no threads either)
Frames/s = the frames whose statistics were computed / the seconds of the computation. CPU seconds (this process
and the pool's workers, user + system) are given beside: on a shared machine they vary less than wall times.

    python benchmarks/bench_stats.py [--data /tmp/episodic-bench-stats] [--workers N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

import numpy as np

STATE, ACTION = 32, 24


def write_big(root: str, episodes: int, length: int) -> None:
    from episodic.writer import DatasetWriter

    if os.path.exists(os.path.join(root, "meta", "info.json")):
        return
    rng = np.random.default_rng(0)
    feats = {
        "observation.state": {"dtype": "float32", "shape": [STATE]},
        "action": {"dtype": "float32", "shape": [ACTION]},
    }
    with DatasetWriter(root, fps=30, features=feats, overwrite=True, fsync=False) as w:
        for _e in range(episodes):
            state = np.cumsum(rng.normal(0, 0.05, (length, STATE)), axis=0) + rng.normal(0, 1, STATE)
            action = state[:, :ACTION] + rng.normal(0, 0.01, (length, ACTION))
            w.add_episode(
                {"observation.state": state.astype(np.float32), "action": action.astype(np.float32)}, task="pick"
            )


def write_mix(root: str) -> str:
    from episodic.testing.synthetic import mixture_spec, write_synthetic_datasets

    spec_path = os.path.join(root, "spec.json")
    if os.path.exists(spec_path):
        return spec_path
    datasets = write_synthetic_datasets(root, 400, seed=23, cameras=(0, 0), episodes=(2, 6), length=(20, 120))
    spec = mixture_spec(datasets)
    for i, entry in enumerate(spec["entries"]):
        if i % 5 == 1:
            entry["episodes"] = [0, 1]
        if i % 7 == 3:
            entry["state_indices"] = list(range(datasets[i].state_dim))[::-1][:5]
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    return spec_path


def numpy_reference(root: str) -> tuple[float, int]:
    """The reference computation's seconds: columns read with pyarrow, statistics with numpy."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from episodic.format.stats import QUANTILES

    t0 = time.perf_counter()
    files = sorted(
        p
        for p in (os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, "data")) for f in fs)
        if p.endswith(".parquet")
    )
    table = pa.concat_tables([pq.read_table(p) for p in files])
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        x = (
            col.flatten().to_numpy().reshape(len(col), -1)
            if pa.types.is_fixed_size_list(col.type) or pa.types.is_list(col.type)
            else col.to_numpy().reshape(-1, 1)
        ).astype(np.float64)
        _ = (x.mean(0), x.std(0), x.min(0), x.max(0), np.quantile(x, list(QUANTILES.values()), axis=0))
    return time.perf_counter() - t0, table.num_rows


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the pool's workers), user + system."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "episodic-bench-stats"))
    ap.add_argument("--episodes", type=int, default=600)
    ap.add_argument("--length", type=int, default=500)
    ap.add_argument("--workers", type=int, default=None, help="processes (default: the usable cores)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    from episodic.runtime import usable_cores
    from episodic.storage import open_source
    from episodic.tabular.column_stats import StatsJob, compute_stats, numeric_keys
    from episodic.tools.stats_command import mixture_stats

    big = os.path.join(a.data, "big")
    t0 = time.perf_counter()
    write_big(big, a.episodes, a.length)
    spec = write_mix(os.path.join(a.data, "mix400"))
    print(f"data ready in {time.perf_counter() - t0:.1f} s under {a.data}")
    out: dict = {"cores": usable_cores(), "workers": a.workers or usable_cores(), "repeats": a.repeats}
    os.environ["EPISODIC_PROGRESS"] = "0"
    source = open_source(big)
    meta = source.load_metadata()
    job = StatsJob(source, meta, tuple(numeric_keys(meta)), None, "big")
    numpy_reference(big)  # the files in the page cache
    runs: dict[str, list[float]] = {}
    for _ in range(a.repeats):
        cache = tempfile.mkdtemp(prefix="episodic-stats-cache-")
        solo = tempfile.mkdtemp(prefix="episodic-stats-cache-")  # cold runs with one process (and no threads)
        try:
            for name, call in (
                ("big_cold", lambda cache=cache: compute_stats([job], workers=a.workers, cache=cache)),
                ("big_cached", lambda cache=cache: compute_stats([job], workers=a.workers, cache=cache)),
                ("big_cold_1", lambda solo=solo: compute_stats([job], workers=1, cache=solo)),
                ("big_numpy", lambda: numpy_reference(big)),
                ("mix_cold", lambda cache=cache: mixture_stats(spec, workers=a.workers, cache=cache)),
                ("mix_cached", lambda cache=cache: mixture_stats(spec, workers=a.workers, cache=cache)),
                ("mix_cold_1", lambda solo=solo: mixture_stats(spec, workers=1, cache=solo)),
            ):
                t0, c0 = time.perf_counter(), _cpu()
                got = call()
                runs.setdefault(name, []).append(time.perf_counter() - t0)
                runs.setdefault(name + "_cpu", []).append(_cpu() - c0)
                if name.startswith("mix"):  # the statistics alone (the rest is the spec's preflight)
                    runs.setdefault(name + "_stats", []).append(got["seconds"])
                    cached = sum(e["cached"] for e in got["entries"])
                    assert cached == (400 if name == "mix_cached" else 0), (name, cached)
                    mix = {"entries": len(got["entries"]), "groups": len(got["groups"]), "frames": got["frames"]}
                elif name != "big_numpy":
                    assert got[0].from_cache == (name == "big_cached")
                    frames = got[0].frames
        finally:
            shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(solo, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    out["seconds"] = med
    out["big"] = {
        "frames": frames,
        "keys": len(job.keys),
        "dims": STATE + ACTION + 5,
        **{f"{k}_frames_per_s": frames / med[f"big_{k}"] for k in ("cold", "cold_1", "numpy")},
    }
    out["mix400"] = {**mix, **{f"{k}_frames_per_s": mix["frames"] / med[f"mix_{k}_stats"] for k in ("cold", "cold_1")}}
    b, m = out["big"], out["mix400"]
    print(
        f"big: {frames:,} frames, {len(job.keys)} keys ({b['dims']} dims)\n"
        f"  cold           {med['big_cold']:6.2f} s  {b['cold_frames_per_s']:>11,.0f} frames/s  CPU "
        f"{med['big_cold_cpu']:.2f} s\n"
        f"  cold, 1 proc.  {med['big_cold_1']:6.2f} s  {b['cold_1_frames_per_s']:>11,.0f} frames/s  CPU "
        f"{med['big_cold_1_cpu']:.2f} s\n"
        f"  numpy          {med['big_numpy']:6.2f} s  {b['numpy_frames_per_s']:>11,.0f} frames/s  CPU "
        f"{med['big_numpy_cpu']:.2f} s\n"
        f"  cached         {med['big_cached'] * 1e3:6.1f} ms"
    )
    print(
        f"mix400: {m['entries']} entries, {m['frames']:,} frames, {m['groups']} groups (whole call = preflight of the "
        f"spec + statistics)\n"
        f"  cold           {med['mix_cold']:6.2f} s  statistics {med['mix_cold_stats']:.2f} s  "
        f"{m['cold_frames_per_s']:>9,.0f} frames/s  CPU {med['mix_cold_cpu']:.2f} s\n"
        f"  cold, 1 proc.  {med['mix_cold_1']:6.2f} s  statistics {med['mix_cold_1_stats']:.2f} s  "
        f"{m['cold_1_frames_per_s']:>9,.0f} frames/s  CPU {med['mix_cold_1_cpu']:.2f} s\n"
        f"  cached         {med['mix_cached']:6.2f} s  statistics {med['mix_cached_stats']:.2f} s  (every entry from "
        f"the cache)  CPU {med['mix_cached_cpu']:.2f} s"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
