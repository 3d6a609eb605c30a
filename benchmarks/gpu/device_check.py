#!/usr/bin/env python3
"""GPU decoding measured on a lent GPU machine (run by device_check.sh; results as JSON in OUT):

1. datasets written by episodic's writer from textured frames (a static background, moving blobs, sensor noise:
   a fixed robot camera): H.264 480x640 x 2 cameras (several files per camera), HEVC 480x640 x 2, H.264
   720x1280 x 3 (g=2, crf=30, as LeRobot writes);
2. frame accuracy: decode_device="cuda" vs the CPU path on EVERY frame of the 480x640 H.264 and HEVC datasets and
   of LeRobot's H.264 fixture (each file's first and last included): per-frame max and mean absolute difference,
   frames over 2/255; AV1 (the fixture by episodic's writer): the named error, or its frames where NVDEC has AV1;
3. the NVDEC limit of this machine, measured in the same run: K decoders (PyNvVideoCodec SimpleDecoder) on
   threads, random sorted batches of 32 frames of one file, K in 1, 4, 8 and the engine count;
4. the benchmark: decode {cpu, cuda} x {map-style, streaming} at 480x640 x 2 and 720x1280 x 3: camera frames/s,
   the fraction of the NVDEC limit (cuda), GPU memory, CPU cores used (process tree CPU time / wall time).

Usage: device_check.py --out DIR [--seconds S] [--dry-run]. --dry-run (no GPU): the same steps on the CPU with
PyAV standing in for NVDEC and tiny sizes, to check the script before device time is spent.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from episodic import EpisodicDataset  # noqa: E402
from episodic.datasets.streaming import StreamingLeRobotDataset  # noqa: E402
from episodic.format.errors import GpuDecodeError  # noqa: E402
from episodic.testing.synthetic import camera_frames  # noqa: E402
from episodic.writer import DatasetWriter  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--seconds", type=float, default=6.0, help="measured seconds per benchmark cell")
ap.add_argument("--dry-run", action="store_true")
args = ap.parse_args()
OUT = Path(args.out)
OUT.mkdir(parents=True, exist_ok=True)
DATA = Path(os.environ.get("EPISODIC_DEVICE_DATA", "/tmp/episodic-device-data"))
R: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "dry_run": args.dry_run, "errors": {}}
CORES = len(os.sched_getaffinity(0))


def save() -> None:
    (OUT / "device_check.json").write_text(json.dumps(R, indent=1, default=str))


def step(name: str, fn):
    t0 = time.perf_counter()
    print(f"== {name}", flush=True)
    try:
        R[name] = fn()
    except Exception:  # noqa: BLE001  recorded; the next step runs
        R["errors"][name] = traceback.format_exc()[-3000:]
        print(R["errors"][name], flush=True)
    R.setdefault("step_seconds", {})[name] = round(time.perf_counter() - t0, 1)
    print(f"   {name}: {R['step_seconds'][name]} s", json.dumps(R.get(name), default=str)[:1500], flush=True)
    save()


if args.dry_run:  # the machine's answers replaced as in tests/datasets/test_gpu_frames.py
    from episodic.datasets import gpu_frames as G
    from episodic.video import nvdec_caps as C
    from episodic.video.decoder import VideoReader

    from support import FakeNvdecDriver

    class _PyAV:
        name = "PyAV stand-in"

        def open(self, path):
            return VideoReader(path)

        def reopen(self, s, path):
            s.close()
            return VideoReader(path)

        def frames(self, s, idx):
            return torch.from_numpy(s.decode(np.asarray(idx))).permute(0, 3, 1, 2).contiguous()

    C.load_driver = lambda: FakeNvdecDriver()
    G.resolve_device = lambda device: torch.device("cpu")
    G.open_backend = lambda gpu_id: _PyAV()
    SIZES = {"480x640x2": (48, 64, 2), "720x1280x3": (72, 128, 3)}
    EPISODES, LENGTH = 4, 40
else:
    SIZES = {"480x640x2": (480, 640, 2), "720x1280x3": (720, 1280, 3)}
    EPISODES, LENGTH = 8, 150


def write(name: str, h: int, w: int, cams: int, vcodec: str, episodes: int, length: int, file_mb: float = 200):
    root = DATA / name
    if (root / "meta" / "info.json").exists():
        return str(root)
    keys = ["observation.images.top", "observation.images.wrist", "observation.images.side"][:cams]
    feats = {
        "observation.state": {"dtype": "float32", "shape": [6]},
        "action": {"dtype": "float32", "shape": [6]},
        **{k: {"dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"]} for k in keys},
    }
    with DatasetWriter(
        root,
        fps=30,
        features=feats,
        vcodec=vcodec,
        gop=2,
        crf=30,
        overwrite=True,
        fsync=False,
        video_files_size_in_mb=file_mb,
    ) as wr:
        for e in range(episodes):
            ep = {k: camera_frames(h, w, length, seed=i % 2) for i, k in enumerate(keys)}
            ep["observation.state"] = np.random.default_rng(e).random((length, 6), dtype=np.float32)
            ep["action"] = np.random.default_rng(e + 100).random((length, 6), dtype=np.float32)
            wr.add_episode(ep, task="pick")
    return str(root)


def datasets() -> dict:
    h, w, _ = SIZES["480x640x2"]
    H, W, cams = SIZES["720x1280x3"]
    t = {}
    for name, a in {
        "h264_480x640x2": (h, w, 2, "h264", EPISODES, LENGTH, 4 if not args.dry_run else 0.02),
        "hevc_480x640x2": (h, w, 2, "hevc", 3, 60 if not args.dry_run else 20, 1 if not args.dry_run else 0.02),
        "h264_720x1280x3": (H, W, cams, "h264", max(2, EPISODES // 2), LENGTH, 200),
    }.items():
        t0 = time.perf_counter()
        t[name] = {"root": write(name, *a), "write_seconds": round(time.perf_counter() - t0, 1)}
    return t


def compare(root: str, chunk: int = 64) -> dict:
    """Every frame, CPU path vs decode_device='cuda' (uint8): per-frame max/mean |difference| over all cameras."""
    cpu = EpisodicDataset(root, return_uint8=True)
    dev = EpisodicDataset(root, return_uint8=True, decode_device="cuda")
    worst, means, over = [], [], []
    for s in range(0, len(cpu), chunk):
        idx = np.arange(s, min(len(cpu), s + chunk))
        a, b = cpu.get_batch(idx), dev.get_batch(idx)
        for k in cpu.camera_keys:
            d = (a[k].to(torch.int16) - b[k].cpu().to(torch.int16)).abs().flatten(1)
            mx = d.amax(1).numpy()
            worst.append(mx)
            means.append(d.float().mean(1).numpy())
            over += [(int(i), k, int(m)) for i, m in zip(idx, mx) if m > 2]
    worst, means = np.concatenate(worst), np.concatenate(means)
    files = {k: len(cpu.meta.episodes.cameras[k].files) for k in cpu.camera_keys}
    return {
        "root": root,
        "frames": len(cpu),
        "camera_frames": int(len(worst)),
        "files": files,
        "max_abs": int(worst.max()),
        "mean_abs": round(float(means.mean()), 4),
        "p99_frame_max": float(np.percentile(worst, 99)),
        "frames_over_2": len(over),
        "first_over_2": over[:20],
        "gpu_stats": dev.gpu.stats(),
    }


def accuracy() -> dict:
    ds = R.get("datasets", {})
    roots = {name: ds[name]["root"] for name in ("h264_480x640x2", "hevc_480x640x2") if name in ds}
    for name in ("lerobot_h264", "lerobot_hevc"):  # LeRobot's writer: B-frames
        roots[name] = str(ROOT / "tests/fixtures" / name / "dataset")
    roots["av1"] = str(ROOT / "tests/fixtures/episodic_written_av1/dataset")  # no AV1 NVDEC on an H100/H200
    out = {}
    for name, root in roots.items():  # one failing dataset does not hide the others'
        try:
            out[name] = compare(root)
        except GpuDecodeError as e:  # refused at construction (LeRobot's HEVC: B-frames)
            out[name] = {"named_error": str(e)}
        except Exception:  # noqa: BLE001
            out[name] = {"error": traceback.format_exc()[-2000:]}
    return out


def raw_nvdec() -> dict:
    """The decode library alone, on one file of each kind: every frame by index (one call, and one frame per
    call), against PyAV's own sequential decode; for a frame that differs, the PyAV frame it is closest to."""
    import av

    from episodic.datasets import gpu_frames as G

    backend = G.open_backend(0)
    files = {
        name: sorted((ROOT / "tests/fixtures" / name / "dataset").glob("videos/observation.images.top/*/*.mp4"))[0]
        for name in ("lerobot_h264", "lerobot_hevc")
    }
    for name in ("h264_480x640x2", "hevc_480x640x2"):
        if name in R.get("datasets", {}):
            files[name] = sorted(Path(R["datasets"][name]["root"]).glob("videos/observation.images.top/*/*.mp4"))[0]
    out = {}
    for name, path in files.items():
        try:
            with av.open(str(path)) as c:
                ref = torch.from_numpy(np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)]))
            ref = ref.permute(0, 3, 1, 2).to(torch.int16)
            n = len(ref)
            s = backend.open(str(path))
            r: dict = {"file": str(path), "pyav_frames": n, "nvdec_len": len(s) if hasattr(s, "__len__") else None}
            for how in ("batch", "single", "reverse"):
                try:
                    if how == "batch":
                        got = backend.frames(s, list(range(n)))
                    elif how == "single":
                        got = torch.cat([backend.frames(s, [i]) for i in range(n)])
                    else:
                        got = torch.cat([backend.frames(s, [i]) for i in reversed(range(n))]).flip(0)
                    got = got.cpu().to(torch.int16)
                    d = (got - ref).abs().flatten(1)
                    bad = torch.nonzero(d.amax(1) > 2).flatten().tolist()
                    near = {i: int((got[i] - ref).abs().flatten(1).float().mean(1).argmin()) for i in bad[:12]}
                    r[how] = {
                        "max_abs": int(d.max()),
                        "frames_over_2": len(bad),
                        "first_bad": bad[:12],
                        "closest_pyav_frame": near,
                    }
                except Exception as e:  # noqa: BLE001
                    r[how] = {"error": repr(e)[:500]}
            out[name] = r
        except Exception:  # noqa: BLE001
            out[name] = {"error": traceback.format_exc()[-1500:]}
    return out


def nvdec_limit() -> dict:
    """Random sorted batches of 32 frames of one file on K decoders (threads), ~2 s per K."""
    from episodic.datasets import gpu_frames as G

    backend = G.open_backend(0)
    res = {}
    for name in ("h264_480x640x2", "h264_720x1280x3"):
        root = Path(R["datasets"][name]["root"])
        path = str(sorted(root.glob("videos/observation.images.top/*/*.mp4"))[0])
        n = EpisodicDataset(root).meta.episodes.cameras["observation.images.top"].to_ts.max() * 30
        n = int(min(n, len(__import__("episodic.video.decoder", fromlist=["VideoReader"]).VideoReader(path).index)))
        cells = {}
        for k in sorted({1, 4, 8, max(1, _engines())}):
            counts, errors = [0] * k, []

            def work(j, path=path, n=n, counts=counts, errors=errors):  # this round's, bound now
                try:
                    s = backend.open(path)
                    g = np.random.default_rng(j)
                    end = time.perf_counter() + (0.5 if args.dry_run else 2.0)
                    while time.perf_counter() < end:
                        backend.frames(s, sorted(g.choice(n, min(32, n), replace=False).tolist()))
                        counts[j] += min(32, n)
                except Exception as e:  # noqa: BLE001
                    errors.append(repr(e))

            threads = [threading.Thread(target=work, args=(j,)) for j in range(k)]
            t0 = time.perf_counter()
            [t.start() for t in threads]
            [t.join() for t in threads]
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            cells[f"K{k}"] = {"fps": round(sum(counts) / (time.perf_counter() - t0), 1), "errors": errors[:2]}
        res[name] = {"file": path, "cells": cells, "limit_fps": max(c["fps"] for c in cells.values())}
    return res


def _engines() -> int:
    from episodic.video.nvdec_caps import probe_nvdec

    p = probe_nvdec((("h264", 420, 8),))
    return p.gpus[0].codecs[("h264", 420, 8)].engines if p.gpus else 0


def _cpu_seconds() -> float:
    """CPU seconds of this process, its live children and its children already reaped (DataLoader workers of
    an ended streaming epoch): differences over a window count each process's time in it."""
    import resource

    import psutil

    me = psutil.Process()
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = done.ru_utime + done.ru_stime
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def cell(root: str, mode: str, device: str, cams: int) -> dict:
    workers = max(1, CORES - 2) if device == "cpu" else min(4, max(1, CORES - 2))
    kw = {"decode_device": device} if device == "cuda" else {}
    if mode == "map":
        ds = EpisodicDataset(root, return_uint8=True, **kw)
        loader = ds.loader(batch_size=32, num_workers=workers, seed=0)
    else:
        ds = StreamingLeRobotDataset(None, root=root, return_uint8=True, episode_pool_size=4, **kw)
        loader = ds.loader(batch_size=32, num_workers=workers)
    if torch.cuda.is_available():
        gc.collect()  # the previous cell's loader and sessions go now, not during this cell's reading
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    free0 = torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else 0

    def batches():  # epoch after epoch
        while True:
            yield from loader

    it = batches()
    for _ in range(3):
        next(it)
    items, t0, c0 = 0, time.perf_counter(), _cpu_seconds()
    while time.perf_counter() - t0 < args.seconds:
        items += len(next(it)["index"])
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - t0, _cpu_seconds() - c0
    out = {
        "workers": workers,
        "items_per_s": round(items / wall, 1),
        "camera_frames_per_s": round(items * cams / wall, 1),
        "cpu_cores_used": round(cpu / wall, 2),
    }
    if torch.cuda.is_available() and device == "cuda":
        out["gpu_memory_used_mb"] = round((free0 - torch.cuda.mem_get_info()[0]) / 2**20, 1)
        out["torch_max_allocated_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    if device == "cuda":
        out["gpu"] = ds.gpu.stats()
    it.close()
    loader = None  # its workers stop
    return out


def benchmark() -> dict:
    res = {}
    limits = R.get("nvdec_limit", {})
    for size, (_, _, cams) in SIZES.items():
        name = f"h264_{size}"
        root = R["datasets"][name]["root"]
        for mode in ("map", "stream"):
            for device in ("cpu", "cuda"):
                key = f"{size}/{mode}/{device}"
                try:
                    c = cell(root, mode, device, cams)
                except Exception:  # noqa: BLE001
                    c = {"error": traceback.format_exc()[-1500:]}
                lim = limits.get(name, {}).get("limit_fps")
                if device == "cuda" and lim and "camera_frames_per_s" in c:
                    c["fraction_of_nvdec_limit"] = round(c["camera_frames_per_s"] / lim, 3)
                res[key] = c
                print("  ", key, c, flush=True)
                save()
    return res


step(
    "environment",
    lambda: {
        "cores": CORES,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "doctor": __import__("episodic.tools.doctor", fromlist=["doctor"]).doctor().to_json(),
    },
)
step("datasets", datasets)
step("raw_nvdec", raw_nvdec)
step("accuracy", accuracy)
step("nvdec_limit", nvdec_limit)
step("benchmark", benchmark)
b = R.get("benchmark", {}).get("480x640x2/map/cuda", {})
R["bar"] = {
    "map_480x640x2_fraction_of_nvdec_limit": b.get("fraction_of_nvdec_limit"),
    "met_80_percent": (b.get("fraction_of_nvdec_limit") or 0) >= 0.8,
    "accuracy_within_2": {
        k: v.get("max_abs", None) is not None and v["max_abs"] <= 2
        for k, v in R.get("accuracy", {}).items()
        if "max_abs" in v
    },
    "av1_named_error": "named_error" in R.get("accuracy", {}).get("av1", {}),
}
R["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
save()
print("bar:", json.dumps(R["bar"]), flush=True)
