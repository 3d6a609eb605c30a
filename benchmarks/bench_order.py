"""Benchmark episodic.order: EpisodeAwareSampler over 1e6 episodes / 1e9 frames.

    python benchmarks/bench_order.py [--repeats 5] [--json OUT.json] [--baseline OLD.json]

Bars: construction < 1 s and < 64 MB added RSS; first 1e6 indices < 0.5 s.
All times are medians over --repeats runs; the added RSS is that of the first construction.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import platform
import statistics
import time

import numpy as np

from episodic.order import EpisodeAwareSampler, EpisodicBatchSampler

BARS = {"construct_s": 1.0, "construct_added_rss_mb": 64.0, "first_1e6_iter_s": 0.5}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(num_episodes: int, frames_per_episode: int, repeats: int) -> dict:
    starts = np.arange(num_episodes, dtype=np.int64) * frames_per_episode
    ends = starts + frames_per_episode
    out: dict = {"num_episodes": num_episodes, "num_frames": num_episodes * frames_per_episode}

    construct, added = [], []
    for _ in range(repeats):
        gc.collect()
        before = rss_mb()
        t0 = time.perf_counter()
        sampler = EpisodeAwareSampler(starts, ends, shuffle=True, seed=0)
        construct.append(time.perf_counter() - t0)
        added.append(rss_mb() - before)
        del sampler
    out["construct_s"] = statistics.median(construct)
    out["construct_added_rss_mb"] = added[0]  # the first, cold construction: later ones reuse freed heap
    sampler = EpisodeAwareSampler(starts, ends, shuffle=True, seed=0)
    out["stored_mb"] = sum(a.nbytes for a in vars(sampler.frames).values() if isinstance(a, np.ndarray)) / 2**20

    first = 10**6
    for shuffle in (True, False):
        sampler.shuffle = shuffle
        tag = "" if shuffle else "_noshuffle"
        out[f"first_1e6_iter_s{tag}"] = median_time(lambda: list(itertools.islice(iter(sampler), first)), repeats)
        out[f"first_1e6_vector_s{tag}"] = median_time(lambda: sampler.indices_at(np.arange(first)), repeats)
    sampler.shuffle = True

    rng = np.random.default_rng(0)
    n = len(sampler)
    singles = rng.integers(0, n, 2000).tolist()
    out["seek_single_us"] = median_time(lambda: [sampler.indices_at(p) for p in singles], repeats) / 2000 * 1e6
    many = rng.integers(0, n, first)
    out["seek_1e6_random_s"] = median_time(lambda: sampler.indices_at(many), repeats)

    def resume_first_batch():
        bs = EpisodicBatchSampler(sampler, 256, rank=3, world_size=8)
        bs.load_state_dict({"seed": 0, "epoch": 5, "consumed": int(rng.integers(0, n // 2048)) * 2048})
        next(iter(bs))

    out["resume_first_batch_ms"] = median_time(resume_first_batch, repeats) * 1e3
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=10**6)
    ap.add_argument("--frames-per-episode", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", dest="json_out", help="write results here")
    ap.add_argument("--baseline", help="a previous --json output to compare with")
    args = ap.parse_args()

    res = run(args.episodes, args.frames_per_episode, args.repeats)
    res["machine"] = {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count()}
    base = json.load(open(args.baseline)) if args.baseline else {}
    print(f"episodes={res['num_episodes']:,} frames={res['num_frames']:,} (medians of {args.repeats})")
    failed = False
    for key, value in res.items():
        if not isinstance(value, float):
            continue
        line = f"  {key:28s} {value:12.4f}"
        if key in BARS:
            ok = value < BARS[key]
            failed |= not ok
            line += f"   bar < {BARS[key]:g}: {'ok' if ok else 'FAIL'}"
        if isinstance(base.get(key), (int, float)) and base[key]:
            line += f"   baseline {base[key]:.4f} ({value / base[key]:.2f}x)"
        print(line)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(res, f, indent=2)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
