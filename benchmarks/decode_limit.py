"""The machine's video-decode limit for a dataset's files, with plain PyAV (no episodic code).

* random: what any loader of random frames must do at least, per frame: seek to the key frame at or before
  it, decode forward to it, convert it to an RGB array (``to_ndarray(format="rgb24")``). Frames drawn
  uniformly over every camera file's frames; one decode thread per process.
* random, decode only: the same without the conversion (the decoder alone; a loader that converts faster
  than ``to_ndarray(format="rgb24")`` can come closer to it).
* sequential: every frame of a file in order, converted to RGB.

Per core = one process; "all cores" = one process per core at once (what the machine really does when every
core decodes: memory bandwidth and turbo included). A loader's samples/s limit is the random frames/s on all
cores divided by the number of cameras per sample.

    python benchmarks/decode_limit.py --root DATASET [--seconds 8] [--cores 2]
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing as mp
import os
import sys
import time

import av
import numpy as np


def _index(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Frame pts (sorted) and the pts of each frame's key frame, from the packets."""
    with av.open(path) as c:
        s = c.streams.video[0]
        pk = sorted((p.pts, p.is_keyframe) for p in c.demux(s) if p.size and p.pts is not None)
    pts = np.array([p for p, _ in pk], np.int64)
    key = np.array([k for _, k in pk], bool)
    key[0] = True
    return pts, pts[np.maximum.accumulate(np.where(key, np.arange(len(pts)), 0))]


def random_access(files: list[str], seconds: float, seed: int, rgb: bool = True) -> dict:
    """Random single frames for `seconds`: frames/s and decodes per frame (`rgb=False`: decoded frames only,
    no conversion: the decoder's own limit)."""
    idx = {f: _index(f) for f in files}
    conts = {f: av.open(f) for f in files}
    for c in conts.values():
        c.streams.video[0].thread_count = 1
    sizes = np.array([len(idx[f][0]) for f in files], float)
    rng = np.random.default_rng(seed)
    n = decoded = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fi = int(rng.choice(len(files), p=sizes / sizes.sum()))
        f = files[fi]
        pts, key_pts = idx[f]
        j = int(rng.integers(len(pts)))
        c = conts[f]
        s = c.streams.video[0]
        c.seek(int(key_pts[j]), stream=s, backward=True, any_frame=False)
        for frame in c.decode(s):
            decoded += 1
            if frame.pts is not None and frame.pts >= pts[j]:
                if rgb:
                    frame.to_ndarray(format="rgb24")
                break
        n += 1
    elapsed = time.perf_counter() - t0
    for c in conts.values():
        c.close()
    return {"frames_per_s": n / elapsed, "decodes_per_frame": decoded / max(n, 1)}


def sequential(files: list[str], seconds: float) -> dict:
    n, t0 = 0, time.perf_counter()
    for f in files * 100:
        with av.open(f) as c:
            c.streams.video[0].thread_count = 1
            for frame in c.decode(video=0):
                frame.to_ndarray(format="rgb24")
                n += 1
                if time.perf_counter() - t0 >= seconds:
                    return {"frames_per_s": n / (time.perf_counter() - t0)}
    return {"frames_per_s": n / (time.perf_counter() - t0)}


def _worker(kind: str, files: list[str], seconds: float, seed: int, q) -> None:
    q.put(
        random_access(files, seconds, seed, rgb=kind == "random")
        if kind.startswith("random")
        else sequential(files, seconds)
    )


def on_cores(kind: str, files: list[str], seconds: float, cores: int) -> float:
    """Summed frames/s of `cores` processes running at once."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(kind, files, seconds, 100 + i, q)) for i in range(cores)]
    for p in procs:
        p.start()
    rates = [q.get()["frames_per_s"] for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


def camera_files(root: str) -> tuple[list[str], int]:
    files = sorted(glob.glob(os.path.join(root, "videos", "**", "*.mp4"), recursive=True))
    with open(os.path.join(root, "meta", "info.json")) as f:
        feats = json.load(f)["features"]
    cams = sum(1 for v in feats.values() if v.get("dtype") == "video")
    if not files or not cams:
        sys.exit(f"{root}: no video files / cameras")
    return files, cams


def measure(root: str, seconds: float = 8.0, cores: int = 2) -> dict:
    files, cams = camera_files(root)
    one = random_access(files, seconds, 0)
    out = {
        "cameras": cams,
        "random_per_core_fps": one["frames_per_s"],
        "decodes_per_random_frame": one["decodes_per_frame"],
        "sequential_per_core_fps": sequential(files, seconds)["frames_per_s"],
        "random_all_cores_fps": on_cores("random", files, seconds, cores),
        "cores": cores,
        "decode_only_per_core_fps": random_access(files, seconds, 1, rgb=False)["frames_per_s"],
        "decode_only_all_cores_fps": on_cores("random-decode-only", files, seconds, cores),
    }
    out["limit_samples_per_s"] = out["random_all_cores_fps"] / cams
    out["decode_only_limit_samples_per_s"] = out["decode_only_all_cores_fps"] / cams
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    print(json.dumps(measure(a.root, a.seconds, a.cores)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
